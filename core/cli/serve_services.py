"""What one ``kubesage serve`` process runs: the embedded or the live service.

:func:`embedded_service` decides on the embedded simulated cluster
(:mod:`kubesage.core.k8s.embedded`) with the file-based SchedulingPolicies;
:func:`live_service` lists and watches the API server (ClusterSync), binds through the
Binding subresource, reads SchedulingPolicy objects from the API and, with a scheduler
name, runs the secondary scheduler under a Lease. Either may run the control loop
(:mod:`kubesage.core.loop`). The command, its options and the HTTP server are
:mod:`kubesage.core.cli.serve`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubesage.core.cli.loop import embedded_loop, live_loop, loop_claims, with_forecasts
from kubesage.core.errors import InputError
from kubesage.core.k8s.binding import assume_and_bind
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.embedded_workload import DEFAULT_LIFETIME_S, EmbeddedWorkload
from kubesage.core.k8s.extender import Extender
from kubesage.core.k8s.policy_source import FilePolicySource, PolicySource
from kubesage.core.k8s.server import App, HealthCheck, MutateHandler, create_app
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.settings import LoopSettings
from kubesage.core.observability import metrics
from kubesage.core.observability.logging import log_event
from kubesage.core.policy.base import Policy, PolicyContext
from kubesage.core.policy.registry import make_policy
from kubesage.core.sim.settings import DEFAULT_SYNTHETIC_NODES, DEFAULT_SYNTHETIC_PODS
from kubesage.core.traces.synthetic import synthetic_workload
from kubesage.core.types import PodRequest

if TYPE_CHECKING:
    from pathlib import Path

    from kubesage.core.k8s.scheduling_policy import NamespaceLabels

log = logging.getLogger("kubesage.serve")

DEFAULT_POLICY = "fgd"
LEASE_NAMESPACE_ENV = "POD_NAMESPACE"
"""Namespace of the leader-election Lease (the Deployment sets it from the downward API)."""
POD_NAME_ENV = "POD_NAME"
"""This replica's identity in the Lease (defaults to host name and process id)."""


STEP_DOWN_WAIT_S = 15.0
"""How long stopping waits for the leader to step down (its scheduling and loop work to
end, the Lease to be released). Stepping down starts at SIGTERM, during the drain
(``--shutdown-delay-s``), so with the drain it stays inside Kubernetes' default 30 s
grace period."""


@dataclass
class Service:
    """Everything one ``serve`` process runs, and how to stop it."""

    extender: Extender
    description: str
    health: HealthCheck
    mutate: MutateHandler | None = None
    bind_waits_on_io: bool = True
    """False when binds stay in this process (the embedded cluster)."""
    loop: ControlLoop | None = None
    """The control loop running in a background thread, when started."""
    stoppers: list[Callable[[], None]] = field(default_factory=list)
    step_down: list[Callable[[], None]] = field(default_factory=list)
    """Started in a thread as soon as SIGTERM comes, while the server still drains: giving
    up the Lease, so another replica leads without waiting for this process to end."""

    def stepping_down(self) -> None:
        """Start :attr:`step_down` in a background thread (at most once)."""
        work, self.step_down = list(self.step_down), []
        if work:
            threading.Thread(
                target=lambda: [job() for job in work], name="step-down", daemon=True
            ).start()

    def start_loop(self, loop: ControlLoop, *, leading: bool = True) -> None:
        """Show ``loop`` on /debug/loop; run it in a background thread until :meth:`stop`
        (``leading`` False: a leader election starts and stops it instead)."""
        self.loop = loop
        self.stoppers.append(loop.close)
        if leading:
            self.stoppers.append(loop.start())
        self.description += f"; control loop every {loop.tick_s:g} s" + (
            " (dry run)" if loop.dry_run else ""
        )

    def app(self) -> App:
        """The HTTP app serving this service: extender, webhook, health, /debug/loop."""
        return create_app(
            self.extender,
            mutate=self.mutate,
            health=self.health,
            bind_waits_on_io=self.bind_waits_on_io,
            loop=self.loop.debug if self.loop is not None else None,
            forecaster=self.loop.forecaster_words if self.loop is not None else None,
        )

    def stop(self) -> None:
        for stopper in reversed(self.stoppers):
            try:
                stopper()
            except Exception:  # shutting down: log and go on with the rest
                log.exception("error while stopping")


def _policy(name: str, workload: list[PodRequest]) -> Policy:
    return make_policy(name, PolicyContext(seed=0, workload=tuple(workload)))


def _webhook(
    source: PolicySource,
    service: Service,
    namespace_labels: NamespaceLabels | None = None,
    scheduler_name: str | None = None,
) -> None:
    """Mount the webhook (namespace labels default to the name alone; kubesage schedules
    as ``scheduler_name``, default ``kubesage``)."""
    from kubesage.core.k8s.scheduling_policy import name_only_namespace_labels
    from kubesage.core.k8s.unsupported_constraints import KUBESAGE_SCHEDULER as KUBESAGE
    from kubesage.core.k8s.webhook import AdmissionWebhook

    labels = namespace_labels or name_only_namespace_labels
    named = (scheduler_name or KUBESAGE,)
    webhook = AdmissionWebhook(source, namespace_labels=labels, schedulers=named)
    service.mutate = webhook.handle
    service.stoppers.append(webhook.close)


def embedded_service(
    policy_name: str = DEFAULT_POLICY,
    *,
    nodes: int = DEFAULT_SYNTHETIC_NODES,
    fill: float = 0.0,
    policies_dir: Path | None = None,
    loop: LoopSettings | None = None,
    arrivals_per_s: float = 0.0,
    pod_lifetime_s: float = DEFAULT_LIFETIME_S,
) -> Service:
    """The embedded simulated cluster (pre-loaded to ``fill`` of its GPUs by the policy),
    its binder and the file-based policies; with ``loop``, the control loop on it; with
    ``arrivals_per_s``, pods arriving and leaving (:mod:`~kubesage.core.k8s.embedded_workload`)."""
    if not 0.0 <= fill < 1.0:
        raise InputError(f"--fill must be in [0, 1), got {fill}")
    cluster = EmbeddedCluster.synthetic(nodes)
    policy = _policy(policy_name, cluster.workload)
    placed = cluster.fill(policy, fill) if fill else 0
    metrics.CLUSTER_NODES.set(cluster.state.num_nodes)
    loaded = f", {placed} pods pre-placed to {fill:.0%} GPU allocation" if placed else ""
    control = embedded_loop(cluster, policy_name, loop) if loop is not None else None
    policy = with_forecasts(policy, control, loop)
    service = Service(
        extender=Extender(cluster, policy, cluster.binder(policy)),
        description=f"{cluster.description}{loaded}, policy {policy_name}",
        health=lambda: (True, cluster.description),
        bind_waits_on_io=False,
    )
    _webhook(FilePolicySource(policies_dir), service)
    if control is not None:
        service.start_loop(control)
    if arrivals_per_s:
        if control is None:
            raise InputError("--arrivals-per-s needs the control loop to place the arrivals")
        workload = EmbeddedWorkload(cluster, arrivals_per_s, lifetime_s=pod_lifetime_s)
        service.stoppers.append(workload.start())
        service.description += f"; {arrivals_per_s:g} pods/s arriving"
    return service


def live_service(
    api: Any,
    policy_name: str = DEFAULT_POLICY,
    *,
    scheduler_name: str | None = None,
    loop: LoopSettings | None = None,
) -> Service:
    """ClusterSync + Binder on the API server, API policies, the secondary scheduler, and
    with ``loop`` the control loop."""
    from kubesage.core.k8s.binder import Binder
    from kubesage.core.k8s.informer import ClusterSync
    from kubesage.core.k8s.namespaces import NamespaceCache
    from kubesage.core.k8s.policy_source import ApiPolicySource

    # The typical pods FGD measures fragmentation against: openb's request mix.
    workload = synthetic_workload(DEFAULT_SYNTHETIC_PODS, seed=0)
    sync = ClusterSync(api)
    binder = Binder(api)
    # namespaceSelector needs the namespace's labels: an AdmissionReview names it only, and
    # a running pod's anti-affinity term may select the namespaces it repels by label.
    namespaces = NamespaceCache(api)
    control = None
    if loop is not None:
        control = live_loop(
            api,
            sync,
            policy_name,
            workload,
            loop,
            binder=binder,
            scheduler_name=scheduler_name,
            namespace_labels=namespaces,
        )
    policy = with_forecasts(_policy(policy_name, workload), control, loop)
    policy_source = ApiPolicySource(api)

    def health() -> tuple[bool, str]:
        if not sync.ready:
            return False, "cluster state not synced from the API server yet"
        # The webhook answers from these caches: before their first list it would admit
        # every pod unchanged (the SchedulingPolicy CRD missing, RBAC refusing it).
        if not policy_source.listed:
            return False, f"SchedulingPolicy objects not listed yet: {policy_source.error}"
        if not namespaces.listed:
            return False, f"namespaces not listed yet: {namespaces.error}"
        with sync.locked() as (state, _):
            metrics.CLUSTER_NODES.set(state.num_nodes)
            return True, f"live cluster, {state.num_nodes} nodes"

    service = Service(
        extender=Extender(
            sync, policy, assume_and_bind(sync, binder, policy), claim_requests=sync.request_of
        ),
        description=f"live cluster through the API server, policy {policy_name}",
        health=health,
    )
    sync.start()
    service.stoppers.append(sync.stop)
    namespaces.start()
    service.stoppers.append(namespaces.stop)
    policy_source.start()
    service.stoppers.append(policy_source.stop)
    _webhook(policy_source, service, namespaces, scheduler_name)
    if control is not None:
        # Under --scheduler-name the replicas elect a leader: only it runs the loop, so
        # two replicas never evict the same pods. Without one, this replica runs it.
        service.start_loop(control, leading=not scheduler_name)
    if scheduler_name:
        # Its own policy instance: policy caches are not shared across threads.
        secondary = with_forecasts(_policy(policy_name, workload), control, loop)
        _secondary(api, sync, binder, secondary, scheduler_name, service, control, namespaces)
    return service


def _secondary(
    api: Any,
    sync: Any,
    binder: Any,
    policy: Policy,
    scheduler_name: str,
    service: Service,
    control: ControlLoop | None = None,
    namespace_labels: NamespaceLabels | None = None,
) -> None:
    """The secondary scheduler (and the control loop, if given) while holding the Lease."""
    from kubesage.core.k8s.leader import LeaderElector
    from kubesage.core.k8s.secondary import SecondaryScheduler

    scheduler = SecondaryScheduler(
        api,
        sync,
        policy,
        scheduler_name=scheduler_name,
        binder=binder,
        defer=None if control is None else loop_claims(control),
        namespace_labels=namespace_labels,
    )
    elector = LeaderElector(
        api,
        lease_name=f"kubesage-{scheduler_name}",
        namespace=os.environ.get(LEASE_NAMESPACE_ENV, "kube-system"),
        identity=os.environ.get(POD_NAME_ENV) or f"{socket.gethostname()}-{os.getpid()}",
    )
    stop = threading.Event()
    term: dict[str, Any] = {}

    def on_start() -> None:
        term_stop = threading.Event()
        previous = term.get("thread")  # the last term's, when it outlived its stop

        def schedule() -> None:
            if previous is not None:
                previous.join()  # one scheduler at a time: its bind in flight ends first
            scheduler.run(term_stop)

        thread = threading.Thread(target=schedule, name="secondary-scheduler", daemon=True)
        term.update(stop=term_stop, thread=thread)
        thread.start()
        if control is not None:
            term["loop"] = control.start()
        log_event(log, logging.INFO, "leading", scheduler_name=scheduler_name)

    def on_stop() -> None:  # every stop is asked first, then waited for
        if "stop" in term:
            term["stop"].set()  # no scheduling cycle starts once the Lease is lost
        if "loop" in term:
            term.pop("loop")()  # returns once the loop's tick in flight has ended
        if "thread" in term:
            term["thread"].join(10.0)  # a bind in flight (retries included) may outlast it
            if not term["thread"].is_alive():
                term.pop("thread")
        log_event(log, logging.INFO, "stopped_leading", scheduler_name=scheduler_name)

    thread = threading.Thread(
        target=elector.run, args=(on_start, on_stop, stop), name="leader-election", daemon=True
    )
    thread.start()

    def stop_campaign() -> None:
        stop.set()  # on_stop ends the term's work, then the Lease is released
        thread.join(STEP_DOWN_WAIT_S)
        if thread.is_alive():
            log_event(
                log,
                logging.WARNING,
                "step_down_slow",
                scheduler_name=scheduler_name,
                detail=f"still stepping down after {STEP_DOWN_WAIT_S:g} s; the Lease expires",
            )

    service.step_down.append(stop.set)
    service.stoppers.append(stop_campaign)
    service.description += f"; secondary scheduler '{scheduler_name}' under a Lease"
