"""A plan's capacity ledger: reservations held in the loop's state while the plan runs.

The loop's state is its own copy of the cluster for the tick. A plan's reservations
say where its pods will go; some of that capacity is free now (a moved pod's new
GPU), some is held by the very pods the plan evicts (the waiting pod's target). So:

1. :meth:`PlanLedger.check` first plays the whole plan on a scratch copy — evict its
   pods, then place every reservation — and refuses a plan that could not fit even
   after its own evictions (nothing is executed).
2. :meth:`PlanLedger.reserve_free` holds every reservation that fits now; after each
   eviction (the pod's resources return to the ledger) it holds the ones that now fit,
   so nothing else the loop plans in this tick can take them.
3. Before a bind, the bound pod's own reservation is let go (the bind takes it); after
   the bind the pod is accounted where it went.
4. :meth:`PlanLedger.release` lets go of every reservation still held (a finished or
   stopped plan). Evictions and binds that happened stay accounted: they happened.

Concurrent binds by the extender are not blocked by this ledger (it is the loop's
copy); the one bind path re-checks fit under the live state's lock, so a bind whose
target was taken meanwhile is refused and the plan stops and is retried next tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress

from kubesage.core.errors import CapacityError
from kubesage.core.loop.actions import Action, Bind, Evict, Plan, Reservation
from kubesage.core.loop.view import PodInfo
from kubesage.core.state.cluster_state import ClusterState


class PlanLedger:
    """Reservations of one plan in ``state`` (see the module docstring)."""

    def __init__(self, state: ClusterState, pods: Mapping[str, PodInfo], plan: Plan) -> None:
        self.state = state
        self.pods = pods
        self.plan = plan
        self._waiting: list[Reservation] = list(plan.reservations)
        self._held: list[Reservation] = []

    def check(self) -> str | None:
        """Why the plan cannot fit even after its evictions; None when it can."""
        scratch = self.state.copy()
        for step in self.plan.steps:
            if isinstance(step, Evict):
                self._give_back(scratch, step)
        for reservation in self.plan.reservations:
            try:
                scratch.allocate(reservation.request, reservation.placement)
            except CapacityError as exc:
                return f"cannot reserve {reservation.placement.node}: {exc}"
        return None

    def reserve_free(self) -> None:
        """Hold every waiting reservation that fits in the state now."""
        still: list[Reservation] = []
        for reservation in self._waiting:
            try:
                self.state.allocate(reservation.request, reservation.placement)
            except CapacityError:
                still.append(reservation)
            else:
                self._held.append(reservation)
        self._waiting = still

    def before(self, step: Action) -> None:
        """Let go of the reservation a bind is about to take."""
        if not isinstance(step, Bind):
            return
        for reservation in self._held:
            if reservation.request.name == step.request.name:
                self.state.release(reservation.request, reservation.placement)
                self._held.remove(reservation)
                return
        self._waiting = [r for r in self._waiting if r.request.name != step.request.name]

    def done(self, step: Action) -> None:
        """Account a step that happened: an eviction frees its pod, a bind takes its place."""
        if isinstance(step, Evict):
            self._give_back(self.state, step)
            self.reserve_free()
        elif isinstance(step, Bind):
            # CapacityError: the actuator placed it differently; the next tick's state tells.
            with suppress(CapacityError):
                self.state.allocate(step.request, step.placement)

    def release(self) -> None:
        """Let go of every reservation still held."""
        for reservation in reversed(self._held):
            self.state.release(reservation.request, reservation.placement)
        self._held.clear()
        self._waiting.clear()

    def _give_back(self, state: ClusterState, step: Evict) -> None:
        pod = self.pods.get(str(step.pod))
        if pod is None or pod.placement is None:
            return  # not accounted in the loop's state: nothing to give back
        if step.pod.uid and pod.ref.uid and step.pod.uid != pod.ref.uid:
            return  # another pod under that name now: the eviction (by UID) leaves it be
        with suppress(CapacityError):  # already given back (evicted earlier in this tick)
            state.release(pod.request, pod.placement)
