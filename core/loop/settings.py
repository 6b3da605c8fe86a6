"""The loop's settings, and the context a reconciler is built from.

:class:`LoopSettings` is what ``kubesage serve`` and ``kubesage loop`` read from their
options (tick, dry run, data age, budgets, audit file). :class:`ReconcilerContext` is
what an adapter's ``reconcilers(context)`` receives (``kubesage.core.adapter``): those
settings, the live topology when one is configured, and the scheduling policy the
service runs with its typical pods — enough to build a policy for what-ifs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kubesage.core.loop.budgets import Budgets
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import PodRequest

DEFAULT_TICK_S = 5.0
"""One tick per DRTG window."""
DEFAULT_MAX_DATA_AGE_S = 60.0
"""Act on nothing decided from data older than this."""


@dataclass(frozen=True)
class LoopSettings:
    """How the loop runs."""

    tick_s: float = DEFAULT_TICK_S
    dry_run: bool = False
    max_data_age_s: float | None = DEFAULT_MAX_DATA_AGE_S
    budgets: Budgets = field(default_factory=Budgets)
    audit_log: Path | None = None
    topology: str | None = None
    """A Topology YAML (path, or a shipped example's name) whose node names are the
    cluster's: the loop keeps its DRTG observed and ``gpu-gang`` plans on it."""
    prometheus: str | None = None
    """Prometheus URL: the metric map's node and GPU columns feed the forecast panel."""
    metric_map: Path | None = None
    """The metric map the Prometheus collector reads with (None: the shipped one)."""
    forecast_weight: float = 0.0
    """Weight of the forecast term in placement (0: off, the default; see
    :mod:`kubesage.core.policy.forecast_aware`)."""
    forecast_model: Path | None = None
    """A model file of ``kubesage forecast train`` the forecast panel asks every tick
    (None: the last value)."""
    mig_config_map: str | None = None
    """``NAMESPACE/NAME`` of the ConfigMap the GPU Operator's MIG Manager reads its
    mig-parted configs from: a MIG re-layout's config is published there before its node
    is labelled (None: re-layouts on nodes without DRA fail at their label step, saying
    so; :mod:`kubesage.core.k8s.node_labeler`)."""


@dataclass(frozen=True)
class ReconcilerContext:
    """What a reconciler may be built from."""

    settings: LoopSettings = field(default_factory=LoopSettings)
    topology: DRTG | None = None
    """The DRTG the loop keeps observed, when a topology is configured."""
    policy: str = "fgd"
    """The scheduling policy's registry name (``kubesage serve --policy``)."""
    workload: tuple[PodRequest, ...] = ()
    """Typical pods the policy measures fragmentation against (FGD)."""
    evicted_pods_come_back: bool = False
    """The cluster keeps an evicted pod pending under its own name (the embedded cluster,
    the simulator), so a pod with no controller may be moved; on a live cluster only a
    controller re-creates it."""
    relayouts: bool = False
    """MIG re-layouts can be applied on nodes without DRA (the loop publishes their
    mig-parted config: ``LoopSettings.mig_config_map``), so defragmentation may plan them."""
    rescale_restart_s: float | None = None
    """What resizing an elastic job costs it in this cluster (its workers restart): None,
    a live cluster's reconcilers' own default; 0 where a resize is instant (the
    simulator models no restart)."""
