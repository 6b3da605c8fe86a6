"""The scenario's simulated cluster: its pods, what the loop perceives of it, and how the
loop's actions change it.

One :class:`SimCluster` per run holds the ClusterState of the scenario's nodes and
every pod that arrived. The control loop reads it through two collectors, exactly as
it reads a live cluster: ``cluster`` (a
:class:`~kubesage.core.loop.world.ClusterObservation`: the state and every pod, pending
ones marked ``loop_places`` — no other scheduler retries them here) and ``dcgm`` (a
per-node table of each GPU's utilisation under dcgm-exporter's column names, from the
pods on it: inference pods replay their GenAI profile, training members run at their
phase's level). It acts on it through :class:`SimActuator`: bind, evict (the pod comes
back pending under its name, as its controller would re-create it) and scale (a
training job's members above the new size are deleted; members below it are
re-created pending).

Training jobs are PyTorchJob-like: their member pods carry the gang annotations the
secondary scheduler reads, the elastic bounds ``gpu-elastic`` reads, and the job as
their owner.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from kubesage.core.annotations import (
    ELASTIC_MAX_ANNOTATION,
    ELASTIC_MIN_ANNOTATION,
    GANG_ANNOTATION,
    GANG_MIN_AVAILABLE_ANNOTATION,
)
from kubesage.core.arrays import FloatArray
from kubesage.core.errors import CapacityError
from kubesage.core.loop.actions import Action, ActionKind, Bind, Evict, ObjectRef, PodRef, Scale
from kubesage.core.loop.clock import Clock
from kubesage.core.loop.forecasts import GPU_UTIL_METRIC
from kubesage.core.loop.reconciler import Outcome, Result
from kubesage.core.loop.view import PodInfo
from kubesage.core.loop.world import ClusterObservation
from kubesage.core.perception import Snapshot
from kubesage.core.scenario.model import Arrival, PhaseKind, UtilisationProfiles, WorkKind
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import NodeSpec, Placement, PodRequest

NAMESPACE = "mixed"
JOB_API_VERSION, JOB_KIND = "kubeflow.org/v1", "PyTorchJob"
"""What owns a training job's member pods (``gpu-elastic`` scales this kind)."""
TRAIN_UTIL_PCT = 92.0
VALIDATION_UTIL_PCT = 35.0
"""A member's GPU utilisation in each phase: the middle of the ranges
``benchmarks/elastic.py`` generates (training 85–98 %, validation 20–50 %)."""


@dataclass
class SimPod:
    """One pod of the scenario."""

    name: str
    """``mixed/<arrival id>-<index>``."""
    arrival: Arrival
    index: int
    request: PodRequest
    placement: Placement | None = None
    first_bound_s: float | None = None
    evictions: int = 0
    regrown: bool = False
    """A training member re-created by a scale-up (placed on its own, not as a gang)."""

    @property
    def ref(self) -> PodRef:
        return PodRef(NAMESPACE, self.name.split("/", 1)[1])


@dataclass
class SimJob:
    """A training job while it exists: its members and when it started running."""

    arrival: Arrival
    members: int
    """Current size (elastic scaling changes it)."""
    started_s: float | None = None


@dataclass
class SimCluster:
    """The scenario's cluster (see the module docstring)."""

    nodes: list[NodeSpec]
    profiles: UtilisationProfiles
    clock: Clock
    state: ClusterState = field(init=False)
    pods: dict[str, SimPod] = field(default_factory=dict)
    jobs: dict[str, SimJob] = field(default_factory=dict)
    evictions: int = 0
    scaled_away: int = 0
    """Members a scale-down removed."""
    regrown: int = 0
    """Members a scale-up re-created."""

    def __post_init__(self) -> None:
        self.state = ClusterState(self.nodes)

    # -- pods ---------------------------------------------------------------------------

    def submit(self, arrival: Arrival) -> list[SimPod]:
        """The arrival's pods, pending."""
        pods = [
            SimPod(f"{NAMESPACE}/{arrival.id}-{i}", arrival, i, request)
            for i, request in enumerate(arrival.pods)
        ]
        for pod in pods:
            self.pods[pod.name] = pod
        if arrival.training is not None:
            self.jobs[arrival.id] = SimJob(arrival, arrival.training.members)
        return pods

    def bind(self, pod: SimPod, placement: Placement) -> None:
        """Place a pending pod (raises CapacityError if it does not fit)."""
        if pod.placement is not None:
            raise CapacityError(f"{pod.name} is bound already")
        self.state.allocate(pod.request, placement)
        pod.placement = placement
        now = self.clock.now()
        if pod.first_bound_s is None:
            pod.first_bound_s = now
        job = self.jobs.get(pod.arrival.id)
        if job is not None and job.started_s is None and self._all_bound(job):
            job.started_s = now

    def unbind(self, pod: SimPod) -> None:
        if pod.placement is not None:
            self.state.release(pod.request, pod.placement)
            pod.placement = None

    def evict(self, pod: SimPod) -> None:
        """Evicted: resources back, the pod pending again under its name."""
        self.unbind(pod)
        pod.evictions += 1
        self.evictions += 1

    def remove(self, pod: SimPod) -> None:
        """Gone for good (finished, or a member a scale-down removed)."""
        self.unbind(pod)
        del self.pods[pod.name]

    def members(self, job_id: str) -> list[SimPod]:
        return sorted(
            (p for p in self.pods.values() if p.arrival.id == job_id), key=lambda p: p.index
        )

    def _all_bound(self, job: SimJob) -> bool:
        members = self.members(job.arrival.id)
        return len(members) >= job.members and all(p.placement is not None for p in members)

    def pending(self) -> Iterator[SimPod]:
        return (pod for pod in self.pods.values() if pod.placement is None)

    # -- what the loop perceives --------------------------------------------------------

    def pod_info(self, pod: SimPod) -> PodInfo:
        arrival = pod.arrival
        annotations: dict[str, str] = {}
        labels: dict[str, str] = {}
        owner = None
        gang = None
        training = arrival.training
        if training is not None:
            owner = ObjectRef(JOB_API_VERSION, JOB_KIND, NAMESPACE, arrival.id)
            annotations = {
                ELASTIC_MIN_ANNOTATION: str(training.min_members),
                ELASTIC_MAX_ANNOTATION: str(training.members),
            }
            labels = {
                "training.kubeflow.org/replica-type": "master" if pod.index == 0 else "worker",
                "training.kubeflow.org/replica-index": str(pod.index),
            }
            job = self.jobs.get(arrival.id)
            if not pod.regrown and (job is None or job.started_s is None):
                gang = f"{NAMESPACE}/{arrival.id}"
                annotations[GANG_ANNOTATION] = arrival.id
                annotations[GANG_MIN_AVAILABLE_ANNOTATION] = str(training.members)
        return PodInfo(
            pod.ref,
            pod.request,
            pod.placement,
            gang=gang,
            owner=owner,
            labels=labels,
            annotations=annotations,
            loop_places=pod.placement is None,
            claimable=pod.placement is None,
        )

    def observation(self) -> ClusterObservation:
        infos = {pod.name: self.pod_info(pod) for pod in self.pods.values()}
        return ClusterObservation(self.state.copy(), infos)

    def gpu_utilisation(self) -> FloatArray:
        """``[nodes, max_gpus]`` utilisation now (percent, capped at 100)."""
        state = self.state
        table = np.zeros(state.gpu_free_milli.shape)
        now = self.clock.now()
        for pod in self.pods.values():
            if pod.placement is None:
                continue
            level = self._pod_util(pod, now)
            for gpu in pod.placement.gpu_indices:
                table[pod.placement.node_index, gpu] += level
        return np.minimum(table, 100.0)

    def _pod_util(self, pod: SimPod, now: float) -> float:
        arrival = pod.arrival
        started = pod.first_bound_s if pod.first_bound_s is not None else now
        if arrival.kind == WorkKind.INFERENCE and arrival.profile is not None:
            return self.profiles.duty_at(arrival.profile, now - started)
        if arrival.kind == WorkKind.TRAINING:
            return (
                VALIDATION_UTIL_PCT
                if self.phase(arrival.id, now) == PhaseKind.VALIDATION
                else TRAIN_UTIL_PCT
            )
        return TRAIN_UTIL_PCT  # a large task keeps its whole GPU busy

    def phase(self, job_id: str, now: float) -> PhaseKind | None:
        """The job's phase now (None before it starts or after its last phase)."""
        job = self.jobs.get(job_id)
        if job is None or job.started_s is None or job.arrival.training is None:
            return None
        elapsed = now - job.started_s
        for phase in job.arrival.training.phases:
            if phase.start_s <= elapsed < phase.end_s:
                return phase.kind
        return None


@dataclass
class ClusterSource:
    """The ``cluster`` collector over a SimCluster."""

    cluster: SimCluster
    name: str = "cluster"
    failures: int = 0

    def collect(self) -> Snapshot[ClusterObservation]:
        return Snapshot(self.cluster.observation(), self.cluster.clock.now())


@dataclass(frozen=True)
class GpuTable:
    """dcgm-exporter's per-GPU utilisation as a metric-map table (the MetricTable shape)."""

    nodes: tuple[str, ...]
    columns: tuple[str, ...]
    values: FloatArray


@dataclass
class DcgmSource:
    """The ``dcgm`` collector: each GPU's utilisation from the pods on it."""

    cluster: SimCluster
    name: str = "dcgm"
    failures: int = 0

    def collect(self) -> Snapshot[GpuTable]:
        values = self.cluster.gpu_utilisation()
        columns = tuple(GPU_UTIL_METRIC.format(gpu=g) for g in range(values.shape[1]))
        table = GpuTable(self.cluster.state.node_names, columns, values)
        return Snapshot(table, self.cluster.clock.now())


class SimActuator:
    """Binds, evictions and training-job scaling in the simulated cluster."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.done: dict[str, dict[str, int]] = {}
        """Reconciler → action kind → actions done."""

    @property
    def kinds(self) -> frozenset[ActionKind]:
        return frozenset({ActionKind.BIND, ActionKind.EVICT, ActionKind.SCALE})

    def execute(self, action: Action) -> Result:
        if isinstance(action, Bind):
            result = self._bind(action)
        elif isinstance(action, Evict):
            result = self._evict(action)
        elif isinstance(action, Scale):
            result = self._scale(action)
        else:
            return Result(Outcome.FAILED, f"the simulator does not execute {action.kind}")
        if result.outcome == Outcome.DONE:
            kinds = self.done.setdefault(action.reconciler, {})
            kinds[str(action.kind)] = kinds.get(str(action.kind), 0) + 1
        return result

    def _pod(self, ref: PodRef) -> SimPod | None:
        return self.cluster.pods.get(f"{ref.namespace}/{ref.name}")

    def _bind(self, action: Bind) -> Result:
        pod = self._pod(action.pod)
        if pod is None:
            return Result(Outcome.REFUSED, f"{action.pod} is gone")
        if pod.placement is not None:
            return Result(Outcome.REFUSED, f"{action.pod} is bound already")
        try:
            self.cluster.bind(pod, action.placement)
        except CapacityError as exc:
            return Result(Outcome.REFUSED, f"{action.pod} does not fit: {exc}")
        return Result(Outcome.DONE, f"bound to {action.placement.node}")

    def _evict(self, action: Evict) -> Result:
        pod = self._pod(action.pod)
        if pod is None or pod.placement is None:
            return Result(Outcome.REFUSED, f"{action.pod} is not running")
        self.cluster.evict(pod)
        return Result(Outcome.DONE, "evicted; pending again")

    def _scale(self, action: Scale) -> Result:
        job = self.cluster.jobs.get(action.workload.name)
        if job is None or job.arrival.training is None:
            return Result(Outcome.REFUSED, f"no training job {action.workload.name}")
        training = job.arrival.training
        if not training.min_members <= action.replicas <= training.members:
            return Result(Outcome.REFUSED, f"{action.replicas} is outside its elastic bounds")
        members = self.cluster.members(job.arrival.id)
        for pod in members[action.replicas :]:
            self.cluster.remove(pod)
            self.cluster.scaled_away += 1
        for index in range(len(members), action.replicas):
            self.cluster.regrown += 1
            regrown = SimPod(
                f"{NAMESPACE}/{job.arrival.id}-{index}",
                job.arrival,
                index,
                job.arrival.pods[index],
                regrown=True,
            )
            self.cluster.pods[regrown.name] = regrown
        job.members = action.replicas
        return Result(Outcome.DONE, f"{action.replicas} member(s)")
