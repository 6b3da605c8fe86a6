"""The secondary scheduler: pods with ``spec.schedulerName`` set to kubesage's name.

Each cycle (on every cluster change, at least every ``interval_s``):

1. take the pending pods naming this scheduler from :class:`ClusterSync`'s cache (with
   the GPUs their ResourceClaims ask for; a pod whose claim is not created yet waits)
   in gangs (:mod:`kubesage.core.k8s.gang`), highest priority first, then oldest; a
   pod still held by scheduling gates or being deleted is not pending
   (:mod:`kubesage.core.k8s.schedulable`), so it does not count towards its gang's
   ``min-available`` either; nor does a pod with required constraints kubesage cannot
   honour (:mod:`kubesage.core.k8s.unsupported_constraints`): it stays pending with a
   ``FailedScheduling`` event naming the field;
2. a gang with fewer members than ``min-available`` (counting members already bound and
   not being deleted) waits; past its waiting time it gets a ``FailedScheduling`` event
   and waits afresh;
3. otherwise, under the state lock, all its pending members are placed on a copy of
   the state with the core policy, honouring each pod's ``nodeSelector``, required
   node affinity and taint tolerations (and ``spec.unschedulable``) as kube-scheduler
   does (:mod:`kubesage.core.k8s.node_eligibility`), and its other resources, the
   node's pod count and host ports as NodeResourcesFit and NodePorts do, each member
   seeing those placed before it (:mod:`kubesage.core.k8s.node_extras`); if that fails
   and more members are pending than needed, just the ``min-available`` first ones are
   tried. All
   placed: every member is *assumed* in the live state, its ResourceClaims (if any)
   allocated to the chosen devices and reserved for it
   (:class:`~kubesage.core.k8s.dra_binding.ClaimAllocator`), then bound
   (:class:`~kubesage.core.k8s.binder.Binder`), with a ``Scheduled`` event. None
   placed: one ``FailedScheduling`` event per waiting time and a retry at the next cycle;
4. a bind that fails un-assumes that member and reports it; members already bound stay
   bound (Kubernetes has no unbind), and the rest are retried: the gang counts its
   bound members towards ``min-available`` next time.

Once a gang has ``min-available`` members bound, later members are placed one by one.

``FailedScheduling`` events are posted per pod: again only when its message changes or
once per waiting time (the record of a pod is dropped once it is no longer pending).
They are posted synchronously, each bounded by a 5 s request timeout.

With ``defer`` (``kubesage serve`` passes the control loop's
:meth:`~kubesage.core.loop.control.ControlLoop.claims`), a gang (or lone pod) with no
member bound yet that the loop places itself (a whole-GPU gang ``gpu-gang`` rings,
Spark executors ``spark-placement`` keeps near their input) is left to the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubesage.core.errors import CapacityError, DependencyError, InputError
from kubesage.core.k8s import apiclient as k8s_client
from kubesage.core.k8s.binder import Binder, placement_annotations
from kubesage.core.k8s.dra_allocation import AllocationRefusedError
from kubesage.core.k8s.dra_binding import ClaimAllocator
from kubesage.core.k8s.dra_requests import ClaimsPendingError
from kubesage.core.k8s.existing_anti_affinity import RepelIndex
from kubesage.core.k8s.extras_ledger import ledger_for
from kubesage.core.k8s.gang import GangAnnotationError, GangSpec, gang_of
from kubesage.core.k8s.informer import ClusterNotReadyError, ClusterSync, pod_key
from kubesage.core.k8s.node_eligibility import EligibilityCache
from kubesage.core.k8s.node_extras import ExtrasMember, NodeExtras, place_with_extras
from kubesage.core.k8s.schedulable import is_terminating, pod_name
from kubesage.core.k8s.scheduling_events import SchedulingEvents
from kubesage.core.k8s.scheduling_policy import NamespaceLabels
from kubesage.core.k8s.translate import TranslateError
from kubesage.core.k8s.unsupported_constraints import not_implemented, unsupported_constraints
from kubesage.core.observability import metrics
from kubesage.core.policy.base import Policy
from kubesage.core.types import Placement, PodRequest

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass
class CycleReport:
    """What one scheduling cycle did."""

    bound: dict[str, str] = field(default_factory=dict)
    """``namespace/name`` → node for every pod bound."""
    waiting: dict[str, str] = field(default_factory=dict)
    """Gang key → why it waits (too few members, or no room)."""
    failed: dict[str, str] = field(default_factory=dict)
    """``namespace/name`` → why it could not be bound or read."""


@dataclass
class _Member:
    pod: Obj
    gang: GangSpec
    request: PodRequest


@dataclass
class _Wait:
    since: float


class SecondaryScheduler:
    """Schedules the pods that name ``scheduler_name`` (see the module docstring)."""

    def __init__(
        self,
        api: k8s_client.ApiClient,
        sync: ClusterSync,
        policy: Policy,
        *,
        scheduler_name: str,
        binder: Binder | None = None,
        interval_s: float = 1.0,
        identity: str = "",
        clock: Callable[[], float] = time.monotonic,
        defer: Callable[[Sequence[Mapping[str, Any]]], bool] | None = None,
        claims: ClaimAllocator | None = None,
        namespace_labels: NamespaceLabels | None = None,
    ) -> None:
        """``namespace_labels``: the namespaces' labels, for the running pods'
        anti-affinity terms that select namespaces by label (without them such a term
        is taken to select every namespace)."""
        if not scheduler_name:
            raise InputError("SecondaryScheduler: scheduler_name must not be empty")
        # Any: called with _preload_content=False (raw JSON), which the generated
        # signatures do not describe.
        self._core: Any = k8s_client.CoreV1Api(api)
        self.sync = sync
        self.policy = policy
        self.scheduler_name = scheduler_name
        self.binder = binder or Binder(api)
        self.claims = claims or ClaimAllocator(api)
        """Allocates the ResourceClaims of pods that ask for GPUs through DRA."""
        self.interval_s = interval_s
        self.identity = identity or scheduler_name
        self._clock = clock
        self._defer = defer
        self._namespace_labels = namespace_labels
        self._waits: dict[str, _Wait] = {}
        self.events = SchedulingEvents(self._core, scheduler_name, self.identity)
        self._masks: EligibilityCache | None = None
        self._repel: RepelIndex | None = None
        """The required anti-affinity of the pods already placed, for one cycle."""
        self._extras: NodeExtras | None = None
        """What the pods on each node use of the resources the core does not count, and
        their host ports (:mod:`kubesage.core.k8s.node_extras`), for one cycle."""
        self._ledger = ledger_for(sync)
        self._stop: threading.Event | None = None
        """``run``'s stop signal: set once the Lease is lost (binds check it too)."""
        self.cycles = 0
        self.binds = 0
        self.bind_failures = 0
        self.errors = 0

    # -- loop -----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Schedule until ``stop`` is set (run it only while leading)."""
        log.info("secondary scheduler %s started", self.scheduler_name)
        self._stop = stop
        while not stop.is_set():
            generation = self.sync.generation
            if self.sync.ready:
                try:
                    self.schedule_once()
                except ClusterNotReadyError as exc:
                    log.info("secondary scheduler waits: %s", exc)
                except Exception:  # the loop outlives one bad cycle: log, count, go on
                    self.errors += 1
                    metrics.ERRORS.labels("secondary", "cycle").inc()
                    log.exception("scheduling cycle failed")
            deadline = time.monotonic() + self.interval_s
            while not stop.is_set() and time.monotonic() < deadline:
                if self.sync.wait_for_change(generation, min(0.2, self.interval_s)) != generation:
                    break
        self._stop = None
        log.info("secondary scheduler %s stopped", self.scheduler_name)

    def schedule_once(self) -> CycleReport:
        """One cycle over the pending pods (see the module docstring)."""
        self.cycles += 1
        self._masks = None  # node objects may have changed since the last cycle
        self._extras = None  # and the pods on them
        self._repel = None
        report = CycleReport()
        self.sync.expire_assumed()
        now = self._clock()
        gangs = self._pending_gangs(report, now)
        bound = self._bound_members()
        for key in list(self._waits):
            if key not in gangs:
                del self._waits[key]
        for key, members in gangs.items():
            if not bound.get(key) and self._deferred(members):
                report.waiting[key] = f"gang {key}: placed by the control loop"
                continue
            self._schedule_gang(key, members, bound.get(key, 0), now, report)
        return report

    def _deferred(self, members: Sequence[_Member]) -> bool:
        """The control loop places these members itself (see the module docstring)."""
        if self._defer is None:
            return False
        try:
            return self._defer([m.pod for m in members])
        except Exception:  # a failing claim leaves the gang here
            log.exception("asking the control loop about a gang failed")
            return False

    # -- gathering --------------------------------------------------------------------------

    def _pending_gangs(self, report: CycleReport, now: float) -> dict[str, list[_Member]]:
        gangs: dict[str, list[_Member]] = defaultdict(list)
        pending = self.sync.pending_pods(self.scheduler_name)
        keys = {pod_key(pod) for pod in pending}
        self.events.keep_only(keys)
        for pod in pending:
            try:
                gang = gang_of(pod)
                request = self.sync.request_of(pod)  # with its claims' GPUs, from the cache
            except ClaimsPendingError as exc:  # the resourceclaim controller is on it
                report.waiting[pod_name(pod)] = str(exc)
                continue
            except (GangAnnotationError, TranslateError) as exc:
                report.failed[pod_name(pod)] = str(exc)
                self.events.bad(pod, str(exc))
                continue
            unsupported = unsupported_constraints(pod)
            if unsupported:  # never bound: it stays pending, outside its gang
                report.failed[pod_name(pod)] = not_implemented(unsupported)
                self.events.warn([pod], not_implemented(unsupported), now, gang.waiting_time_s)
                continue
            gangs[gang.key].append(_Member(pod, gang, request))

        def order(item: tuple[str, list[_Member]]) -> tuple[int, str]:
            members = item[1]
            priority = max(m.request.priority for m in members)
            oldest = min(str(m.pod["metadata"].get("creationTimestamp") or "") for m in members)
            return (-priority, oldest)

        return dict(sorted(gangs.items(), key=order))

    def _bound_members(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for pod in self.sync.bound_pods():
            if (pod.get("spec") or {}).get("schedulerName") != self.scheduler_name:
                continue
            if is_terminating(pod):  # leaving (a job restart, say): no longer a member
                continue
            try:
                gang = gang_of(pod)
            except GangAnnotationError:
                continue
            if gang.named:
                counts[gang.key] += 1
        return counts

    # -- one gang ------------------------------------------------------------------------------

    def _schedule_gang(
        self, key: str, members: list[_Member], bound: int, now: float, report: CycleReport
    ) -> None:
        minimum = max(m.gang.min_available for m in members)
        waiting_s = max(m.gang.waiting_time_s for m in members)
        wait = self._waits.setdefault(key, _Wait(since=now))
        present = len(members) + bound
        if present < minimum:
            reason = f"gang {key}: {present} of {minimum} members present"
            report.waiting[key] = reason
            if now - wait.since >= waiting_s:
                message = f"{reason} after {waiting_s:.0f}s; waiting again"
                self.events.warn([m.pod for m in members], message, now, waiting_s)
                wait.since = now
            return
        members = sorted(members, key=lambda m: pod_name(m.pod))
        groups = [members] if bound < minimum else [[m] for m in members]
        for group in groups:
            need = max(1, minimum - bound) if len(groups) == 1 else 1
            placed, reason = self._place(group, need)
            if placed is None:
                report.waiting[key] = reason
                metrics.DECISIONS.labels("schedule", "no_fit").inc()
                message = f"0/{len(group)} placed: {reason}"
                self.events.warn([m.pod for m in group], message, now, waiting_s)
                continue
            self._bind(placed, report, now)
        if key not in report.waiting:
            self._waits.pop(key, None)

    def _place(
        self, members: Sequence[_Member], need: int
    ) -> tuple[list[tuple[_Member, Placement]] | None, str]:
        """Place all members (else the first ``need``) and assume them; or say why not."""
        # Pending pods kube-scheduler nominated to a node (preemption) hold their room.
        with self.sync.locked_placing([m.pod for m in members]) as (state, node_names):
            masks, extras, repel = self._filters(node_names)
            attempts = [list(members)]
            if need < len(members):
                attempts.append(list(members[:need]))
            reason = "no members"
            for attempt in attempts:
                # Each member also sees the extras (host ports, other resources, the pod
                # count) of the members placed before it (node_extras.place_with_extras).
                mark = extras.mark()
                outcome = place_with_extras(
                    state.copy(),
                    [
                        ExtrasMember(
                            m.request,
                            repel.narrow(masks.eligible(m.pod), m.pod),
                            self._ledger.extras_of(m.pod),
                        )
                        for m in attempt
                    ],
                    self.policy,
                    extras,
                )
                if outcome.placements is None:
                    reason = outcome.reason
                    continue
                placed = list(zip(attempt, outcome.placements, strict=True))
                try:
                    for member, placement in placed:
                        self.sync.assume(member.pod, member.request, placement)
                except CapacityError as exc:  # the copy and the live state disagree: a bug
                    for member, _ in placed:
                        self.sync.forget(member.pod)
                    extras.rollback(mark)
                    log.error("assuming gang members failed: %s", exc)
                    return None, f"internal: {exc}"
                for member, placement in placed:
                    self._ledger.placed(member.pod, placement.node)
                return placed, outcome.reason
            return None, reason

    def _filters(self, node_names: list[str]) -> tuple[EligibilityCache, NodeExtras, RepelIndex]:
        """This cycle's node filters over the state's ``node_names`` (a rebuild of the
        state makes a new list): its spec's, its extras' with what is on each node, and
        the required anti-affinity of the pods already there."""
        masks, extras, repel = self._masks, self._extras, self._repel
        if (
            masks is None
            or extras is None
            or repel is None
            or masks.node_names is not node_names
            or extras.node_names is not node_names
        ):
            nodes = self.sync.nodes()
            bound = self.sync.bound_pods()
            masks = self._masks = EligibilityCache(nodes, node_names, binds_now=True)
            extras = self._extras = self._ledger.use(
                nodes, node_names, bound, self.sync.placement_of
            )
            repel = self._repel = RepelIndex(bound, nodes, node_names, self._namespace_labels)
        return masks, extras, repel

    def _bind(
        self, placed: list[tuple[_Member, Placement]], report: CycleReport, now: float
    ) -> None:
        for index, (member, placement) in enumerate(placed):
            if self._stop is not None and self._stop.is_set():
                # The Lease is lost (another replica may schedule now): bind no more.
                self._give_back(placed[index:])
                report.waiting[pod_name(member.pod)] = "not bound: this replica stopped leading"
                return
            try:
                self._bind_one(member, placement, report, now)
            except BaseException:
                # Nothing will finish these binds, and an assumption whose bind never
                # finished never expires on its own: give their room back.
                self._give_back(placed[index:])
                raise

    def _give_back(self, placed: Sequence[tuple[_Member, Placement]]) -> None:
        for member, _ in placed:
            self.sync.forget(member.pod)
            self._ledger.unplaced(member.pod)

    def _bind_one(
        self, member: _Member, placement: Placement, report: CycleReport, now: float
    ) -> None:
        """Bind one assumed member: its claims' devices, then the Binding."""
        metadata = member.pod["metadata"]
        name = pod_name(member.pod)
        namespace, uid = metadata.get("namespace") or "default", str(metadata.get("uid") or "")
        allocated = None
        try:
            # A pod asking through ResourceClaims: its devices first (dra_binding).
            allocated = self.claims.allocate(
                member.pod,
                namespace=namespace,
                name=metadata["name"],
                uid=uid,
                placement=placement,
                request=member.request,
            )
            annotations = placement_annotations(placement)
            self.binder.bind(
                namespace,
                metadata["name"],
                uid,
                placement.node,
                annotations={**annotations, **(allocated.annotations if allocated else {})},
                stop=self._stop,  # the Lease lost: no retry (another replica schedules)
            )
        except (DependencyError, AllocationRefusedError) as exc:  # BindError included
            if allocated is not None:
                self.claims.release(allocated)
            self.bind_failures += 1
            metrics.BINDS.labels("failed").inc()
            metrics.DECISIONS.labels("schedule", "bind_failed").inc()
            self.sync.forget(member.pod)
            self._ledger.unplaced(member.pod)
            if self._extras is not None:
                self._extras.remove(placement.node, self._ledger.extras_of(member.pod))
            report.failed[name] = str(exc)
            log.warning("binding %s failed: %s", name, exc)
            message = f"binding failed: {exc}"
            self.events.warn([member.pod], message, now, member.gang.waiting_time_s)
            return
        self.sync.finish_binding(member.pod)  # its assumption's TTL starts now
        self.binds += 1
        metrics.BINDS.labels("bound").inc()
        metrics.DECISIONS.labels("schedule", "bound").inc()
        report.bound[name] = placement.node
        self.events.post(
            member.pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {name} to {placement.node}",
        )
