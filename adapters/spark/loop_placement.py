"""``spark-placement``: bind a Spark application's pending executors where its shuffles
stay inside racks, on the live DRTG.

Spark on Kubernetes labels every executor pod ``spark-role=executor`` and
``spark-app-selector=<application id>`` (and ``spark-exec-id=<n>``). Each tick the
pending executors are grouped by namespace and application, and each group is placed
with :func:`~kubesage.adapters.spark.placement.place_executors` on ``view.topology``
(its racks, zones and the rack uplinks) against the free CPU and memory of
``view.state``: the executors of one resource profile (``spark-exec-resourceprofile-id``:
stage-level scheduling asks for executors of other shapes) are placed together, with
the largest CPU and memory request among them as their shape (cores rounded up), one
profile after another (the largest executors first), each joining the racks the ones
before went to; the traffic
shape :data:`~kubesage.adapters.spark.job_hints.DEFAULT_PROFILE`
unless the settings give one, and the input's location comes from the executors'
:data:`INPUT_LOCALITY_ANNOTATION` (``rack-a1=0.6,zone-b=0.2``; set it with
``spark.kubernetes.executor.annotation.kubesage.io/spark-input-locality=…``).

The answer is one :class:`~kubesage.core.loop.actions.Plan` per application (and
resource profile):
reservations for every executor, then a bind of each at its node (executors ordered by
``spark-exec-id``), the explanation naming the racks, the placement's reasons and its
expected cross-rack bytes. A Spark job runs with the executors it has, so a group that
does not fit whole has as many bound as fit now (the first by ``spark-exec-id``) and a
note says the rest wait for room; when only the balance limit (``max_node_share``)
holds executors back — a small cluster — it gives way. Every group gets a note and no
action when no topology is configured; topology nodes the cluster does not
have take no executors (a note says which), and a topology that shares no node with
the cluster is a note.

Which pending executors it places: those :attr:`~kubesage.core.loop.view.PodInfo.loop_places`
(the embedded cluster, the simulator), and on a live cluster those of kubesage's
scheduler (``claimable``) that it claims
(:class:`~kubesage.core.loop.reconciler.ClaimsPods`: every Spark executor that asks
for no GPUs, when built to claim — :func:`places`, the rule :meth:`reconcile` applies
too, so no executor is claimed and then left unplaced). kube-scheduler's executors are
left alone. Executors that arrive after some of their application's were bound (a later
allocation batch, dynamic allocation) are placed beside them: the bound ones count in
the balance limit and in the traffic the placement minimises. Nodes an executor's spec rules out
(:attr:`~kubesage.core.loop.view.PodInfo.eligible_nodes`: cordoned, tainted against its
tolerations, not matching its ``nodeSelector`` or required node affinity) take none.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kubesage.adapters.spark.cluster_room import only_on, topology_room
from kubesage.adapters.spark.job_hints import (
    DEFAULT_PROFILE,
    INPUT_LOCALITY_ANNOTATION,
    parse_locality,
)
from kubesage.adapters.spark.placement import (
    ExecutorShape,
    SparkPlacement,
    executors_with_room,
    place_executors,
)
from kubesage.adapters.spark.shuffle_model import ShuffleProfile, rack_locality
from kubesage.core.arrays import FloatArray
from kubesage.core.errors import CapacityError, InputError
from kubesage.core.loop.actions import Action, Bind, Plan, Reservation, digest
from kubesage.core.loop.reconciler import Reconciled, may_place
from kubesage.core.loop.view import PodInfo, WorldView, eligible_for_all
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import Placement, PodRequest

NAME = "spark-placement"

ROLE_LABEL = "spark-role"
"""Spark on Kubernetes' pod role label (``driver`` or ``executor``)."""
EXECUTOR_ROLE = "executor"
APP_LABEL = "spark-app-selector"
"""Spark on Kubernetes' application id label, on the driver and every executor."""
EXECUTOR_ID_LABEL = "spark-exec-id"
"""The executor's number within its application (1, 2, …)."""

PROFILE_LABEL = "spark-exec-resourceprofile-id"
"""The executor's resource profile (0: the application's default executors)."""

AppKey = tuple[str, str]
"""An application: (namespace, ``spark-app-selector``)."""
GroupKey = tuple[str, str, str]
"""Executors placed together: (namespace, ``spark-app-selector``, resource profile id)."""


def is_executor(pod: PodInfo) -> bool:
    """A Spark executor pod (labelled with its role and application)."""
    return pod.labels.get(ROLE_LABEL) == EXECUTOR_ROLE and bool(pod.labels.get(APP_LABEL))


def asks_for_gpus(request: PodRequest) -> bool:
    """Whether the pod asks for GPUs (whole, shared or MIG): not this reconciler's to place."""
    return bool(request.num_gpu or request.gpu_milli or request.mig is not None)


def places(pod: PodInfo) -> bool:
    """The one rule of which pods ``spark-placement`` places, used by :meth:`claims` and by
    :meth:`reconcile` alike: Spark executors asking for CPU and memory only (the
    placement model has no GPUs; GPU executors are left to the scheduler)."""
    return is_executor(pod) and not asks_for_gpus(pod.request)


def _executor_order(pod: PodInfo) -> tuple[int, str]:
    number = pod.labels.get(EXECUTOR_ID_LABEL, "")
    return (int(number) if number.isdecimal() else 0, str(pod.ref))


@dataclass(frozen=True)
class SparkPlacementSettings:
    """How ``spark-placement`` places."""

    max_node_share: float = 0.25
    """Most executors per node, as a share of the group (as ``kubesage spark conf``)."""
    profile: ShuffleProfile = DEFAULT_PROFILE
    """The traffic shape the placement minimises cross-rack bytes for."""
    claim_executors: bool = True
    """Claim kubesage-scheduled Spark executors from the secondary scheduler (False:
    place only pods no other scheduler places)."""


@dataclass(frozen=True)
class SparkPlacementReconciler:
    """The ``spark-placement`` reconciler (see the module docstring)."""

    settings: SparkPlacementSettings = field(default_factory=SparkPlacementSettings)
    name: str = NAME

    @property
    def reads(self) -> frozenset[str]:
        """Only the cluster (and the DRTG)."""
        return frozenset()

    def claims(self, pods: Sequence[PodInfo]) -> bool:
        """True for a group of Spark executors this reconciler places (:func:`places`: no
        GPU executors, which the secondary scheduler keeps): it places them together."""
        return self.settings.claim_executors and bool(pods) and all(map(places, pods))

    def reconcile(self, view: WorldView) -> Reconciled:
        groups = self._groups(view.pending)
        if not groups:
            return Reconciled(memory=dict(view.memory))
        if view.topology is None:
            return Reconciled(
                memory=dict(view.memory),
                notes=[f"{_app(key)}: no topology (DRTG) configured" for key in _in_order(groups)],
            )
        drtg = view.topology
        aligned = topology_room(drtg, view.state)
        if len(aligned.missing) == drtg.num_nodes:
            return Reconciled(
                memory=dict(view.memory),
                notes=[f"{_app(key)}: {aligned.disjoint(drtg)}" for key in _in_order(groups)],
            )
        notes = [note for note in (aligned.missing_note(),) if note is not None]
        state = view.state  # never changed: each plan is tried on copies
        actions: list[Plan] = []
        on_topology = aligned.state
        running = self._running(drtg, view.running.values())
        for key in _in_order(groups):
            app = (key[0], key[1])
            already = running.get(app, [])
            planned = self._plan(drtg, on_topology, state, key, groups[key], already, notes)
            if isinstance(planned, str):
                notes.append(planned)
            else:
                plan, state, on_topology, nodes = planned
                actions.append(plan)
                running[app] = [*already, *nodes]  # a later profile joins them
        return Reconciled(actions=actions, memory=dict(view.memory), notes=notes)

    def _groups(self, pending: Iterable[PodInfo]) -> dict[GroupKey, list[PodInfo]]:
        """Pending executors this reconciler places, by application and resource profile,
        in executor order."""
        groups: dict[GroupKey, list[PodInfo]] = defaultdict(list)
        for pod in pending:
            if not is_executor(pod):
                continue
            if may_place(self, [pod]):
                profile = pod.labels.get(PROFILE_LABEL, "0")
                groups[(pod.ref.namespace, pod.labels[APP_LABEL], profile)].append(pod)
        return {key: sorted(members, key=_executor_order) for key, members in groups.items()}

    @staticmethod
    def _running(drtg: DRTG, running: Iterable[PodInfo]) -> dict[AppKey, list[int]]:
        """The DRTG nodes of each application's bound executors (on the topology)."""
        nodes: dict[AppKey, list[int]] = defaultdict(list)
        index = drtg.node_index
        for pod in running:
            if is_executor(pod) and pod.placement is not None and pod.placement.node in index:
                nodes[(pod.ref.namespace, pod.labels[APP_LABEL])].append(index[pod.placement.node])
        return nodes

    def _plan(
        self,
        drtg: DRTG,
        aligned: ClusterState,
        state: ClusterState,
        key: GroupKey,
        members: Sequence[PodInfo],
        running: Sequence[int],
        notes: list[str],
    ) -> tuple[Plan, ClusterState, ClusterState, list[int]] | str:
        """One group's plan with ``state`` and ``aligned`` as they are once its executors
        are bound (copies), and their DRTG nodes; or why there is none. Its ``running`` executors
        (their DRTG nodes) count: more executors join the racks it runs in. When not all
        fit, as many as fit are bound (a Spark job runs with the executors it has) and
        the rest wait for room; when the balance limit alone holds them back, it gives way."""
        app = _app(key)
        requests = [member.request for member in members]
        if not all(map(places, members)):
            return f"{app}: executors asking for GPUs are left to the scheduler"
        shape = ExecutorShape(
            executors=len(members),
            cores=max(1, math.ceil(max(r.cpu_milli for r in requests) / 1000)),
            memory_mib=max(1, max(r.memory_mib for r in requests)),
        )
        on = only_on(aligned, eligible_for_all(members))
        share = self.settings.max_node_share
        fit = executors_with_room(on, shape, max_node_share=share, running=running)
        if fit < shape.executors:
            unbalanced = executors_with_room(on, shape, max_node_share=1.0, running=running)
            if unbalanced > fit:
                fit, share = unbalanced, 1.0
            if fit == 0:
                return (
                    f"{app}: no node its executors may use has room for one of "
                    f"{shape.cores} cores and {shape.memory_mib} MiB; none bound"
                )
            limit = "" if share == self.settings.max_node_share else " (balance limit relaxed)"
            notes.append(
                f"{app}: room for {fit} of its {shape.executors} pending executor(s) now{limit}; "
                "the rest wait for room"
            )
            members = members[:fit]
            shape = dataclasses.replace(shape, executors=fit)
        local = self._locality(drtg, app, members, notes)
        try:
            placement = place_executors(
                drtg,
                on,
                shape,
                self.settings.profile,
                local,
                max_node_share=share,
                running=running,
            )
        except CapacityError as exc:  # executors_with_room said they fit: be safe
            return f"{app}: {exc}; none bound"
        trial = state.copy()
        trial_aligned = aligned.copy()
        placements: list[Placement] = []
        for member, node in zip(members, placement.nodes, strict=True):
            name = drtg.node_names[node]
            at = trial.placement(trial.node_index[name], [], member.request)
            try:
                trial.allocate(member.request, at)
                on_topology = trial_aligned.placement(node, [], member.request)
                trial_aligned.allocate(member.request, on_topology)
            except CapacityError as exc:
                return f"{app}: {member.ref} does not fit on {name} ({exc}); none bound"
            placements.append(at)
        plan = self._as_plan(drtg, key, members, placements, placement)
        return plan, trial, trial_aligned, list(placement.nodes)

    def _locality(
        self, drtg: DRTG, app: str, members: Sequence[PodInfo], notes: list[str]
    ) -> FloatArray | None:
        """The input's rack shares from the first annotated executor; a bad annotation is
        noted and ignored (the executors are still placed, without input locality)."""
        for member in members:
            text = member.annotations.get(INPUT_LOCALITY_ANNOTATION)
            if text is None:
                continue
            source = f"annotation {INPUT_LOCALITY_ANNOTATION} on {member.ref}"
            try:
                return rack_locality(drtg, parse_locality(text, source))
            except InputError as exc:
                notes.append(f"{app}: input locality ignored ({source}): {exc}")
                return None
        return None

    def _as_plan(
        self,
        drtg: DRTG,
        key: GroupKey,
        members: Sequence[PodInfo],
        placements: Sequence[Placement],
        placement: SparkPlacement,
    ) -> Plan:
        app = _app(key)
        plan_id = f"{NAME}/{key[0]}/{key[1]}/" + digest(
            [[str(m.ref), p.node] for m, p in zip(members, placements, strict=True)]
        )
        per_rack = placement.executors_per_rack(drtg)
        racks = ", ".join(f"{rack} ({count})" for rack, count in per_rack.items())
        traffic = placement.estimate
        total = traffic.shuffle_bytes + self.settings.profile.input_bytes
        share = f" ({traffic.cross_rack_bytes / total:.0%})" if total else ""
        why = (
            f"{app}: {len(members)} executor(s) placed on the live DRTG in {racks}. "
            + "; ".join(placement.reasons)
            + f". Expected cross-rack bytes: {traffic.cross_rack_bytes:,.0f} of {total:,.0f}"
            + share
        )
        steps: list[Action] = [
            Bind(
                reconciler=NAME,
                explanation=(
                    f"executor {member.labels.get(EXECUTOR_ID_LABEL, member.ref.name)} of {app} "
                    f"on {at.node} in {drtg.rack_names[drtg.node_rack[node]]}"
                ),
                plan=plan_id,
                pod=member.ref,
                request=member.request,
                placement=at,
            )
            for member, at, node in zip(members, placements, placement.nodes, strict=True)
        ]
        return Plan(
            id=plan_id,
            reconciler=NAME,
            explanation=why,
            steps=tuple(steps),
            reservations=tuple(
                Reservation(request=member.request, placement=at)
                for member, at in zip(members, placements, strict=True)
            ),
        )


def _app(key: GroupKey) -> str:
    profile = "" if key[2] == "0" else f" (resource profile {key[2]})"
    return f"Spark application {key[0]}/{key[1]}{profile}"


def _in_order(groups: Mapping[GroupKey, Sequence[PodInfo]]) -> list[GroupKey]:
    """Groups by namespace and application; within one, the largest executors first (as
    first-fit decreasing packs), then by resource profile."""

    def order(key: GroupKey) -> tuple[str, str, int, int, int, str]:
        cpu = max(member.request.cpu_milli for member in groups[key])
        memory = max(member.request.memory_mib for member in groups[key])
        profile = int(key[2]) if key[2].isdecimal() else -1
        return key[0], key[1], -cpu, -memory, profile, key[2]

    return sorted(groups, key=order)
