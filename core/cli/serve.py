"""``kubesage serve``: the scheduler extender, admission webhook, health and metrics.

Without a kubeconfig (none given, no ``KUBECONFIG``, no ``~/.kube/config``, not in a
pod) or with ``--embedded``, it decides on the embedded simulated cluster
(:mod:`kubesage.core.k8s.embedded`) and reads SchedulingPolicies from
``configs/scheduling-policies``. With one, it lists and watches the API server
(ClusterSync), binds through the Binding subresource, reads SchedulingPolicy
objects from the API, and with ``--scheduler-name`` also runs the secondary
scheduler for pods that name it, under a Lease so only one replica schedules.

In both modes the control loop (:mod:`kubesage.core.loop`, wired by
:mod:`kubesage.core.cli.loop`) runs on the wall clock in a background thread, every
``--tick-s``, and is stopped on shutdown; ``GET /debug/loop`` shows it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import uvloop

from kubesage.core import gc_pauses
from kubesage.core.cli.errors import user_errors
from kubesage.core.cli.http_options import (
    HeaderTimeoutOption,
    KeepAliveOption,
    MaxHeaderBytesOption,
    MaxHeadersOption,
    MaxUrlBytesOption,
)
from kubesage.core.cli.loop import (
    embedded_loop,
    live_loop,
    loop_claims,
    loop_inputs,
    with_forecasts,
)
from kubesage.core.cli.loop_options import (
    AuditLogOption,
    DryRunOption,
    ForecastModelOption,
    ForecastWeightOption,
    MaxEvictionsOption,
    MigConfigMapOption,
    PrometheusOption,
    TickOption,
    TopologyOption,
)
from kubesage.core.cli.options import MetricMapOption
from kubesage.core.errors import InputError
from kubesage.core.heap import start_trimming
from kubesage.core.k8s import http_limits
from kubesage.core.k8s.binding import assume_and_bind
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.embedded_workload import DEFAULT_LIFETIME_S, EmbeddedWorkload
from kubesage.core.k8s.extender import Extender
from kubesage.core.k8s.http_limits import HttpLimits
from kubesage.core.k8s.http_server import HttpServer
from kubesage.core.k8s.policy_source import FilePolicySource, PolicySource
from kubesage.core.k8s.server import App, HealthCheck, MutateHandler, create_app
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.settings import DEFAULT_TICK_S, LoopSettings
from kubesage.core.observability import metrics
from kubesage.core.observability.logging import configure_logging, log_event
from kubesage.core.policy.base import Policy, PolicyContext
from kubesage.core.policy.registry import make_policy, policy_names
from kubesage.core.sim.settings import DEFAULT_SYNTHETIC_NODES, DEFAULT_SYNTHETIC_PODS
from kubesage.core.traces.synthetic import synthetic_workload
from kubesage.core.types import PodRequest

if TYPE_CHECKING:
    from kubesage.core.k8s.webhook import NamespaceLabels

log = logging.getLogger("kubesage.serve")

DEFAULT_PORT = 8443
"""The port the Deployment exposes (HTTPS when --tls-cert/--tls-key are given)."""
DEFAULT_POLICY = "fgd"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LEASE_NAMESPACE_ENV = "POD_NAMESPACE"
"""Namespace of the leader-election Lease (the Deployment sets it from the downward API)."""
POD_NAME_ENV = "POD_NAME"
"""This replica's identity in the Lease (defaults to host name and process id)."""


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
    from kubesage.core.k8s.unsupported_constraints import KUBESAGE_SCHEDULER as KUBESAGE
    from kubesage.core.k8s.webhook import AdmissionWebhook, name_only_namespace_labels

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
    control = None
    if loop is not None:
        control = live_loop(
            api, sync, policy_name, workload, loop, binder=binder, scheduler_name=scheduler_name
        )
    policy = with_forecasts(_policy(policy_name, workload), control, loop)

    def health() -> tuple[bool, str]:
        if not sync.ready:
            return False, "cluster state not synced from the API server yet"
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
    # namespaceSelector needs the namespace's labels; an AdmissionReview names it only.
    namespaces = NamespaceCache(api)
    namespaces.start()
    service.stoppers.append(namespaces.stop)
    policy_source = ApiPolicySource(api)
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
        _secondary(api, sync, binder, secondary, scheduler_name, service, control)
    return service


def _secondary(
    api: Any,
    sync: Any,
    binder: Any,
    policy: Policy,
    scheduler_name: str,
    service: Service,
    control: ControlLoop | None = None,
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
        thread = threading.Thread(
            target=scheduler.run, args=(term_stop,), name="secondary-scheduler", daemon=True
        )
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
            term.pop("thread").join(10.0)
        log_event(log, logging.INFO, "stopped_leading", scheduler_name=scheduler_name)

    thread = threading.Thread(
        target=elector.run, args=(on_start, on_stop, stop), name="leader-election", daemon=True
    )
    thread.start()

    def stop_campaign() -> None:
        stop.set()
        thread.join(10.0)

    service.stoppers.append(stop_campaign)
    service.description += f"; secondary scheduler '{scheduler_name}' under a Lease"


def open_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    return sock


@user_errors
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port (0: any free port).")
    ] = DEFAULT_PORT,
    kubeconfig: Annotated[
        Path | None, typer.Option("--kubeconfig", help="kubeconfig of the cluster to serve.")
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="kubeconfig context (default: current).")
    ] = None,
    embedded: Annotated[
        bool,
        typer.Option(
            "--embedded", help="Use the embedded simulated cluster even if a kubeconfig exists."
        ),
    ] = False,
    policy: Annotated[
        str, typer.Option("--policy", help=f"Scheduling policy: {', '.join(policy_names())}.")
    ] = DEFAULT_POLICY,
    scheduler_name: Annotated[
        str | None,
        typer.Option(
            "--scheduler-name", help="Also schedule pods with this schedulerName (live cluster)."
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="TLS certificate (PEM) for HTTPS.")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="TLS private key (PEM).")
    ] = None,
    nodes: Annotated[
        int, typer.Option("--nodes", min=1, help="Nodes of the embedded simulated cluster.")
    ] = DEFAULT_SYNTHETIC_NODES,
    fill: Annotated[
        float,
        typer.Option("--fill", help="Pre-load the embedded cluster to this GPU share, in [0, 1)."),
    ] = 0.0,
    policies_dir: Annotated[
        Path | None,
        typer.Option("--policies-dir", help="SchedulingPolicy YAMLs for the embedded mode."),
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="Log level.")] = "info",
    tick_s: TickOption = DEFAULT_TICK_S,
    dry_run: DryRunOption = False,
    audit_log: AuditLogOption = None,
    max_evictions_per_tick: MaxEvictionsOption = None,
    topology: TopologyOption = None,
    prometheus: PrometheusOption = None,
    metric_map: MetricMapOption = None,
    forecast_weight: ForecastWeightOption = 0.0,
    forecast_model: ForecastModelOption = None,
    mig_config_map: MigConfigMapOption = None,
    arrivals_per_s: Annotated[
        float,
        typer.Option(
            "--arrivals-per-s",
            help="Embedded cluster: pods arriving per second for the loop to place (0: none).",
        ),
    ] = 0.0,
    pod_lifetime_s: Annotated[
        float,
        typer.Option("--pod-lifetime-s", help="Embedded cluster: mean lifetime of an arrival."),
    ] = DEFAULT_LIFETIME_S,
    max_url_bytes: MaxUrlBytesOption = http_limits.MAX_URL_BYTES,
    max_header_bytes: MaxHeaderBytesOption = http_limits.MAX_HEADER_BYTES,
    max_headers: MaxHeadersOption = http_limits.MAX_HEADERS,
    header_timeout_s: HeaderTimeoutOption = http_limits.HEADER_TIMEOUT_S,
    keep_alive_s: KeepAliveOption = http_limits.KEEP_ALIVE_S,
) -> None:
    """Serve the scheduler extender (/scheduler/*), the webhook (/mutate), /healthz, /metrics."""
    if log_level.upper() not in LOG_LEVELS:
        raise InputError(f"unknown --log-level '{log_level}'; use one of {', '.join(LOG_LEVELS)}")
    configure_logging(log_level)
    if (tls_cert is None) != (tls_key is None):
        raise InputError("--tls-cert and --tls-key must be given together")
    for path in (tls_cert, tls_key):
        if path is not None and not path.is_file():
            raise InputError(f"{path}: no such file")
    ssl_context = _tls_context(tls_cert, tls_key)
    settings, api = loop_inputs(
        policy=policy,
        tick_s=tick_s,
        dry_run=dry_run,
        audit_log=audit_log,
        max_evictions_per_tick=max_evictions_per_tick,
        topology=topology,
        prometheus=prometheus,
        metric_map=metric_map,
        forecast_weight=forecast_weight,
        forecast_model=forecast_model,
        mig_config_map=mig_config_map,
        embedded=embedded,
        kubeconfig=kubeconfig,
        context=context,
    )
    if api is None and scheduler_name:
        raise InputError("--scheduler-name needs a live cluster (a kubeconfig)")
    if api is not None and arrivals_per_s:
        raise InputError("--arrivals-per-s is for the embedded cluster (--embedded)")
    if api is None:
        service = embedded_service(
            policy,
            nodes=nodes,
            fill=fill,
            policies_dir=policies_dir,
            loop=settings,
            arrivals_per_s=arrivals_per_s,
            pod_lifetime_s=pod_lifetime_s,
        )
    else:
        service = live_service(api, policy, scheduler_name=scheduler_name, loop=settings)
    sock = open_socket(host, port)
    actual_port = sock.getsockname()[1]
    app = service.app()
    # What exists now lives as long as the process: the cyclic GC never scans it again,
    # and its pauses stay short as the cluster's pods grow (kubesage.core.gc_pauses).
    gc_pauses.settle()
    # glibc keeps freed numpy arrays' pages for good (see kubesage.core.heap): hand them back.
    service.stoppers.append(start_trimming())
    limits = HttpLimits(
        max_url_bytes, max_header_bytes, max_headers, header_timeout_s, keep_alive_s
    )
    server = HttpServer(app, ssl_context=ssl_context, limits=limits)
    log_event(
        log,
        logging.INFO,
        "serving",
        host=host,
        port=actual_port,
        scheme="https" if tls_cert else "http",
        serves=service.description,
    )
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(_serve_until_signalled(server, sock))
    finally:
        service.stop()
        sock.close()
        log_event(log, logging.INFO, "stopped", port=actual_port)


def _tls_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """The server's TLS context, or None for plain HTTP."""
    if cert is None or key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(cert), str(key))
    except (ssl.SSLError, OSError) as exc:
        raise InputError(f"cannot load --tls-cert {cert} / --tls-key {key}: {exc}") from exc
    return context


async def _serve_until_signalled(server: HttpServer, sock: socket.socket) -> None:
    """Serve until SIGTERM or SIGINT, then finish the requests in flight."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, server.stop)
    await server.serve(sock)
