"""What a scenario run measures, tick by tick, and the figures it ends with.

- **Large tasks schedulable**: a large task counts when it is bound at the tick it
  arrives in or the next one (placed on arrival, or by one loop tick).
- **Pods migrated**: pods evicted at least once, of the pods that arrived.
- **GPU allocation / utilisation**: the allocated share of GPU capacity, and the mean
  GPU utilisation (the same per-GPU figure the ``dcgm`` collector reports), averaged
  over the ticks.
- **Training throughput**: each training job's tokens/s in its training phases, from
  the step-time model (:mod:`~kubesage.core.scenario.steptime`) at the bus bandwidth
  the DRTG gives its ring (members' GPUs in rank order), shared uplinks divided among
  the rings that cross them; a job that lost members runs on fewer GPUs. The gain
  against ``k8s-default`` is taken over the jobs both runs ran
  (:func:`~kubesage.core.scenario.result.fill_throughput_gain`).
- **Validation release**: of the GPU time training jobs hold at full size during their
  validation phases, the share elastic scaling released; and of all released GPU
  time, the share other pods held those GPUs.
- **Pending p95**: the 95th percentile of (first bind − arrival) over every pod (one
  never bound counts until the end); **training start wait**: the mean time from a
  training job's arrival to its start (the gang all placed), so a variant that gets
  other work placed by keeping gangs waiting shows it.
- **Conservation**: every pod that arrived (or a scale-up re-created) is running,
  pending, finished or scaled away at the end, and the GPU the state holds is exactly
  what the running pods asked for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from kubesage.core.scenario.model import Arrival, PhaseKind, WorkKind
from kubesage.core.scenario.result import SERIES, VariantRun
from kubesage.core.scenario.sim_cluster import SimCluster, SimPod
from kubesage.core.scenario.steptime import ring_busbw_with_contention, tokens_per_s
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import GPU_MILLI_PER_GPU


@dataclass
class _JobAccount:
    tokens: float = 0.0
    train_s: float = 0.0
    held: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Member pod name → the global GPUs it held last tick."""
    released: set[int] = field(default_factory=set)
    """Global GPUs a scale-down released and a scale-up has not taken back."""


class Accounting:
    """Per-run accounting (see the module docstring)."""

    def __init__(self, cluster: SimCluster, drtg: DRTG, tick_s: float) -> None:
        self.cluster = cluster
        self.drtg = drtg
        self.tick_s = tick_s
        self.series: dict[str, list[float]] = {name: [] for name in SERIES}
        self.arrivals: dict[str, Arrival] = {}
        self.first_bound: dict[str, float] = {}
        self.evicted: set[str] = set()
        self.finished = 0
        self.jobs: dict[str, _JobAccount] = {}
        self.validation_gpu_s = 0.0
        self.released_in_validation_s = 0.0
        self.released_s = 0.0
        self.released_used_s = 0.0
        self.utilisation: list[float] = []
        self.job_started: dict[str, float] = {}
        self.gpu_model = (cluster.nodes[0].gpu_model or "") if cluster.nodes else ""
        """The scenario's one GPU type, for the step-time model."""

    # -- events ---------------------------------------------------------------------------

    def arrived(self, arrival: Arrival) -> None:
        self.arrivals[arrival.id] = arrival
        if arrival.training is not None:
            self.jobs[arrival.id] = _JobAccount()

    def finish_done(self, now: float) -> None:
        """Remove the work whose time is up."""
        cluster = self.cluster
        for job_id, job in list(cluster.jobs.items()):
            if job.started_s is not None and now >= job.started_s + job.arrival.duration_s:
                for pod in cluster.members(job_id):
                    self._note_pod(pod)
                    cluster.remove(pod)
                    self.finished += 1
                del cluster.jobs[job_id]
        for pod in list(cluster.pods.values()):
            if pod.arrival.kind == WorkKind.TRAINING or pod.first_bound_s is None:
                continue
            if now >= pod.first_bound_s + pod.arrival.duration_s:
                self._note_pod(pod)
                cluster.remove(pod)
                self.finished += 1

    def _note_pod(self, pod: SimPod) -> None:
        if pod.first_bound_s is not None:
            self.first_bound.setdefault(pod.name, pod.first_bound_s)
        if pod.evictions:
            self.evicted.add(pod.name)

    # -- one tick -------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        cluster, state = self.cluster, self.cluster.state
        for pod in cluster.pods.values():
            self._note_pod(pod)
        for job_id, job in cluster.jobs.items():
            if job.started_s is not None:
                self.job_started.setdefault(job_id, job.started_s)
        allocated = 1.0 - state.gpu_free_milli_total / max(1, state.gpu_capacity_milli_total)
        utilisation = cluster.gpu_utilisation()
        gpus = int(state.gpu_count.sum())
        self.utilisation.append(float(utilisation.sum()) / (100.0 * max(1, gpus)))
        pending_large = sum(1 for p in cluster.pending() if p.arrival.kind == WorkKind.LARGE)
        released_now = self._elastic(now)
        self._throughput(now)
        for name, value in zip(
            SERIES,
            (now, allocated, float(pending_large), float(cluster.evictions), released_now),
            strict=True,
        ):
            self.series[name].append(value)

    def _global_gpus(self, pod: SimPod) -> tuple[int, ...]:
        assert pod.placement is not None
        first = int(self.drtg.node_first_gpu[pod.placement.node_index])
        return tuple(first + g for g in pod.placement.gpu_indices)

    def _elastic(self, now: float) -> float:
        """Validation and release accounting for this tick; GPUs released now."""
        cluster, tick = self.cluster, self.tick_s
        free = cluster.state.gpu_free_milli
        released_now = 0
        for job_id, job in cluster.jobs.items():
            account = self.jobs.setdefault(job_id, _JobAccount())
            training = job.arrival.training
            if training is None or job.started_s is None:
                continue
            members = {p.name: p for p in cluster.members(job_id)}
            current = {
                name: self._global_gpus(pod)
                for name, pod in members.items()
                if pod.placement is not None
            }
            for name, held in account.held.items():
                if name not in members:  # scaled away: its GPUs are released
                    account.released.update(held)
            for held in current.values():
                account.released.difference_update(held)
            account.held = current
            released = len(account.released)
            released_now += released
            self.released_s += released * tick
            for gpu in account.released:
                node, local = int(self.drtg.gpu_node[gpu]), int(self.drtg.gpu_local[gpu])
                if free[node, local] < GPU_MILLI_PER_GPU:
                    self.released_used_s += tick
            if cluster.phase(job_id, now) == PhaseKind.VALIDATION:
                self.validation_gpu_s += training.gpus * tick
                shortfall = (training.members - job.members) * training.gpus_per_member
                self.released_in_validation_s += max(0, shortfall) * tick
        return float(released_now)

    def _throughput(self, now: float) -> None:
        cluster = self.cluster
        rings: dict[str, list[int]] = {}
        for job_id, job in cluster.jobs.items():
            if job.started_s is None or cluster.phase(job_id, now) != PhaseKind.TRAIN:
                continue
            members = cluster.members(job_id)
            if not members or any(p.placement is None for p in members):
                continue  # a member is pending: the job waits for it this tick
            rings[job_id] = [gpu for pod in members for gpu in self._global_gpus(pod)]
        if not rings:
            return
        busbw = ring_busbw_with_contention(self.drtg, rings)
        for job_id, ring in rings.items():
            training = cluster.jobs[job_id].arrival.training
            assert training is not None
            rate = tokens_per_s(training, len(ring), self.gpu_model, busbw[job_id])
            account = self.jobs.setdefault(job_id, _JobAccount())
            account.tokens += rate * self.tick_s
            account.train_s += self.tick_s

    # -- the end --------------------------------------------------------------------------

    def result(
        self, variant: str, seed: int, actions: Mapping[str, Mapping[str, int]], end_s: float
    ) -> VariantRun:
        cluster, tick = self.cluster, self.tick_s
        for pod in cluster.pods.values():
            self._note_pod(pod)
        arrived_pods = sum(len(a.pods) for a in self.arrivals.values())
        # The waits and the in-time share are the scheduler's on what arrived during the
        # run: work already running at 0 (the warm start) is the state it starts from.
        new = [a for a in self.arrivals.values() if a.running_since_s is None]
        waits = []
        for arrival in new:
            for index in range(len(arrival.pods)):
                name = f"mixed/{arrival.id}-{index}"
                bound = self.first_bound.get(name)
                waits.append((bound if bound is not None else end_s) - arrival.time_s)
        large = [a for a in new if a.kind == WorkKind.LARGE]
        on_time = 0
        for arrival in large:
            bound = self.first_bound.get(f"mixed/{arrival.id}-0")
            arrival_tick = math.ceil(arrival.time_s / tick - 1e-9) * tick
            if bound is not None and bound <= arrival_tick + tick + 1e-6:
                on_time += 1
        figures = {
            "large_task_schedulable_pct": 100.0 * on_time / len(large) if large else 100.0,
            "pods_migrated_pct": 100.0 * len(self.evicted) / max(1, arrived_pods),
            "gpu_allocation_pct": 100.0 * _mean(self.series["gpu_allocation"]),
            "gpu_utilisation_pct": 100.0 * _mean(self.utilisation),
            "training_throughput_gain_pct": 0.0,
            "validation_release_pct": (
                100.0 * self.released_in_validation_s / self.validation_gpu_s
                if self.validation_gpu_s
                else 0.0
            ),
            "released_gpu_hours_used_pct": (
                100.0 * self.released_used_s / self.released_s if self.released_s else 0.0
            ),
            "pending_p95_s": float(np.percentile(waits, 95)) if waits else 0.0,
            "training_start_wait_mean_s": _mean(
                [
                    self.job_started.get(arrival.id, end_s) - arrival.time_s
                    for arrival in new
                    if arrival.kind == WorkKind.TRAINING
                ]
            ),
        }
        running = sum(1 for p in cluster.pods.values() if p.placement is not None)
        pending = sum(1 for p in cluster.pods.values() if p.placement is None)
        held = sum(
            p.request.gpu_milli * p.request.num_gpu
            for p in cluster.pods.values()
            if p.placement is not None
        )
        accounted = cluster.state.gpu_capacity_milli_total - cluster.state.gpu_free_milli_total
        conservation = {
            "arrived_pods": float(arrived_pods),
            "running": float(running),
            "pending": float(pending),
            "finished": float(self.finished),
            "scaled_away": float(cluster.scaled_away),
            "regrown": float(cluster.regrown),
            "gpu_milli_held_by_pods": float(held),
            "gpu_milli_allocated": float(accounted),
        }
        return VariantRun(
            variant=variant,
            seed=seed,
            figures=figures,
            actions={k: dict(v) for k, v in actions.items()},
            series=self.series,
            conservation=conservation,
            job_throughput={
                job: account.tokens / account.train_s
                for job, account in self.jobs.items()
                if account.train_s > 0
            },
        )


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0
