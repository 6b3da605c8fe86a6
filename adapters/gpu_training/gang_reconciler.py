"""``gpu-gang``: place a whole-GPU gang for the fastest AllReduce ring, all members at once.

Pending pods are grouped into gangs as the secondary scheduler groups them
(:func:`kubesage.core.k8s.gang.gang_of`: ``kubesage.io/gang`` or Koordinator's and
scheduler-plugins' PodGroup annotations, ``min-available``). A gang with every member
pending, at least ``min-available`` of them, each asking for the same number ``k`` of
whole GPUs, is given to :func:`~kubesage.adapters.gpu_training.allreduce.place_gang` on
the live DRTG (``view.topology``: its links' available bandwidth already reflects the
observed utilisation) with the GPUs that are free in ``view.state`` on nodes of an
allowed model, not in MIG mode, with the CPU and memory a member needs. The planner's
ring keeps each node's GPUs consecutive; the ring is cut into ``k``-GPU pieces in
rank order, member ``i`` (members ordered as their launcher numbers them: the master
first, then Kubeflow's replica index, JobSet's job index and an Indexed Job's
completion index, else by name with numbers read as numbers) taking piece ``i`` — its
GPUs listed in ring order, which is the order the bind records them in.

Only nodes every member may use count (:attr:`~kubesage.core.loop.view.PodInfo.eligible_nodes`:
cordons, taints against the members' tolerations, ``nodeSelector``, required node
affinity, as the secondary scheduler reads them from the Node objects), so a plan is
never one the bind would refuse for the node.

The answer is one plan: reservations for every member; a bind of every member, in
rank order, each annotating its pod with its rank (:data:`GANG_RANK_ANNOTATION`,
:data:`GANG_SIZE_ANNOTATION`) — through the bind when the loop's ``Bind`` carries
annotations, else through a ``Patch`` of each member before the binds. A gang that
does not fit whole (GPUs, or CPU and memory on the chosen nodes) gets a note and no
action: nothing is bound before every member has a place. A plan that stops part way
(a bind refused: the room was taken meanwhile) leaves the members it bound bound —
Kubernetes has no unbind. Where the loop alone places the gang (every pending member
``loop_places``: the embedded cluster, the simulator), the remaining members are
planned on later ticks as a ring of their own, each keeping the rank it has in the
whole gang's order; on a live cluster the secondary scheduler places them (it leaves
to the loop only gangs with no member bound). Sharing or MIG members and mixed sizes
are left to the secondary scheduler.

Which gangs it binds (:func:`~kubesage.core.loop.reconciler.may_place`): those no other
scheduler places (the embedded cluster, the simulator), and on a live cluster those of
kubesage's schedulerName that it claims — the secondary scheduler asks before placing a
gang and leaves a claimed one to the loop (claims need a configured topology). Gangs of
kube-scheduler's are never bound by the loop.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kubesage.adapters.gpu_training.allreduce import GangPlacement, place_gang
from kubesage.adapters.gpu_training.loop_support import (
    gang_spec,
    placement_key,
    pod_object,
    where,
)
from kubesage.core.arrays import BoolArray
from kubesage.core.errors import CapacityError
from kubesage.core.loop.actions import Action, Bind, Patch, Plan, Reservation, digest
from kubesage.core.loop.reconciler import Reconciled, may_place
from kubesage.core.loop.view import PodInfo, WorldView, eligible_for_all
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import GPU_MILLI_PER_GPU, Placement, PodRequest

NAME = "gpu-gang"

GANG_RANK_ANNOTATION = "kubesage.io/gang-rank"
"""A member's rank in the AllReduce ring (0 = first; its GPUs are ranks ``k·rank …``)."""
GANG_SIZE_ANNOTATION = "kubesage.io/gang-size"
"""How many members the ring has."""
BIND_CARRIES_ANNOTATIONS = "annotations" in {f.name for f in dataclasses.fields(Bind)}
"""Whether the loop's Bind sets pod annotations with the binding; if not, the ranks are
patched onto the members first."""
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
"""A JobSet pod's child Job, by index."""
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
"""An Indexed Job pod's index (its ``JOB_COMPLETION_INDEX``)."""


@dataclass(frozen=True)
class GangSettings:
    """How ``gpu-gang`` records its decision."""

    annotate_ranks: bool = True
    """Patch each member's rank annotations before binding it."""
    claims_gangs: bool = False
    """Claim whole-GPU gangs from the secondary scheduler (``kubesage serve`` sets it
    when a topology is configured: without the DRTG there is no ring to plan)."""


def rank_annotations(rank: int, size: int) -> dict[str, str]:
    """What a member of a ``size``-member ring at ``rank`` is annotated with."""
    return {GANG_RANK_ANNOTATION: str(rank), GANG_SIZE_ANNOTATION: str(size)}


def _mixed(requests: Sequence[PodRequest]) -> str | None:
    """Why these members are not one ring of whole GPUs (None: they are)."""
    first = requests[0].num_gpu
    if first < 1 or any(
        r.num_gpu != first or r.mig is not None or r.gpu_milli != GPU_MILLI_PER_GPU
        for r in requests
    ):
        return "members do not all ask for the same whole GPUs"
    if any(r.gpu_models != requests[0].gpu_models for r in requests):
        return "members ask for different GPU models"
    return None


def _member_order(pod: PodInfo) -> tuple[object, ...]:
    """Rank order: the master first, then the indices a launcher numbers its pods by
    (absent ones first), then the name with its numbers read as numbers."""
    replica_type = pod.labels.get(REPLICA_TYPE_LABEL, "").lower()

    def index(label: str) -> int:
        value = pod.labels.get(label, "")
        return int(value) if value.isdecimal() else -1

    name = tuple(
        (0, int(part), "") if part.isdecimal() else (1, 0, part)
        for part in re.split(r"(\d+)", str(pod.ref))
        if part
    )
    return (
        0 if replica_type == "master" else 1,
        index(REPLICA_INDEX_LABEL),
        index(JOB_INDEX_LABEL),
        index(COMPLETION_INDEX_LABEL),
        name,
    )


@dataclass(frozen=True)
class GangReconciler:
    """The ``gpu-gang`` reconciler (see the module docstring)."""

    settings: GangSettings = field(default_factory=GangSettings)
    name: str = NAME

    @property
    def reads(self) -> frozenset[str]:
        """Only the cluster (and the DRTG, whose link samples age out of its own window)."""
        return frozenset()

    def claims(self, pods: Sequence[PodInfo]) -> bool:
        """One named gang whose members all ask for the same whole GPUs (ClaimsPods)."""
        if not self.settings.claims_gangs or not pods:
            return False
        specs = [gang_spec(pod) for pod in pods]
        keys = {spec.key for spec in specs if spec is not None}
        return len(keys) == 1 and None not in specs and _mixed([p.request for p in pods]) is None

    def reconcile(self, view: WorldView) -> Reconciled:
        pending: dict[str, list[PodInfo]] = defaultdict(list)
        minimum: dict[str, int] = defaultdict(int)
        for pod in view.pending:
            spec = gang_spec(pod)
            if spec is not None:
                pending[spec.key].append(pod)
                minimum[spec.key] = max(minimum[spec.key], spec.min_available)
        bound: dict[str, list[PodInfo]] = defaultdict(list)
        for pod in view.running.values():
            spec = gang_spec(pod)
            if spec is not None and spec.key in pending:
                bound[spec.key].append(pod)
        if not pending:
            return Reconciled(memory=dict(view.memory))
        if view.topology is None:
            return Reconciled(
                memory=dict(view.memory),
                notes=[f"gang {key}: no topology (DRTG) configured" for key in sorted(pending)],
            )
        state = view.state.copy()
        actions: list[Plan] = []
        notes: list[str] = []
        for key, members in sorted(pending.items()):
            done = bound[key]
            if done and not all(member.loop_places for member in members):
                notes.append(
                    f"gang {key}: {len(done)} member(s) already bound; the secondary "
                    "scheduler places the rest"
                )
                continue
            if not may_place(self, members):
                continue  # kube-scheduler's pods, or the secondary scheduler keeps them
            stuck = [str(m.ref) for m in members if m.eligible_nodes == frozenset()]
            if stuck:  # as the secondary scheduler does: the others go without them
                notes.append(f"gang {key}: {', '.join(stuck)} may use no node; placed without")
                members = [m for m in members if m.eligible_nodes != frozenset()]
            if len(members) + len(done) < minimum[key]:
                present = len(members) + len(done)
                notes.append(f"gang {key}: {present} of {minimum[key]} members present")
                continue
            members = sorted(members, key=_member_order)
            planned = self._plan(view.topology, state, key, members, done)
            if isinstance(planned, str):
                notes.append(planned)
            else:
                actions.append(planned[0])
                state = planned[1]
        return Reconciled(actions=actions, memory=dict(view.memory), notes=notes)

    def _plan(
        self,
        drtg: DRTG,
        state: ClusterState,
        key: str,
        members: Sequence[PodInfo],
        done: Sequence[PodInfo] = (),
    ) -> tuple[Plan, ClusterState] | str:
        """The plan for the pending ``members`` (in rank order) of a gang whose members
        ``done`` are bound already, with the state once they are bound; or why none."""
        requests = [m.request for m in members]
        per_member = requests[0].num_gpu
        mixed = _mixed(requests)
        if mixed is not None:
            return f"gang {key}: {mixed}; left to the secondary scheduler"
        total = per_member * len(members)
        nodes = eligible_for_all(members)
        free = free_gpus(drtg, state, requests, nodes=nodes)
        # Each node takes whole members: the ring then cuts into them at node boundaries.
        gang = place_gang(drtg, free, total, unit=per_member)
        pieces = _pieces(drtg, gang, per_member)
        if gang is None or pieces is None:
            ruled_out = (
                ""
                if nodes is None
                else f" ({sum(n not in nodes for n in drtg.node_names)} node(s) ruled out by "
                "the members' node constraints)"
            )
            return (
                f"gang {key}: {len(members)} member(s) × {per_member} GPU(s) do not fit in the "
                f"{int(free.sum())} free GPU(s) of suitable nodes{ruled_out}; none bound"
            )
        trial = state.copy()
        placements: list[Placement] = []
        for request, (node_name, local) in zip(requests, pieces, strict=True):
            placement = trial.placement(trial.node_index[node_name], local, request)
            try:
                trial.allocate(request, placement)
            except CapacityError as exc:
                return f"gang {key}: {request.name} does not fit on {node_name} ({exc}); none bound"
            placements.append(placement)
        return self._as_plan(key, members, placements, gang, done), trial

    def _as_plan(
        self,
        key: str,
        members: Sequence[PodInfo],
        placements: Sequence[Placement],
        gang: GangPlacement,
        done: Sequence[PodInfo] = (),
    ) -> Plan:
        plan_id = f"{NAME}/{key}/" + digest(
            [[str(m.ref), placement_key(p)] for m, p in zip(members, placements, strict=True)]
        )
        size, ranks = _ranks(members, done)
        order = "; ".join(
            f"rank {rank}: {member.ref} on {where(placement)}"
            for rank, member, placement in zip(ranks, members, placements, strict=True)
        )
        why = f"gang {key} placed by the AllReduce planner: {gang.explanation}. Rank order: {order}"
        if done:
            why = (
                f"the {len(members)} member(s) of gang {key} still pending ({len(done)} of "
                f"{size} bound already, kept where they are) " + why.removeprefix(f"gang {key} ")
            )
        annotate = self.settings.annotate_ranks
        carried = annotate and BIND_CARRIES_ANNOTATIONS
        steps: list[Action] = []
        if annotate and not carried:
            steps += [
                Patch(
                    reconciler=NAME,
                    explanation=f"rank {rank} of {size} in gang {key}'s ring",
                    plan=plan_id,
                    obj=pod_object(member.ref),
                    patch={"metadata": {"annotations": rank_annotations(rank, size)}},
                )
                for rank, member in zip(ranks, members, strict=True)
            ]
        for rank, member, placement in zip(ranks, members, placements, strict=True):
            extra: dict[str, Any] = {"annotations": rank_annotations(rank, size)} if carried else {}
            steps.append(
                Bind(
                    reconciler=NAME,
                    explanation=(
                        f"gang {key} rank {rank} on {where(placement)} ({gang.bandwidth_text})"
                    ),
                    plan=plan_id,
                    pod=member.ref,
                    request=member.request,
                    placement=placement,
                    **extra,
                )
            )
        return Plan(
            id=plan_id,
            reconciler=NAME,
            explanation=why,
            steps=tuple(steps),
            reservations=tuple(
                Reservation(request=member.request, placement=placement)
                for member, placement in zip(members, placements, strict=True)
            ),
        )


def _ranks(members: Sequence[PodInfo], done: Sequence[PodInfo]) -> tuple[int, list[int]]:
    """The gang's size and each pending member's rank: its place in the whole gang's
    member order (bound members included), so the ranks the first plan gave stay."""
    order = sorted([*members, *done], key=_member_order)
    rank = {str(pod.ref): position for position, pod in enumerate(order)}
    return len(order), [rank[str(member.ref)] for member in members]


def free_gpus(
    drtg: DRTG,
    state: ClusterState,
    requests: Sequence[PodRequest],
    *,
    nodes: AbstractSet[str] | None = None,
) -> BoolArray:
    """Per DRTG GPU: wholly free, on a node that may host any one of ``requests`` and, with
    ``nodes``, is one of them (the nodes the members' node constraints let them use). A
    node keeps only as many free GPUs as the members its CPU and memory hold would use:
    several members on one node share those too."""
    free = np.zeros(drtg.num_gpus, dtype=bool)
    first = requests[0]
    models = state.gpu_model_mask(first.gpu_models)
    cpu = max(r.cpu_milli for r in requests)
    memory = max(r.memory_mib for r in requests)
    per_member = max(1, first.num_gpu)
    for node, name in enumerate(drtg.node_names):
        if nodes is not None and name not in nodes:
            continue
        index = state.node_index.get(name)
        if index is None or state.node_mig_enabled[index] or not models[index]:
            continue
        if state.cpu_free_milli[index] < cpu or state.memory_free_mib[index] < memory:
            continue
        gpus = drtg.node_gpus(node)
        count = min(gpus.size, int(state.gpu_count[index]))
        wholly = np.flatnonzero(state.gpu_free_milli[index, :count] == GPU_MILLI_PER_GPU)
        members = min(
            int(state.cpu_free_milli[index]) // cpu if cpu else len(wholly),
            int(state.memory_free_mib[index]) // memory if memory else len(wholly),
        )
        free[gpus[wholly[: members * per_member]]] = True
    return free


def _pieces(
    drtg: DRTG, gang: GangPlacement | None, per_member: int
) -> list[tuple[str, tuple[int, ...]]] | None:
    """The ring cut into ``per_member`` GPUs each: ``(node, local GPUs in ring order)``."""
    if gang is None:
        return None
    pieces = []
    for start in range(0, len(gang.ranks), per_member):
        piece = gang.ranks[start : start + per_member]
        nodes = {int(drtg.gpu_node[g]) for g in piece}
        if len(nodes) != 1:
            return None
        pieces.append((drtg.node_names[nodes.pop()], tuple(int(drtg.gpu_local[g]) for g in piece)))
    return pieces
