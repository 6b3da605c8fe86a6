"""Forecast-aware placement: the forecast load of a node's GPUs as a term of any policy.

For a GPU-sharing pod (a share of one GPU) the interference it will see is decided by
the load its co-tenants put on that GPU, not by their requests: two pods that ask for
0.3 of a GPU each may keep it busy all the time. :class:`ForecastAwarePolicy` wraps a
policy and, for sharing pods only, blends its node score with the forecast utilisation
``u`` (0–1, at the configured horizon) of the GPU the pod would take on each node — the
least loaded GPU with room for it:

    combined = (1 − w) · base' + w · (1 − u)

where ``base'`` is the base policy's score min-max normalised over the candidate nodes
(so the term is scale-free, whatever the base policy's score range) and ``w`` is the
weight. The pod then takes that GPU. A GPU with no forecast counts at the mean of the
candidates' known loads (no forecast at all: the base policy decides alone). With
``w = 0`` — the default, until the benchmark (``benchmarks/forecast_placement.py``)
shows the term helps on a given cluster — it ranks exactly as the base policy. Whole-GPU,
MIG and CPU-only pods always go to the base policy. The decision's explanation names
the term when it changed the node or the GPU.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.policy.base import Policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import Decision, Placement, PodRequest

GpuLoads = Callable[[ClusterState], FloatArray | None]
"""Forecast utilisation (0–1) per node and GPU of the state (``[nodes, max_gpus]``, NaN:
no forecast), or None when nothing is forecast."""


def is_sharing(request: PodRequest) -> bool:
    """A pod that takes a share of one GPU (not whole GPUs, not a MIG slice)."""
    return request.is_gpu_sharing and request.mig is None


class ForecastAwarePolicy:
    """``base`` with the forecast term for GPU-sharing pods (see the module docstring)."""

    def __init__(
        self,
        base: Policy,
        loads: GpuLoads,
        weight: float,
        *,
        describe: Callable[[], str] = lambda: "forecast",
    ) -> None:
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"the forecast weight must be in [0, 1], got {weight}")
        self.base = base
        self.loads = loads
        self.weight = weight
        self.describe = describe
        """Words for the forecast in explanations (e.g. ``last-value, 1 step ahead``)."""

    @property
    def name(self) -> str:
        return self.base.name

    # -- the term -----------------------------------------------------------------------

    def _gpu_loads(
        self, state: ClusterState, request: PodRequest, nodes: IntArray
    ) -> tuple[FloatArray, IntArray] | None:
        """Per candidate node: the forecast load of the least loaded GPU with room for
        ``request``, and that GPU; None when the term does not apply."""
        if self.weight == 0.0 or nodes.size == 0 or not is_sharing(request):
            return None
        table = self.loads(state)
        if table is None or table.shape[0] != state.num_nodes:
            return None
        width = min(table.shape[1], state.gpu_free_milli.shape[1])
        loads = np.asarray(table[nodes, :width], dtype=np.float64)
        if not np.isfinite(loads).any():
            return None
        room = state.gpu_free_milli[nodes, :width] >= request.gpu_milli
        known = loads[np.isfinite(loads) & room]
        fill = float(known.mean()) if known.size else float(np.nanmean(loads))
        loads = np.where(np.isfinite(loads), np.clip(loads, 0.0, 1.0), fill)
        loads = np.where(room, loads, np.inf)
        gpu = np.argmin(loads, axis=1).astype(np.int64)
        best = loads[np.arange(nodes.size), gpu]
        # A node the base policy deems feasible has a GPU with room; guard regardless.
        return np.where(np.isfinite(best), best, 1.0), gpu

    def _blend(self, base: FloatArray, load: FloatArray) -> FloatArray:
        low, high = float(base.min()), float(base.max())
        scaled = (base - low) / (high - low) if high > low else np.ones_like(base)
        return np.asarray((1.0 - self.weight) * scaled + self.weight * (1.0 - load))

    # -- the Policy interface -----------------------------------------------------------

    def score_nodes(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        base = np.asarray(self.base.score_nodes(state, request, nodes), dtype=np.float64)
        term = self._gpu_loads(state, request, nodes)
        return base if term is None else self._blend(base, term[0])

    def placement_on(self, state: ClusterState, node: int, request: PodRequest) -> Placement:
        term = self._gpu_loads(state, request, np.array([node], dtype=np.int64))
        if term is None:
            return self.base.placement_on(state, node, request)
        return state.placement(node, (int(term[1][0]),), request)

    def decide(self, state: ClusterState, request: PodRequest) -> Decision:
        decision = self.base.decide(state, request)
        if decision.placement is None or not is_sharing(request) or self.weight == 0.0:
            return decision
        nodes = np.flatnonzero(state.feasible(request)).astype(np.int64)
        term = self._gpu_loads(state, request, nodes)
        if term is None:
            return decision
        load, gpu = term
        base = np.asarray(self.base.score_nodes(state, request, nodes), dtype=np.float64)
        scores = self._blend(base, load)
        best = int(np.argmax(scores))
        node = int(nodes[best])
        placement = state.placement(node, (int(gpu[best]),), request)
        if placement.node == decision.placement.node and (
            placement.gpu_indices == decision.placement.gpu_indices
        ):
            return decision
        where = np.flatnonzero(nodes == decision.placement.node_index)
        theirs = f" (forecast load {load[int(where[0])]:.0%})" if where.size else ""
        explanation = (
            f"{placement.node} GPU {gpu[best]} (forecast load {load[best]:.0%}) chosen by the "
            f"forecast term (weight {self.weight:g}, {self.describe()}) over {self.base.name}'s "
            f"{decision.placement.node}{theirs}; {nodes.size} feasible node(s)"
        )
        return Decision(
            request=request.name,
            placement=placement,
            score=float(scores[best]),
            policy=self.name,
            explanation=explanation,
            feasible_nodes=int(nodes.size),
        )
