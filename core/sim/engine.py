"""A discrete-event cluster simulator that drives any Policy.

Events are processed in time order; at equal times departures come before
arrivals (resources freed at t are usable at t), then arrival order; a pod that
leaves at the instant it arrives leaves after its own arrival. An arrival
asks the policy for a Decision and applies it to the ClusterState; a pod no node
can host fails and is not retried (the FGD protocol). A departure releases exactly
what its arrival took. After every event the engine records the arrived and
allocated GPU, the cluster's fragmentation (FGD's measure) and the failures so far.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

import numpy as np

from kubesage.core.arrays import FloatArray
from kubesage.core.errors import InputError
from kubesage.core.policy.base import Policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure
from kubesage.core.types import Decision, Migration, NodeSpec, Placement, PodRequest


class EventKind(IntEnum):
    """Event kinds; the value orders events that share a time."""

    DEPARTURE = 0
    ARRIVAL = 1
    INSTANT_DEPARTURE = 2
    """Departure of a pod that leaves at the instant it arrives: after its arrival."""


@dataclass
class Trajectory:
    """One row per processed event (plus a first row for the empty cluster)."""

    time_s: list[float] = field(default_factory=list)
    arrived_gpu_milli: list[int] = field(default_factory=list)
    allocated_gpu_milli: list[int] = field(default_factory=list)
    fragment_milli: list[float] = field(default_factory=list)
    fragmentation_ratio: list[float] = field(default_factory=list)
    failed_pods: list[int] = field(default_factory=list)

    def as_arrays(self) -> dict[str, FloatArray]:
        return {name: np.asarray(values, dtype=np.float64) for name, values in vars(self).items()}


ProgressCallback = Callable[[int, int], None]
"""Called as ``(events_done, events_total)``."""


class Defragmenter(Protocol):
    """Frees room for a request that does not fit, by moving running pods."""

    def plan(
        self,
        state: ClusterState,
        running: Mapping[str, tuple[PodRequest, Placement]],
        request: PodRequest,
    ) -> list[Migration] | None:
        """Migrations after which ``request`` fits, or None when none within budget."""
        ...


def replay_events(pods: Sequence[PodRequest]) -> list[tuple[float, EventKind, int]]:
    """``(time, kind, pod index)`` of every arrival and departure, in replay order."""
    events: list[tuple[float, EventKind, int]] = []
    for i, pod in enumerate(pods):
        if pod.creation_time_s is None:
            raise InputError(
                f"pod '{pod.name}' has no creation time; time replay needs creation_time "
                "(use the fgd mode for pod lists without times)"
            )
        events.append((pod.creation_time_s, EventKind.ARRIVAL, i))
        if pod.deletion_time_s is not None:
            kind = (
                EventKind.INSTANT_DEPARTURE
                if pod.deletion_time_s == pod.creation_time_s
                else EventKind.DEPARTURE
            )
            events.append((pod.deletion_time_s, kind, i))
    return sorted(events)


class Compactor(Protocol):
    """Moves running pods in the background, every ``interval_s`` of simulated time."""

    interval_s: float

    def compact(
        self, state: ClusterState, running: Mapping[str, tuple[PodRequest, Placement]]
    ) -> list[Migration]:
        """Migrations to apply now (may be empty)."""
        ...


class Simulator:
    """Replays requests through one policy on one cluster."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        policy: Policy,
        measure_for: Callable[[ClusterState], FragmentationMeasure],
        defragmenter: Defragmenter | None = None,
        compactor: Compactor | None = None,
    ):
        self.state = ClusterState(nodes)
        self.defragmenter = defragmenter
        self.compactor = compactor
        if compactor is not None and compactor.interval_s <= 0:
            raise InputError(f"compaction interval must be positive, got {compactor.interval_s}")
        self.migrations = 0
        """Pods moved by the defragmenter and the compactor."""
        self.compaction_migrations = 0
        """Of those, pods moved by background compaction."""
        self.defragmented: list[str] = []
        """Requests placed only thanks to migrations."""
        self.policy = policy
        self.measure = measure_for(self.state)
        self.trajectory = Trajectory()
        self.running: dict[str, tuple[PodRequest, Placement]] = {}
        self.failed: list[Decision] = []
        self.arrived_gpu_milli = 0
        self._node_fragment = self.measure.of_state(self.state)
        self._fragment_total = float(self._node_fragment.sum())
        self._record(0.0)

    # -- public runs ------------------------------------------------------------------

    def run_arrivals(
        self, arrivals: Sequence[PodRequest], on_progress: ProgressCallback | None = None
    ) -> Trajectory:
        """The FGD protocol: each pod arrives in order (time = its position) and stays."""
        events = [(float(i), EventKind.ARRIVAL, i) for i in range(len(arrivals))]
        return self._run(events, arrivals, on_progress)

    def run_replay(
        self, pods: Sequence[PodRequest], on_progress: ProgressCallback | None = None
    ) -> Trajectory:
        """Time replay: arrivals at ``creation_time_s``, departures at ``deletion_time_s``."""
        return self._run(replay_events(pods), pods, on_progress)

    # -- engine -----------------------------------------------------------------------

    def _run(
        self,
        events: list[tuple[float, EventKind, int]],
        pods: Sequence[PodRequest],
        on_progress: ProgressCallback | None,
    ) -> Trajectory:
        heap = [(time, int(kind), index) for time, kind, index in events]
        heapq.heapify(heap)
        total = len(heap)
        done = 0
        next_compaction = heap[0][0] if heap else 0.0
        while heap:
            time, kind, index = heapq.heappop(heap)
            if self.compactor is not None and time >= next_compaction:
                moves = self.compactor.compact(self.state, self.running)
                self._apply_moves(moves)
                self.compaction_migrations += len(moves)
                next_compaction = time + self.compactor.interval_s
            pod = pods[index]
            if kind == EventKind.ARRIVAL:
                self._arrive(pod)
            else:
                self._depart(pod)
            self._record(time)
            done += 1
            if on_progress is not None and (done % 256 == 0 or done == total):
                on_progress(done, total)
        return self.trajectory

    def _arrive(self, pod: PodRequest) -> None:
        if pod.name in self.running:
            raise InputError(f"pod '{pod.name}' arrives twice")
        self.arrived_gpu_milli += pod.total_gpu_milli
        decision = self.policy.decide(self.state, pod)
        if decision.placement is None and self.defragmenter is not None:
            moves = self.defragmenter.plan(self.state, self.running, pod)
            if moves:
                self._apply_moves(moves)
                self.defragmented.append(pod.name)
                decision = self.policy.decide(self.state, pod)
        if decision.placement is None:
            self.failed.append(decision)
            return
        self.state.allocate(pod, decision.placement)
        self.running[pod.name] = (pod, decision.placement)
        self._refresh_fragment(decision.placement.node_index)

    def _apply_moves(self, moves: Sequence[Migration]) -> None:
        # Release every moved pod before placing any: a plan may put one pod where
        # another one it moves used to be.
        for name, _ in moves:
            request, source = self.running[name]
            self.state.release(request, source)
            self._refresh_fragment(source.node_index)
        for name, target in moves:
            request, _ = self.running[name]
            self.state.allocate(request, target)
            self.running[name] = (request, target)
            self._refresh_fragment(target.node_index)
        self.migrations += len(moves)

    def _depart(self, pod: PodRequest) -> None:
        entry = self.running.pop(pod.name, None)
        if entry is None:
            return  # it failed on arrival, so there is nothing to free
        request, placement = entry
        self.state.release(request, placement)
        self._refresh_fragment(placement.node_index)

    def _refresh_fragment(self, node: int) -> None:
        state = self.state
        new = float(
            self.measure.node_fragment(
                state.cpu_free_milli[node : node + 1],
                state.gpu_free_milli[node : node + 1],
                state.gpu_model_index[node : node + 1],
            )[0]
        )
        self._fragment_total += new - self._node_fragment[node]
        self._node_fragment[node] = new

    def _record(self, time: float) -> None:
        state = self.state
        idle = state.gpu_free_milli_total * self.measure.probability_total
        trajectory = self.trajectory
        trajectory.time_s.append(time)
        trajectory.arrived_gpu_milli.append(self.arrived_gpu_milli)
        trajectory.allocated_gpu_milli.append(state.gpu_allocated_milli_total)
        trajectory.fragment_milli.append(self._fragment_total)
        trajectory.fragmentation_ratio.append(self._fragment_total / idle if idle > 0 else 0.0)
        trajectory.failed_pods.append(len(self.failed))
