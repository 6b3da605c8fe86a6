"""Test doubles of the loop's own protocols: a cluster collector, scripted reconcilers
and a recording actuator (no outside system is faked here)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kubesage.core.errors import DependencyError
from kubesage.core.loop.actions import Action, ActionKind, Evict, Plan, PodRef, Scale
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.reconciler import Outcome, Reconciled, Result
from kubesage.core.loop.view import PodInfo, WorldView
from kubesage.core.loop.world import ClusterObservation
from kubesage.core.perception import Snapshot
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import NodeSpec, PodRequest


def small_state(nodes: int = 3, gpus: int = 4) -> ClusterState:
    return ClusterState(
        [
            NodeSpec(
                name=f"node-{i}",
                cpu_milli=64_000,
                memory_mib=256_000,
                gpu_count=gpus,
                gpu_model="A100",
            )
            for i in range(nodes)
        ]
    )


def whole_gpu_pod(name: str, gpus: int = 1) -> PodRequest:
    return PodRequest(name=name, cpu_milli=1000, memory_mib=1000, num_gpu=gpus, gpu_milli=1000)


def free_arrays(state: ClusterState) -> dict[str, Any]:
    return {name: getattr(state, name).copy() for name in ClusterState.FREE_ARRAYS}


def same_free(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(np.array_equal(a[name], b[name]) for name in ClusterState.FREE_ARRAYS)


class ClusterCollector:
    """Serves a fixed ClusterState (a copy each time), stamped by the clock unless frozen."""

    def __init__(
        self,
        clock: SimulatedClock,
        state: ClusterState,
        pods: Mapping[str, PodInfo] | None = None,
        *,
        name: str = "cluster",
    ) -> None:
        self.clock = clock
        self.state = state
        self.pods = dict(pods or {})
        self._name = name
        self.frozen_at: float | None = None
        """When set, every snapshot is the one taken then, marked stale (source down)."""
        self.fail_first = 0
        """Raise this many times before the first snapshot."""
        self.failures = 0

    @property
    def name(self) -> str:
        return self._name

    def collect(self) -> Snapshot[ClusterObservation]:
        if self.fail_first:
            self.fail_first -= 1
            self.failures += 1
            raise DependencyError("source not reachable yet")
        observation = ClusterObservation(self.state.copy(), self.pods)
        if self.frozen_at is not None:
            self.failures += 1
            return Snapshot(observation, self.frozen_at, stale=True, reason="source down")
        return Snapshot(observation, self.clock.now())


@dataclass
class Scripted:
    """A reconciler that answers what ``answer`` returns for each view."""

    name: str
    answer: Callable[[WorldView], Sequence[Action | Plan]]
    views: list[WorldView] = field(default_factory=list)
    notes: Sequence[str] = ()

    def reconcile(self, view: WorldView) -> Reconciled:
        self.views.append(view)
        return Reconciled(
            actions=self.answer(view), memory={"seen": len(self.views)}, notes=self.notes
        )


class Raising:
    """A reconciler with a bug."""

    name = "broken"

    def reconcile(self, view: WorldView) -> Reconciled:
        raise ZeroDivisionError("a bug")


class RecordingActuator:
    """Executes every kind; answers DONE unless told otherwise for a target."""

    def __init__(self, outcomes: Mapping[str, Result] | None = None) -> None:
        self.outcomes = dict(outcomes or {})
        self.executed: list[Action] = []
        self.during: list[Callable[[Action], None]] = []
        """Called with each action as it executes (to look at the loop's state then)."""

    @property
    def kinds(self) -> frozenset[ActionKind]:
        return frozenset(ActionKind)

    def execute(self, action: Action) -> Result:
        self.executed.append(action)
        for hook in self.during:
            hook(action)
        return self.outcomes.get(action.target, Result(Outcome.DONE))


class RehearsingActuator(RecordingActuator):
    """A RecordingActuator that can also rehearse evictions (a dry run, as the live
    evictor does): ``refuses`` names the targets whose rehearsal answers REFUSED; every
    rehearsal is kept."""

    def __init__(self, refuses: Mapping[str, str], **options: Any) -> None:
        super().__init__(**options)
        self.refuses = dict(refuses)
        self.rehearsed: list[Action] = []
        self.before: list[list[str]] = []
        """The targets of the steps before each rehearsed one."""

    def rehearse(self, action: Action, before: Sequence[Action]) -> Result | None:
        if not isinstance(action, Evict):
            return None
        self.rehearsed.append(action)
        self.before.append([step.target for step in before])
        why = self.refuses.get(action.target)
        return None if why is None else Result(Outcome.REFUSED, why)


def evict(name: str, reconciler: str = "defrag", plan: str | None = None) -> Evict:
    return Evict(
        reconciler=reconciler,
        explanation=f"make room ({name})",
        pod=PodRef("default", name),
        plan=plan,
    )


def scale(replicas: int, reconciler: str = "elastic") -> Scale:
    from kubesage.core.loop.actions import ObjectRef

    return Scale(
        reconciler=reconciler,
        explanation=f"to {replicas} replicas",
        workload=ObjectRef("kubeflow.org/v1", "PyTorchJob", "default", "train"),
        replicas=replicas,
    )
