"""The two extension points of the control loop: reconcilers decide, actuators act.

A :class:`Reconciler` is pure: it reads a :class:`~kubesage.core.loop.view.WorldView`
and returns what it wants done (:class:`~kubesage.core.loop.actions.Action` and
:class:`~kubesage.core.loop.actions.Plan` values) and its memory for the next tick. It
must be idempotent — asked twice about the same world, it asks for the same actions
(with the same keys) — so a crash, a repeated tick or a leader change does no harm.

An :class:`Actuator` alone touches the outside world: it executes actions of the kinds
it handles and reports an :class:`Outcome`; it never raises for a refusal (a PDB, a
conflict) or a failing dependency — those are outcomes, counted and audited.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from kubesage.core.loop.actions import Action, ActionKind, Plan
from kubesage.core.loop.view import PodInfo, WorldView


@dataclass(frozen=True)
class Reconciled:
    """A reconciler's answer for one tick."""

    actions: Sequence[Action | Plan] = ()
    memory: Mapping[str, Any] = field(default_factory=dict)
    """Handed back in the next tick's ``WorldView.memory``."""
    notes: Sequence[str] = ()
    """Why it did nothing, when that matters (e.g. "budget is zero"); audited."""


@runtime_checkable
class Reconciler(Protocol):
    """Decides: view in, actions out."""

    @property
    def name(self) -> str:
        """Stable name (``gpu-defrag``, ``forecast-placement`` …): metrics and audit use it."""
        ...

    def reconcile(self, view: WorldView) -> Reconciled: ...


@runtime_checkable
class ReadsSources(Protocol):
    """A reconciler that decides from some collectors only. The loop's data-age gate then
    looks at the cluster's snapshot and these (by collector name) — a Flink JobManager
    down for minutes does not stop GPU migrations — instead of every collector's."""

    @property
    def reads(self) -> frozenset[str]:
        """Names of the collectors it reads besides the cluster's (may be empty)."""
        ...


@runtime_checkable
class ClaimsPods(Protocol):
    """A reconciler that places some pending pods itself, all together (a gang on the
    AllReduce ring). The secondary scheduler asks :meth:`claims` before placing a group
    of its pods and leaves a claimed group to the loop, so one scheduler places it."""

    def claims(self, pods: Sequence[PodInfo]) -> bool:
        """True when this reconciler places ``pods`` (one gang's pending members)."""
        ...


def may_place(claimer: ClaimsPods, pods: Sequence[PodInfo]) -> bool:
    """Whether ``claimer`` may bind these pending pods (one group): no other scheduler
    places them, or kubesage's secondary scheduler does and leaves them to the loop
    because ``claimer`` claims them."""
    if not pods:
        return False
    if all(pod.loop_places for pod in pods):
        return True
    return all(pod.claimable or pod.loop_places for pod in pods) and claimer.claims(pods)


class Outcome(StrEnum):
    """What became of an action."""

    DONE = "done"
    DRY_RUN = "dry-run"
    """Would have been done; dry-run mode executes nothing."""
    REFUSED = "refused"
    """The world said no without an error (a PodDisruptionBudget, a conflict)."""
    FAILED = "failed"
    """An error (the API server, Flink) — retried on a later tick if still wanted."""
    OVER_BUDGET = "over-budget"
    """Not executed: the tick's budget for its kind was spent."""
    STALE = "stale"
    """Not executed: the data it was decided on is older than allowed."""
    ALREADY_DONE = "already-done"
    """Not executed: the audit log says an earlier tick (or leader) did it."""
    ROLLED_BACK = "rolled-back"
    """A plan step that was undone, or a plan that stopped and released its reservation."""
    STOPPED = "stopped"
    """Not executed, or a plan stopped before its next step: the loop was told to stop
    (leadership lost). Not a failure; the next leader decides again."""


@dataclass(frozen=True)
class Result:
    """An actuator's report on one action."""

    outcome: Outcome
    detail: str = ""


@runtime_checkable
class Actuator(Protocol):
    """Acts: executes the actions of the kinds it handles."""

    @property
    def kinds(self) -> frozenset[ActionKind]: ...

    def execute(self, action: Action) -> Result:
        """Do ``action``; never raises for a refusal or a failing dependency."""
        ...


@runtime_checkable
class Rehearses(Protocol):
    """An actuator that can ask whether an action would go through without doing it
    (Kubernetes' ``dryRun``). The loop rehearses a plan's steps after its first before
    starting it, so a step a PodDisruptionBudget would refuse stops the plan before any
    pod is evicted in vain."""

    def rehearse(self, action: Action, before: Sequence[Action] = ()) -> Result | None:
        """REFUSED (with why) when ``action`` would be refused once the plan's steps
        ``before`` it are done; None when it would go through or the rehearsal cannot
        tell. Never raises, changes nothing."""
        ...
