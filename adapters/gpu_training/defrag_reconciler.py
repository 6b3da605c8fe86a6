"""``gpu-defrag``: migrations that let a GPU pod pending only for fragmentation fit.

Every tick, for each pending GPU pod (not a gang member: ``gpu-gang`` places those)
pending **only for fragmentation**
(:func:`~kubesage.adapters.gpu_training.defrag.only_fragmentation`), the
:class:`~kubesage.adapters.gpu_training.defrag.Defragmenter` is asked for the cheapest
migration (best-effort pods first). Never moved: ``Guaranteed`` pods, pods above
``max_priority``, and those of
:func:`~kubesage.adapters.gpu_training.defrag_settings.never_moves` — a pod without an
owner (once evicted, nothing re-creates it) or re-created on its own node only (a
DaemonSet's), a gang or distributed job's member (its eviction stops the whole job),
and a MIG instance where the loop cannot apply a re-layout (its evictions would come
before a label step bound to fail). A moved pod goes only to a node its own
constraints allow (its node selector, required affinity, taints). The answer is one
:class:`~kubesage.core.loop.actions.Plan`:

- reservations: the waiting pod's target placement and every moved pod's new one,
  as they stand *after* the plan's evictions (the loop reserves them against the
  state with the evicted pods released);
- steps: evict each moved pod; label each MIG node whose layout changes with its
  mig-parted configuration (:mod:`~kubesage.adapters.gpu_training.relayout`); bind each
  moved pod at its new placement; bind the waiting pod. mig-parted re-creates every
  instance of a GPU whose counts change: a pod staying on one is evicted and bound again
  in place too (in the eviction budget; compaction makes no such move).

The re-placement binds name the evicted pod and its owner (:attr:`Bind.owner`): the
embedded cluster keeps the pod pending under its name; on a live cluster the Bind
actuator binds the replacement its controller creates (same owner and request shape),
and with none yet the step is refused and the plan stops. Then the reconciler, which
remembers the pods its plans bind, binds each evicted pod still pending on a later
tick (at its planned place when free, else where the policy puts it), then the waiting
pod once it fits: no pod is lost, and the migration is finished rather than undone.

The plans of one tick evict at most :attr:`DefragSettings.eviction_budget` pods in
all (0: nothing is planned, and a note says which pods wait). With budget left and no
migration planned, background compaction
(:class:`~kubesage.adapters.gpu_training.compaction.Compactor`) runs when fewer than
``compact_free_share`` of the GPUs are empty, at most once per ``compact_interval_s``
(kept in the reconciler's memory), each move a plan of its own.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubesage.adapters.gpu_training.compaction import Compactor
from kubesage.adapters.gpu_training.defrag import (
    Defragmenter,
    move_cost,
    only_fragmentation,
    place_within,
)
from kubesage.adapters.gpu_training.defrag_settings import (
    DefragSettings,
    allowed_nodes,
    pinned_pods,
)
from kubesage.adapters.gpu_training.loop_support import (
    Running,
    gang_spec,
    placement_key,
    running_pods,
    where,
)
from kubesage.adapters.gpu_training.relayout import NO_RELAYOUTS, relayout_steps, staying_pods
from kubesage.core.errors import KubesageError
from kubesage.core.loop.actions import (
    Action,
    ActionKind,
    Bind,
    Evict,
    LabelNode,
    Plan,
    Reservation,
    digest,
)
from kubesage.core.loop.reconciler import Reconciled
from kubesage.core.loop.view import PodInfo, WorldView
from kubesage.core.policy.base import Policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fit import fit_report
from kubesage.core.types import Placement, PodRequest

NAME = "gpu-defrag"

COMPACTED_AT = "compacted_at_s"
"""Memory key: when the last compaction plans were asked for (the loop's clock)."""
STOPPED = "in_flight"
"""Memory key: the pods our plans bind (``namespace/name`` → plan id, target placement
as JSON, whether it is the waiting pod), kept while they are pending, so a plan that
stopped half-way is finished. Memory holds JSON values only."""


@dataclass(frozen=True)
class DefragReconciler:
    """The ``gpu-defrag`` reconciler (see the module docstring)."""

    policy: Policy
    """Re-places the moved pods and the waiting one (the scheduler's own policy)."""
    settings: DefragSettings = field(default_factory=DefragSettings)
    name: str = NAME

    @property
    def reads(self) -> frozenset[str]:
        """Only the cluster: a stale metrics source does not hold back a migration."""
        return frozenset()

    def reconcile(self, view: WorldView) -> Reconciled:
        settings = self.settings
        running, infos = running_pods(view)
        state = view.state.copy()
        memory = dict(view.memory)
        actions, stopped = self._finish_stopped(view, state)
        candidates = [
            pod
            for pod in view.pending
            if pod.request.num_gpu
            and not pod.nominated  # kube-scheduler made room for it already
            and str(pod.ref) not in stopped
            and gang_spec(pod) is None
        ]
        if settings.eviction_budget <= 0:
            return Reconciled(
                actions=actions,
                memory={**memory, STOPPED: stopped},
                notes=[
                    f"{pod.ref} is pending only for fragmentation; the eviction budget is 0, "
                    "so no migration is planned"
                    for pod in candidates
                    if only_fragmentation(state, pod.request, pod.eligible_nodes)
                ],
            )
        notes: list[str] = []
        pinned: frozenset[str] | None = None  # asked of every running pod: only when needed
        left = settings.eviction_budget
        labels_left = _UNLIMITED if settings.relayout_budget is None else settings.relayout_budget
        migrations = 0
        for pod in candidates:
            # Asked on the state after this tick's earlier plans: one may have made room.
            if not only_fragmentation(state, pod.request, pod.eligible_nodes):
                continue
            if left <= 0:
                notes.append(f"{pod.ref}: this tick's eviction budget is spent; next tick")
                continue
            pinned = self._pinned(view, infos) if pinned is None else pinned
            planned = self._migration(state, running, infos, pinned, pod, left, labels_left)
            if isinstance(planned, str):
                notes.append(planned)
                continue
            plan, state = planned
            actions.append(plan)
            migrations += 1
            left -= _remember(plan, stopped)
            labels_left -= sum(isinstance(step, LabelNode) for step in plan.steps)
        if not migrations and left > 0 and self._compaction_due(view):
            pinned = self._pinned(view, infos) if pinned is None else pinned
            plans = self._compaction(state, running, infos, pinned, left, labels_left, notes)
            for plan in plans:
                _remember(plan, stopped)
            if plans:
                actions += plans
                memory[COMPACTED_AT] = view.now_s
        memory[STOPPED] = stopped
        return Reconciled(actions=actions, memory=memory, notes=notes)

    def _pinned(self, view: WorldView, infos: Mapping[str, PodInfo]) -> frozenset[str]:
        """The running pods no plan moves: those that never move, and those whose
        eviction the world refused a few minutes ago (a PodDisruptionBudget): asked again
        now they would be refused again, and another plan may do without them."""
        pinned = pinned_pods(infos, self.settings)
        if not view.refused:
            return pinned
        refused = {
            name for name, info in infos.items() if f"{ActionKind.EVICT}:{info.ref}" in view.refused
        }
        return pinned | refused

    def _finish_stopped(
        self, view: WorldView, state: ClusterState
    ) -> tuple[list[Plan], dict[str, dict[str, Any]]]:
        """Finish what an earlier plan of ours left half-done (the module docstring).
        Pods our plans named are remembered (``namespace/name`` → plan id and target)
        until they run again or are gone; ``state`` takes the new placements."""
        remembered: Mapping[str, Mapping[str, Any]] = view.memory.get(STOPPED) or {}
        still: dict[str, dict[str, Any]] = {}
        plans: list[Plan] = []
        # Evicted pods first (their plan's binds come before the waiting pod's).
        for ref, entry in sorted(remembered.items(), key=lambda item: item[1]["waiting"]):
            pod = view.pods.get(ref)
            if pod is None or not pod.pending:
                continue
            placement = _fits_at(state, pod.request, entry.get("target"), pod.eligible_nodes)
            how = "its planned place" if placement is not None else "where the policy puts it"
            if placement is None:
                placed = place_within(self.policy, state, pod.request, pod.eligible_nodes)
                placement = None if placed is None else placed[0]
            if placement is None:
                if not entry["waiting"]:
                    still[ref] = dict(entry)  # an evicted pod waits, remembered, for room
                continue  # a waiting pod that does not fit is planned for afresh
            still[ref] = dict(entry)
            state.allocate(pod.request, placement)
            plan_id = f"{NAME}/finish/{ref}/" + digest([placement_key(placement)])
            why = (
                f"{entry['plan']} stopped before binding {ref}: bind it on {where(placement)} "
                f"({how})"
            )
            bind = Bind(
                reconciler=NAME,
                explanation=why,
                plan=plan_id,
                pod=pod.ref,
                request=pod.request,
                placement=placement,
                owner=None if entry["waiting"] else pod.owner,
            )
            plans.append(
                Plan(
                    id=plan_id,
                    reconciler=NAME,
                    explanation=why,
                    steps=(bind,),
                    reservations=(Reservation(request=pod.request, placement=placement),),
                )
            )
        return plans, still

    # -- a migration for one pending pod ---------------------------------------------------

    def _migration(
        self,
        state: ClusterState,
        running: dict[str, Running],
        infos: Mapping[str, PodInfo],
        pinned: frozenset[str],
        waiting: PodInfo,
        budget: int,
        relayouts: int,
    ) -> tuple[Plan, ClusterState] | str:
        """The plan for ``waiting`` and the state after it, or why none. ``running`` is
        updated to after the plan: the moved pods at their new places, the waiting pod as
        one that never moves (a later plan this tick neither evicts it nor takes its room)."""
        settings = self.settings
        request = waiting.request
        if request.mig is not None and not settings.relayouts:
            return f"{waiting.ref}: making room for a MIG instance {NO_RELAYOUTS}"
        moves = Defragmenter(
            self.policy,
            budget=budget,
            max_priority=settings.max_priority,
            max_trials=settings.max_trials,
            pinned=pinned,
            allowed=allowed_nodes(infos),
        ).plan(state, running, request, waiting.eligible_nodes)
        if moves is None:
            return (
                f"{waiting.ref} is pending only for fragmentation, and no migration of at most "
                f"{budget} pod(s) makes room (never moved: Guaranteed pods, pods above priority "
                f"{settings.max_priority}, gang and job members, pods nothing re-creates)"
            )
        trial = state.copy()
        for name, _ in moves:
            pod, source = running[name]
            trial.release(pod, source)
        for name, target in moves:
            trial.allocate(running[name][0], target)
        placed = place_within(self.policy, trial, request, waiting.eligible_nodes)
        if placed is None:  # the defragmenter checked it fits; be safe
            return f"{waiting.ref}: after the planned moves the policy still finds no node"
        placement, because = placed
        trial.allocate(request, placement)
        # mig-parted re-creates every instance of a GPU whose counts change: the pods that
        # stay on such a GPU are evicted too, and bound again at their own place.
        recreated = staying_pods(state, running, moves, arriving=(request, placement))
        if recreated:
            kept = [
                name
                for name in recreated
                if not math.isfinite(move_cost(running[name][0], settings.max_priority, pinned))
            ]
            if kept:
                return (
                    f"{waiting.ref}: the MIG re-layout that makes room would re-create the "
                    f"instances of {', '.join(kept[:3])}, which never move; migration not planned"
                )
            if len(moves) + len(recreated) > budget:
                return (
                    f"{waiting.ref}: the migration moves {len(moves)} pod(s) and re-creates "
                    f"{len(recreated)} in place (their GPUs' MIG layout changes), more than "
                    f"this tick's eviction budget of {budget}"
                )
            moves = [*moves, *((name, running[name][1]) for name in recreated)]
        # The relayout of the node the waiting pod lands on must hold its MIG instance too.
        before_with_waiting = {**running, request.name: (request, placement)}
        plan_id = f"{NAME}/{waiting.ref}/" + digest(
            [[name, placement_key(target)] for name, target in moves] + [placement_key(placement)]
        )
        cost = sum(move_cost(running[name][0], settings.max_priority) for name, _ in moves)
        moved = ", ".join(str(infos[name].ref) for name, _ in moves)
        why = f"make room for {waiting.ref} on {where(placement)}"
        in_place = " (re-created in place: mig-parted re-creates its GPU's instances)"
        steps: list[Action] = [
            Evict(
                reconciler=NAME,
                explanation=f"{why} (pending only for fragmentation)"
                + (in_place if name in recreated else ""),
                plan=plan_id,
                pod=infos[name].ref,
                request=infos[name].request,
            )
            for name, _ in moves
        ]
        labels = relayout_steps(
            NAME, state, before_with_waiting, moves, plan_id, why, self.settings.relayouts
        )
        if isinstance(labels, str):
            return labels
        if len(labels) > relayouts:
            return (
                f"{waiting.ref}: the migration that makes room re-lays out {len(labels)} MIG "
                f"node(s); this tick's re-layout budget allows {relayouts}"
            )
        steps += labels
        steps += [
            Bind(
                reconciler=NAME,
                explanation=(
                    f"re-create {infos[name].ref} in place on {where(target)}, its GPU's MIG "
                    f"layout changing to {why}"
                    if name in recreated
                    else f"re-place {infos[name].ref}, moved to {why}, on {where(target)}"
                ),
                plan=plan_id,
                pod=infos[name].ref,
                request=infos[name].request,
                placement=target,
                owner=infos[name].owner,
            )
            for name, target in moves
        ]
        steps.append(
            Bind(
                reconciler=NAME,
                explanation=(
                    f"{waiting.ref} fits on {where(placement)} once {moved} moved: {because}"
                ),
                plan=plan_id,
                pod=waiting.ref,
                request=request,
                placement=placement,
            )
        )
        reservations = [Reservation(request=request, placement=placement)] + [
            Reservation(request=running[name][0], placement=target) for name, target in moves
        ]
        summary = fit_report(state, request).summary()
        for name, target in moves:
            running[name] = (running[name][0], target)
        running[request.name] = (request.model_copy(update={"qos": "Guaranteed"}), placement)
        plan = Plan(
            id=plan_id,
            reconciler=NAME,
            explanation=(
                f"{waiting.ref} is pending only for fragmentation ({summary}); moving "
                f"{len(moves)} pod(s) ({moved}; cost {cost:g}) makes room on {where(placement)}"
            ),
            steps=tuple(steps),
            reservations=tuple(reservations),
        )
        return plan, trial

    # -- background compaction -------------------------------------------------------------

    def _compaction_due(self, view: WorldView) -> bool:
        settings = self.settings
        if settings.compact_free_share <= 0:
            return False
        last = view.memory.get(COMPACTED_AT)
        return not isinstance(last, int | float) or view.now_s - last >= settings.compact_interval_s

    def _compaction(
        self,
        state: ClusterState,
        running: dict[str, Running],
        infos: Mapping[str, PodInfo],
        pinned: frozenset[str],
        budget: int,
        relayouts: int,
        notes: list[str],
    ) -> list[Plan]:
        """One plan per move of a compaction round (each stands alone), as many as the
        re-layout budget allows (each move assumes the ones before it); why it stopped
        early goes to ``notes``."""
        settings = self.settings
        moves = Compactor(
            self.policy,
            budget=budget,
            free_share=settings.compact_free_share,
            max_priority=settings.max_priority,
            pinned=pinned,
            allowed=allowed_nodes(infos),
        ).compact(state, running)
        plans: list[Plan] = []
        for name, target in moves:
            info = infos[name]
            source = running[name][1]
            plan_id = f"{NAME}/compact/{info.ref}/" + digest(
                [placement_key(source), placement_key(target)]
            )
            why = (
                f"background compaction: few GPUs are wholly free (below "
                f"{settings.compact_free_share:.0%}); emptying {where(source)}"
            )
            steps: list[Action] = [
                Evict(
                    reconciler=NAME,
                    explanation=why,
                    plan=plan_id,
                    pod=info.ref,
                    request=info.request,
                )
            ]
            labels = relayout_steps(
                NAME, state, running, [(name, target)], plan_id, why, settings.relayouts
            )
            if isinstance(labels, str):
                notes.append(labels)
                break
            staying = staying_pods(state, running, [(name, target)])
            if staying:  # not worth re-creating running pods in place for a compaction
                notes.append(
                    f"{why}: moving {info.ref} to {where(target)} would change the MIG layout "
                    f"of GPUs that {', '.join(staying[:3])} keep using (mig-parted re-creates "
                    "every instance of a GPU whose counts change); compaction stopped"
                )
                break
            relayouts -= len(labels)
            if relayouts < 0:
                break
            steps += labels
            steps.append(
                Bind(
                    reconciler=NAME,
                    explanation=f"{why}: {info.ref} moves to {where(target)}",
                    plan=plan_id,
                    pod=info.ref,
                    request=info.request,
                    placement=target,
                    owner=info.owner,
                )
            )
            running[name] = (info.request, target)
            plans.append(
                Plan(
                    id=plan_id,
                    reconciler=NAME,
                    explanation=f"{why}: {info.ref} moves to {where(target)}",
                    steps=tuple(steps),
                    reservations=(Reservation(request=info.request, placement=target),),
                )
            )
        return plans


def _remember(plan: Plan, stopped: dict[str, dict[str, Any]]) -> int:
    """Remember the pods ``plan`` binds (to finish it if it stops); its eviction count."""
    binds = [step for step in plan.steps if isinstance(step, Bind)]
    waiting = binds[-1].pod if binds else None
    for step in binds:
        stopped[str(step.pod)] = {
            "plan": plan.id,
            "target": step.placement.model_dump(mode="json"),
            "waiting": int(step.pod == waiting),
        }
    return sum(1 for step in plan.steps if isinstance(step, Evict))


def _fits_at(
    state: ClusterState, request: PodRequest, target: Any, allowed: Collection[str] | None
) -> Placement | None:
    """The remembered ``target`` when ``request`` can still take it on ``state`` and its
    node is among the ``allowed`` (any when None); else None."""
    try:
        placement = Placement.model_validate(target)
        if allowed is not None and placement.node not in allowed:
            return None
        trial = state.copy()
        trial.allocate(request, placement)
    except (ValueError, KubesageError):  # pydantic's ValidationError is a ValueError
        return None
    return placement


_UNLIMITED = 1 << 30
"""A budget that never runs out."""
