"""The GPU adapter's reconcilers for the control loop, and how they are built.

- ``gpu-defrag`` (:mod:`~kubesage.adapters.gpu_training.defrag_reconciler`): a pending
  GPU pod that fails only for fragmentation gets the cheapest migration plan; background
  compaction when few GPUs are empty; MIG re-layouts through mig-parted's node label.
- ``gpu-elastic`` (:mod:`~kubesage.adapters.gpu_training.elastic_reconciler`): an
  elastic training job is scaled to its minimum through validation and back to its
  maximum when training resumes.
- ``gpu-gang`` (:mod:`~kubesage.adapters.gpu_training.gang_reconciler`): a whole-GPU
  gang is placed by the AllReduce planner on the live DRTG, all members or none.

:func:`gpu_reconcilers` builds the three from the scheduler's policy and
:class:`GpuLoopSettings`; :func:`reconcilers_for` builds them from the loop's
:class:`~kubesage.core.loop.settings.ReconcilerContext` (the service's policy, its
typical pods, the eviction and re-layout budgets), which is how the adapter registers
them.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from kubesage.adapters.gpu_training.defrag_reconciler import DefragReconciler
from kubesage.adapters.gpu_training.defrag_settings import DefragSettings
from kubesage.adapters.gpu_training.elastic_reconciler import (
    ElasticReconciler,
    ElasticSettings,
)
from kubesage.adapters.gpu_training.gang_reconciler import GangReconciler, GangSettings
from kubesage.core.errors import KubesageError
from kubesage.core.loop.actions import ActionKind
from kubesage.core.loop.reconciler import Reconciler
from kubesage.core.loop.settings import ReconcilerContext
from kubesage.core.policy.base import Policy, PolicyContext
from kubesage.core.policy.registry import make_policy

log = logging.getLogger(__name__)

FALLBACK_POLICY = "bestfit"
"""Re-places migrated pods when the service's policy cannot be built here (FGD without
typical pods)."""

__all__ = [
    "DefragReconciler",
    "DefragSettings",
    "ElasticReconciler",
    "ElasticSettings",
    "GangReconciler",
    "GangSettings",
    "GpuLoopSettings",
    "gpu_reconcilers",
    "reconcilers_for",
]


@dataclass(frozen=True)
class GpuLoopSettings:
    """Settings of the GPU adapter's reconcilers."""

    defrag: DefragSettings = field(default_factory=DefragSettings)
    elastic: ElasticSettings = field(default_factory=ElasticSettings)
    gang: GangSettings = field(default_factory=GangSettings)


def gpu_reconcilers(
    policy: Policy,
    settings: GpuLoopSettings | None = None,
    *,
    eviction_budget: int | None = None,
    relayout_budget: int | None = None,
) -> list[Reconciler]:
    """``gpu-defrag``, ``gpu-elastic`` and ``gpu-gang``.

    ``policy`` re-places migrated pods (the scheduler's own policy). ``eviction_budget``
    and ``relayout_budget``, when given, are the loop's per-tick budgets for evictions
    and node re-layouts and replace those in ``settings`` (the defragmenter never plans
    more than the loop may do).
    """
    settings = settings or GpuLoopSettings()
    defrag = settings.defrag
    if eviction_budget is not None:
        defrag = dataclasses.replace(defrag, eviction_budget=eviction_budget)
    if relayout_budget is not None:
        defrag = dataclasses.replace(defrag, relayout_budget=relayout_budget)
    return [
        DefragReconciler(policy, defrag),
        ElasticReconciler(settings.elastic),
        GangReconciler(settings.gang),
    ]


def reconcilers_for(
    context: ReconcilerContext, settings: GpuLoopSettings | None = None
) -> list[Reconciler]:
    """The three reconcilers as the loop's context asks: its policy, its eviction budget."""
    try:
        policy = make_policy(context.policy, PolicyContext(workload=context.workload))
    except KubesageError as exc:
        log.warning(
            "gpu reconcilers: policy %s cannot be built (%s); migrations use %s",
            context.policy,
            exc,
            FALLBACK_POLICY,
        )
        policy = make_policy(FALLBACK_POLICY, PolicyContext(workload=context.workload))
    limits = context.settings.budgets.limits
    settings = settings or GpuLoopSettings()
    defrag = dataclasses.replace(
        settings.defrag,
        evicted_pods_come_back=context.evicted_pods_come_back,
        relayouts=context.relayouts,
    )
    settings = dataclasses.replace(settings, defrag=defrag)
    if context.rescale_restart_s is not None:
        elastic = dataclasses.replace(settings.elastic, restart_cost_s=context.rescale_restart_s)
        settings = dataclasses.replace(settings, elastic=elastic)
    if context.topology is not None:
        gang = dataclasses.replace(settings.gang, claims_gangs=True)
        settings = dataclasses.replace(settings, gang=gang)
    return gpu_reconcilers(
        policy,
        settings,
        eviction_budget=limits.get(ActionKind.EVICT),
        relayout_budget=limits.get(ActionKind.LABEL_NODE),
    )
