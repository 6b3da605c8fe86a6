"""``gpu-elastic``: shrink an elastic training job through validation, grow it back after.

A job is the pods with one owner of kind ``PyTorchJob`` or ``Job`` whose pods carry
the elastic bounds (on the pod template, so on every replica):

==============================  ============================================================
``kubesage.io/elastic-min``     fewest replicas the job runs with (torchrun ``--nnodes`` MIN)
``kubesage.io/elastic-max``     most replicas (MAX); ``1 <= min <= max``
==============================  ============================================================

Each tick the job's GPU utilisation is read from the collectors' snapshots: a
per-node metric-map table (a :class:`~kubesage.core.loop.forecasts.MetricTable`, as the
Prometheus collector's ``NodeMetrics`` is)
with dcgm-exporter's per-GPU column ``dcgm.gpu_util_percent.gpu<i>``
(``DCGM_FI_DEV_GPU_UTIL`` through ``configs/metric-map.yaml``), averaged over the GPUs
its running pods hold. The samples are kept in the reconciler's memory (one per
snapshot time, so a repeated tick adds none) and classified by the adapter's
:class:`~kubesage.adapters.gpu_training.elastic.PhaseDetector` — rolling median,
hysteresis between its thresholds, and no phase shorter than ``min_segment_s`` — so a
few odd samples never flip the decision. The annotation
``kubesage.io/training-phase`` (``train``/``training``, ``validation``, ``idle``) on any
of the job's pods overrides the detector while it is set.

In ``validation`` or ``idle`` the job is scaled to its minimum, in ``train`` to its
maximum. A shrink costs two re-rendezvous of every worker (torch elastic restarts them
all on a membership change), so one the detector proposes is made only when the phase
is expected to outlast ``2 · restart_cost_s · max / (max − min)``: the median length of
the job's past validation and idle phases, or, before one has ended, the time the
current one has lasted (an annotation is taken at its word). Samples taken while a
scale is under way — until the replicas show and ``restart_cost_s`` after it was asked,
at most ``settle_s`` — are not phases (a restart's idle GPUs would read as one), and are
dropped. A scale is
a :class:`~kubesage.core.loop.actions.Scale` of the owner (a Job's
parallelism, a PyTorchJob's elastic worker replicas), the only step of a plan whose id
counts the job's scale changes — so scaling to the minimum a second time, later, is a
new action and not one the audit log already holds. The ask is repeated only when the
job's replica count still differs from it ``settle_s`` after (a failed or refused
scale is retried; a slow controller is not hurried).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from kubesage.adapters.gpu_training.elastic import (
    PHASE_ANNOTATION,
    Phase,
    PhaseDetector,
    detect_phases,
)
from kubesage.core.annotations import ELASTIC_MAX_ANNOTATION, ELASTIC_MIN_ANNOTATION
from kubesage.core.loop.actions import ObjectRef, Plan, Scale
from kubesage.core.loop.forecasts import GPU_UTIL_METRIC, MetricTable
from kubesage.core.loop.reconciler import Reconciled
from kubesage.core.loop.view import PodInfo, WorldView

NAME = "gpu-elastic"

ELASTIC_KINDS = ("PyTorchJob", "Job")
"""Owner kinds whose replicas the loop's Scale actuator can set."""
PHASE_WORDS: Mapping[str, Phase] = {
    "train": "train",
    "training": "train",
    "validation": "validation",
    "idle": "idle",
}


@dataclass(frozen=True)
class ElasticSettings:
    """How ``gpu-elastic`` reads phases."""

    detector: PhaseDetector = field(
        default_factory=lambda: PhaseDetector(step_s=5.0, smooth_samples=3, min_segment_s=60.0)
    )
    """Thresholds, smoothing and the shortest phase; ``step_s`` is only the guess until
    two samples show their real spacing (:func:`sampled_detector`)."""
    history_samples: int = 360
    """Utilisation samples kept per job (30 minutes at 5 s)."""
    settle_s: float = 120.0
    """How long a scale may take to show in the job's replicas before it is asked again."""
    restart_cost_s: float = 60.0
    """What one re-rendezvous costs: every worker restarts and reloads its checkpoint."""
    phases_kept: int = 8
    """Lengths of past validation and idle phases kept per job."""


@dataclass(frozen=True)
class _Job:
    owner: ObjectRef
    pods: tuple[PodInfo, ...]
    min_replicas: int
    max_replicas: int


@dataclass(frozen=True)
class ElasticReconciler:
    """The ``gpu-elastic`` reconciler (see the module docstring)."""

    settings: ElasticSettings = field(default_factory=ElasticSettings)
    name: str = NAME

    def reconcile(self, view: WorldView) -> Reconciled:
        jobs, notes = elastic_jobs(view.pods.values())
        metrics = _utilisation_snapshots(view)
        old: Mapping[str, Any] = view.memory.get("jobs") or {}
        memory: dict[str, dict[str, Any]] = {}
        actions: list[Plan] = []
        for key, job in sorted(jobs.items()):
            entry = dict(old.get(key) or {"samples": [], "epoch": 0, "replicas": None})
            samples = [list(sample) for sample in entry["samples"]]
            sample = _job_utilisation(job, metrics)
            restarting = self._restarting(job, entry, view.now_s)
            if restarting:
                samples = []  # a restart's GPUs are not a phase
            elif sample is not None and (not samples or sample[0] > samples[-1][0]):
                samples = [*samples, list(sample)][-self.settings.history_samples :]
            entry["samples"] = samples
            phase, source, lasted_s = self._phase(job, samples)
            if phase is None:
                memory[key] = entry
                continue
            _track(entry, phase, view.now_s - lasted_s, self.settings.phases_kept)
            desired = job.min_replicas if phase != "train" else job.max_replicas
            held = self._not_worth_it(job, entry, phase, source, view.now_s)
            if held is not None:
                notes.append(f"{key}: {held}")
                desired = job.max_replicas
            if desired != entry["replicas"]:
                if entry["replicas"] is None and len(job.pods) == desired:
                    entry["replicas"] = desired  # already where it should be: nothing to ask
                else:
                    entry.update(epoch=int(entry["epoch"]) + 1, replicas=desired, asked_s=None)
            if len(job.pods) != entry["replicas"] and _due(entry, view.now_s, self.settings):
                entry["asked_s"] = view.now_s
                actions.append(_scale(job, key, entry, phase, source))
            memory[key] = entry
        return Reconciled(actions=actions, memory={"jobs": memory}, notes=notes)

    def _restarting(self, job: _Job, entry: Mapping[str, Any], now_s: float) -> bool:
        """A scale of ours is under way: asked less than ``restart_cost_s`` ago, or its
        replicas not shown yet but asked less than ``settle_s`` ago. A scale whose
        replicas never show (failed or refused) is over at ``settle_s``: the job's phases
        are read again, and the ask is repeated."""
        asked = entry.get("asked_s")
        if asked is None:
            return False
        since = now_s - float(asked)
        shown = len(job.pods) == entry.get("replicas")
        return since < self.settings.restart_cost_s or (
            not shown and since < self.settings.settle_s
        )

    def _not_worth_it(
        self, job: _Job, entry: Mapping[str, Any], phase: Phase, source: str, now_s: float
    ) -> str | None:
        """Why the detector's shrink is not made (None: it is worth two restarts)."""
        if (
            phase == "train"
            or source.startswith("annotation")
            or job.max_replicas == job.min_replicas
        ):
            return None
        scale = job.max_replicas / (job.max_replicas - job.min_replicas)
        break_even = 2 * self.settings.restart_cost_s * scale
        lengths = [float(length) for length in entry.get("phase_lengths") or []]
        expected = float(np.median(lengths)) if lengths else now_s - float(entry["phase_since"])
        if expected >= break_even:
            return None
        basis = "its past ones' median" if lengths else "so far"
        return (
            f"{phase} phase expected to last {expected:.0f} s ({basis}), less than the "
            f"{break_even:.0f} s two restarts cost: kept at {job.max_replicas} replica(s)"
        )

    def _phase(
        self, job: _Job, samples: Sequence[Sequence[float]]
    ) -> tuple[Phase | None, str, float]:
        """The job's phase now, what says so, and how long it has lasted (s)."""
        for pod in job.pods:
            word = pod.annotations.get(PHASE_ANNOTATION)
            if word and word.lower() in PHASE_WORDS:
                return PHASE_WORDS[word.lower()], f"annotation {PHASE_ANNOTATION}={word}", 0.0
        detector = sampled_detector(self.settings.detector, [at for at, _ in samples])
        if len(samples) * detector.step_s < detector.min_segment_s:
            return None, "not enough utilisation yet", 0.0  # no decision on a first glimpse
        values = [value for _, value in samples]
        segments = detect_phases(values, detector)
        mean = float(np.mean(values[-detector.smooth_samples :]))
        return segments[-1].phase, f"GPU utilisation {mean:.0f}% (DCGM)", segments[-1].duration_s


def _track(entry: dict[str, Any], phase: Phase, began_s: float, kept: int) -> None:
    """Keep when the current phase began and how long ended non-training phases lasted."""
    if entry.get("phase") != phase:
        if entry.get("phase") in ("validation", "idle") and phase == "train":
            ended = began_s - float(entry["phase_since"])
            entry["phase_lengths"] = [*(entry.get("phase_lengths") or []), ended][-kept:]
        entry["phase"], entry["phase_since"] = phase, began_s


def sampled_detector(detector: PhaseDetector, taken_at: Sequence[float]) -> PhaseDetector:
    """``detector`` with ``step_s`` the samples' real spacing (the median gap between
    their timestamps): a sample is kept only when its snapshot is newer, so a DCGM
    exporter refreshing every 30 s gives 30 s samples whatever the loop's tick."""
    gaps = np.diff(np.asarray(taken_at, dtype=np.float64))
    gaps = gaps[gaps > 0]
    if gaps.size == 0:
        return detector
    return dataclasses.replace(detector, step_s=float(np.median(gaps)))


def elastic_jobs(pods: Iterable[PodInfo]) -> tuple[dict[str, _Job], list[str]]:
    """Jobs with elastic bounds, by owner, and notes on bounds that cannot be read."""
    by_owner: dict[ObjectRef, list[PodInfo]] = defaultdict(list)
    for pod in pods:
        if (
            pod.owner is not None
            and not pod.terminating  # no longer one of its replicas
            and pod.owner.kind in ELASTIC_KINDS
            and (
                ELASTIC_MIN_ANNOTATION in pod.annotations
                or ELASTIC_MAX_ANNOTATION in pod.annotations
            )
        ):
            by_owner[pod.owner].append(pod)
    jobs: dict[str, _Job] = {}
    notes: list[str] = []
    for owner, members in by_owner.items():
        members.sort(key=lambda p: str(p.ref))
        annotations = members[0].annotations
        try:
            low = int(annotations.get(ELASTIC_MIN_ANNOTATION, ""))
            high = int(annotations.get(ELASTIC_MAX_ANNOTATION, ""))
        except ValueError:
            low = high = 0
        if not 1 <= low <= high:
            notes.append(
                f"{owner}: {ELASTIC_MIN_ANNOTATION} and {ELASTIC_MAX_ANNOTATION} must be whole "
                f"numbers with 1 <= min <= max; got {annotations.get(ELASTIC_MIN_ANNOTATION)!r}, "
                f"{annotations.get(ELASTIC_MAX_ANNOTATION)!r}"
            )
            continue
        jobs[str(owner)] = _Job(owner, tuple(members), low, high)
    return jobs, notes


def _utilisation_snapshots(view: WorldView) -> list[tuple[float, MetricTable]]:
    """``(taken at, table)`` of the snapshots with DCGM utilisation columns, freshest first."""
    found = [
        snapshot
        for _, snapshot in sorted(view.snapshots.items())
        if isinstance(snapshot.data, MetricTable)
        and any(column.startswith("dcgm.gpu_util_percent.gpu") for column in snapshot.data.columns)
    ]
    found.sort(key=lambda snapshot: (snapshot.stale, -snapshot.taken_at))
    return [(snapshot.taken_at, cast(MetricTable, snapshot.data)) for snapshot in found]


def _job_utilisation(
    job: _Job, tables: Sequence[tuple[float, MetricTable]]
) -> tuple[float, float] | None:
    """``(snapshot time, mean utilisation %)`` over the job's GPUs; None without samples."""
    for taken_at, table in tables:
        values: list[float] = []
        for pod in job.pods:
            if pod.placement is None or pod.placement.node not in table.nodes:
                continue
            row = table.nodes.index(pod.placement.node)
            for gpu in pod.placement.gpu_indices:
                column = GPU_UTIL_METRIC.format(gpu=gpu)
                if column in table.columns:
                    value = float(table.values[row, table.columns.index(column)])
                    if np.isfinite(value):
                        values.append(min(100.0, max(0.0, value)))
        if values:
            return taken_at, float(np.mean(values))
    return None


def _due(entry: Mapping[str, Any], now_s: float, settings: ElasticSettings) -> bool:
    asked = entry.get("asked_s")
    return asked is None or now_s - float(asked) >= settings.settle_s


def _scale(job: _Job, key: str, entry: Mapping[str, Any], phase: Phase, source: str) -> Plan:
    replicas = int(entry["replicas"])
    bound = "minimum" if phase != "train" else "maximum"
    why = (
        f"{key} is in a {phase} phase ({source}): scale from {len(job.pods)} to its {bound}, "
        f"{replicas} replica(s)"
        + ("; the released GPUs are free for other pods meanwhile" if phase != "train" else "")
    )
    plan_id = f"{NAME}/{key}/{entry['epoch']}"
    return Plan(
        id=plan_id,
        reconciler=NAME,
        explanation=why,
        steps=(
            Scale(
                reconciler=NAME,
                explanation=why,
                plan=plan_id,
                workload=job.owner,
                replicas=replicas,
            ),
        ),
    )
