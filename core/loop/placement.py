"""``forecast-placement``: the core's reconciler that places lone pending pods.

Where no other scheduler runs — the embedded cluster, the simulator — the loop is the
scheduler: every tick this reconciler places the pending pods that are the loop's to
place (:attr:`PodInfo.loop_places`) and belong to no gang (``gpu-gang`` places those
whole), one after another on its own copy of the state, with the service's policy
wrapped in the forecast term (:class:`~kubesage.core.policy.forecast_aware.ForecastAwarePolicy`):
for GPU-sharing pods, the forecast utilisation of each node's GPUs at the panel's
horizon (the metric map's per-GPU DCGM column, :data:`GPU_UTIL_METRIC`). The term is
off (weight 0) unless ``--forecast-weight`` is set; a decision it changed says so.

On a live cluster kube-scheduler (through the extender) and the secondary scheduler
place pods; ``kubesage serve`` gives both the same forecast-aware policy over the
loop's panel (:func:`forecast_policy`), so the term reaches every placement, and this
reconciler binds nothing there. A pod that fits nowhere gets a note (``gpu-defrag``
may make room for it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import FloatArray
from kubesage.core.errors import CapacityError, KubesageError
from kubesage.core.loop.actions import Action, Bind
from kubesage.core.loop.forecasts import GPU_UTIL_METRIC
from kubesage.core.loop.reconciler import Reconciled
from kubesage.core.loop.settings import ReconcilerContext
from kubesage.core.loop.view import Forecasts, WorldView
from kubesage.core.policy.base import Policy, PolicyContext
from kubesage.core.policy.forecast_aware import ForecastAwarePolicy
from kubesage.core.policy.registry import make_policy
from kubesage.core.state.cluster_state import ClusterState

log = logging.getLogger(__name__)

NAME = "forecast-placement"
FALLBACK_POLICY = "bestfit"
"""Places pods when the service's policy cannot be built here (FGD without typical pods)."""


class GpuLoadTable:
    """The panel's forecast GPU utilisation as a ``[nodes, max_gpus]`` table (0–1, NaN:
    none) for a state, cached per panel version and node list."""

    def __init__(self, forecasts: Callable[[], Forecasts]) -> None:
        self._forecasts = forecasts
        self._key: tuple[int, tuple[str, ...], int] | None = None
        self._table: FloatArray | None = None

    def __call__(self, state: ClusterState) -> FloatArray | None:
        panel = self._forecasts()
        width = state.gpu_free_milli.shape[1]
        key = (panel.version, state.node_names, width)
        if key != self._key:
            self._key, self._table = key, self._build(panel, state.node_names, width)
        return self._table

    @staticmethod
    def _build(panel: Forecasts, nodes: tuple[str, ...], width: int) -> FloatArray | None:
        table = np.full((len(nodes), width), np.nan)
        metrics = [GPU_UTIL_METRIC.format(gpu=g) for g in range(width)]
        for n, node in enumerate(nodes):
            for g, metric in enumerate(metrics):
                value = panel.predict(node, metric)
                if value is not None and math.isfinite(value):
                    table[n, g] = value / 100.0
        return table if np.isfinite(table).any() else None


def forecast_policy(
    base: Policy, forecasts: Callable[[], Forecasts], weight: float
) -> ForecastAwarePolicy:
    """``base`` with the forecast term over the panel ``forecasts()`` returns."""

    def describe() -> str:
        panel = forecasts()
        steps = panel.horizon_steps
        return f"{panel.source}, {steps} step{'s' if steps != 1 else ''} ahead"

    return ForecastAwarePolicy(base, GpuLoadTable(forecasts), weight, describe=describe)


@dataclass
class ForecastPlacement:
    """The ``forecast-placement`` reconciler (see the module docstring)."""

    policy: Policy
    """The service's policy; wrapped in the forecast term per view."""
    weight: float = 0.0
    name: str = NAME

    @property
    def reads(self) -> frozenset[str]:
        """Only the cluster: stale forecasts fall back to the last values, not to inaction."""
        return frozenset()

    @classmethod
    def from_context(cls, context: ReconcilerContext) -> ForecastPlacement:
        """The service's policy (its typical pods) and ``--forecast-weight``."""
        try:
            policy = make_policy(context.policy, PolicyContext(workload=context.workload))
        except KubesageError as exc:
            log.warning(
                "%s: policy %s cannot be built (%s); it places with %s",
                NAME,
                context.policy,
                exc,
                FALLBACK_POLICY,
            )
            policy = make_policy(FALLBACK_POLICY, PolicyContext(workload=context.workload))
        return cls(policy, context.settings.forecast_weight)

    def reconcile(self, view: WorldView) -> Reconciled:
        todo = [pod for pod in view.pending if pod.loop_places and pod.gang is None]
        if not todo:
            return Reconciled()
        policy = forecast_policy(self.policy, lambda: view.forecasts, self.weight)
        state = view.state.copy()
        actions: list[Action] = []
        notes: list[str] = []
        for pod in todo:
            decision = policy.decide(state, pod.request)
            if decision.placement is None:
                notes.append(f"{pod.ref}: {decision.explanation}")
                continue
            try:
                state.allocate(pod.request, decision.placement)
            except CapacityError as exc:  # the policy's placement must fit: a bug if not
                notes.append(f"{pod.ref}: placement on {decision.placement.node} failed: {exc}")
                continue
            term = "" if self.weight else " (forecast term off)"
            actions.append(
                Bind(
                    reconciler=NAME,
                    explanation=f"{decision.explanation}{term}",
                    pod=pod.ref,
                    request=pod.request,
                    placement=decision.placement,
                )
            )
        return Reconciled(actions=actions, notes=notes)
