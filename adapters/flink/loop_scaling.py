"""``flink-autoscaler``: the autoscaler's decision for every registered job, as a reconciler.

The step both forms of the autoscaler share — the control loop's reconciler here and
``kubesage flink autoscale``
(:func:`~kubesage.adapters.flink.autoscale_loop.run_autoscaler`) — is
:func:`scaling_step`: one observation of a job and the job's :class:`JobScaling`
memory in, the pure :func:`~kubesage.adapters.flink.autoscaler.decide` with its guard
rails, the decision and the memory for the next observation out. It notices a rescale
on its own: when the job's parallelism differs from the previous observation's, the
guard rails are told (:meth:`GuardRailMemory.after_rescale`: the oscillation guard
remembers the direction, pending proposals are forgotten), whoever rescaled it. An
observation seen before (a stale snapshot repeated) gets the same decision again and
does not count twice towards ``stable_observations``. :func:`rescale_action` turns a
decision that changes parallelism into a
:class:`~kubesage.core.loop.actions.FlinkRescale`.

:class:`FlinkAutoscaler` reads the ``flink`` collector's snapshot
(:class:`~kubesage.adapters.flink.loop_observe.RegisteredJobs`), runs the step for
every job observed, keeps each job's memory in the reconciler's memory, and asks for a
``FlinkRescale`` (explained by the decision's ``describe()``) where the decision
rescales. Its notes say which jobs it skipped and why: a decision skipped by a guard
rail, a job not read or not running.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kubesage.adapters.flink.autoscaler import (
    AutoscalerSettings,
    GuardRailMemory,
    ScalingDecision,
    decide,
)
from kubesage.adapters.flink.loop_observe import COLLECTOR_NAME, ObservedJob, RegisteredJobs
from kubesage.adapters.flink.observation import Observation
from kubesage.core.loop.actions import FlinkRescale
from kubesage.core.loop.reconciler import Reconciled
from kubesage.core.loop.view import WorldView

NAME = "flink-autoscaler"


@dataclass(frozen=True)
class JobScaling:
    """What the autoscaler remembers of one job between observations (immutable)."""

    guard_rails: GuardRailMemory = field(default_factory=GuardRailMemory)
    parallelism: Mapping[str, int] = field(default_factory=dict)
    """Vertex id → parallelism at the last observation (a change is a rescale)."""
    observed_at_s: float | None = None
    """Time of the last observation decided on."""
    decision: ScalingDecision | None = None
    """The decision on that observation (given again if it is seen again)."""


def scaling_step(
    observation: Observation,
    scaling: JobScaling | None = None,
    settings: AutoscalerSettings | None = None,
) -> tuple[ScalingDecision, JobScaling]:
    """The decision on ``observation`` and the job's memory afterwards (pure)."""
    scaling = scaling or JobScaling()
    if (
        scaling.decision is not None
        and scaling.observed_at_s is not None
        and observation.time_s <= scaling.observed_at_s
    ):
        return scaling.decision, scaling  # the same observation again: the same answer
    guard_rails = scaling.guard_rails
    now = {vertex.vertex_id: vertex.parallelism for vertex in observation.vertices}
    before = scaling.parallelism
    changed = {v: p for v, p in now.items() if v in before and before[v] != p}
    if changed:
        guard_rails = guard_rails.after_rescale(observation.time_s, before, changed)
    decision, guard_rails = decide(observation, guard_rails, settings)
    return decision, JobScaling(guard_rails, now or before, observation.time_s, decision)


def rescale_action(
    decision: ScalingDecision, *, jobmanager: str, reconciler: str = NAME
) -> FlinkRescale | None:
    """The action that applies ``decision`` (None when it changes no parallelism)."""
    changes = decision.changes
    if decision.action != "rescale" or not changes:
        return None
    return FlinkRescale(
        reconciler=reconciler,
        explanation=decision.describe(),
        jobmanager=jobmanager,
        job_id=decision.job_id,
        parallelism=changes,
    )


@dataclass(frozen=True)
class FlinkAutoscaler:
    """The ``flink-autoscaler`` reconciler (see the module docstring)."""

    settings: AutoscalerSettings = field(default_factory=AutoscalerSettings)
    collector: str = COLLECTOR_NAME
    """The collector whose snapshot lists the jobs."""
    name: str = NAME

    @property
    def reads(self) -> frozenset[str]:
        """The Flink collector's job observations (and the cluster's snapshot)."""
        return frozenset({COLLECTOR_NAME})

    def reconcile(self, view: WorldView) -> Reconciled:
        before: Mapping[str, JobScaling] = view.memory.get("jobs") or {}
        snapshot = view.snapshots.get(self.collector)
        if snapshot is None:
            return Reconciled(
                memory={"jobs": dict(before)},
                notes=(f"no snapshot from the '{self.collector}' collector yet",),
            )
        data = snapshot.data
        if not isinstance(data, RegisteredJobs):
            return Reconciled(
                memory={"jobs": dict(before)},
                notes=(f"the '{self.collector}' collector's data is not a list of Flink jobs",),
            )
        memory: dict[str, JobScaling] = {}
        actions: list[FlinkRescale] = []
        notes: list[str] = []
        if snapshot.stale:
            notes.append(f"Flink data is stale: {snapshot.reason or 'no reason given'}")
        for job in sorted(data.jobs, key=lambda job: job.job_id):
            decision, memory[job.job_id] = scaling_step(
                job.observation, before.get(job.job_id), self.settings
            )
            action = rescale_action(decision, jobmanager=job.jobmanager, reconciler=self.name)
            if action is not None:
                actions.append(action)
            elif decision.action == "skip":
                notes.append(f"{_job_words(job)}: skipped: {'; '.join(decision.reasons)}")
        for problem in (*data.failed, *data.not_running):
            kept = before.get(problem.job_id)
            if kept is not None:
                memory[problem.job_id] = kept  # its guard rails hold across a short outage
            notes.append(f"skipped {problem.describe()}")
        return Reconciled(tuple(actions), {"jobs": memory}, tuple(notes))


def _job_words(job: ObservedJob) -> str:
    return f"job {job.job_key} ({job.job_id})"
