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
import signal
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
import uvloop

from kubesage.core import gc_pauses
from kubesage.core.cli.errors import refuse_unused_options, user_errors
from kubesage.core.cli.http_options import (
    HeaderTimeoutOption,
    KeepAliveOption,
    MaxHeaderBytesOption,
    MaxHeadersOption,
    MaxUrlBytesOption,
    StallTimeoutOption,
)
from kubesage.core.cli.loop import loop_inputs
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
from kubesage.core.cli.serve_services import DEFAULT_POLICY, embedded_service, live_service
from kubesage.core.errors import InputError
from kubesage.core.heap import start_trimming
from kubesage.core.k8s import http_limits
from kubesage.core.k8s.embedded_workload import DEFAULT_LIFETIME_S
from kubesage.core.k8s.http_limits import HttpLimits
from kubesage.core.k8s.http_server import HttpServer
from kubesage.core.k8s.tls_reload import CHECK_EVERY_S, CertificateReloader
from kubesage.core.loop.settings import DEFAULT_TICK_S
from kubesage.core.observability.logging import configure_logging, log_event
from kubesage.core.periodic import every
from kubesage.core.policy.registry import policy_names
from kubesage.core.sim.settings import DEFAULT_SYNTHETIC_NODES

log = logging.getLogger("kubesage.serve")

DEFAULT_PORT = 8443
"""The port the Deployment exposes (HTTPS when --tls-cert/--tls-key are given)."""
SHUTDOWN_DELAY_S = 5.0
"""How long ``serve`` keeps serving after SIGTERM (``--shutdown-delay-s``)."""
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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
        int | None,
        typer.Option(
            "--nodes",
            min=1,
            help=f"Nodes of the embedded simulated cluster (default {DEFAULT_SYNTHETIC_NODES}).",
        ),
    ] = None,
    fill: Annotated[
        float | None,
        typer.Option(
            "--fill", help="Pre-load the embedded cluster to this GPU share, in [0, 1) (default 0)."
        ),
    ] = None,
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
        float | None,
        typer.Option(
            "--arrivals-per-s",
            help="Embedded cluster: pods arriving per second for the loop to place "
            "(default 0: none).",
        ),
    ] = None,
    pod_lifetime_s: Annotated[
        float | None,
        typer.Option(
            "--pod-lifetime-s",
            help="Embedded cluster: mean lifetime of an arrival "
            f"(default {DEFAULT_LIFETIME_S:g} s).",
        ),
    ] = None,
    max_url_bytes: MaxUrlBytesOption = http_limits.MAX_URL_BYTES,
    max_header_bytes: MaxHeaderBytesOption = http_limits.MAX_HEADER_BYTES,
    max_headers: MaxHeadersOption = http_limits.MAX_HEADERS,
    header_timeout_s: HeaderTimeoutOption = http_limits.HEADER_TIMEOUT_S,
    keep_alive_s: KeepAliveOption = http_limits.KEEP_ALIVE_S,
    stall_timeout_s: StallTimeoutOption = http_limits.STALL_TIMEOUT_S,
    shutdown_delay_s: Annotated[
        float,
        typer.Option(
            "--shutdown-delay-s",
            min=0.0,
            max=60.0,
            help="After SIGTERM, keep serving this long before closing the port, while "
            "Kubernetes takes the pod out of its Service (0: close at once).",
        ),
    ] = SHUTDOWN_DELAY_S,
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
    if api is not None:
        refuse_unused_options(
            {
                "--nodes": nodes is not None,
                "--fill": fill is not None,
                "--policies-dir": policies_dir is not None,
                "--arrivals-per-s": arrivals_per_s is not None,
                "--pod-lifetime-s": pod_lifetime_s is not None,
            },
            "to the embedded cluster (--embedded)",
            "this serves the live cluster of the kubeconfig, whose nodes, pods and "
            "SchedulingPolicy objects come from its API server",
        )
    if api is None:
        service = embedded_service(
            policy,
            nodes=DEFAULT_SYNTHETIC_NODES if nodes is None else nodes,
            fill=fill or 0.0,
            policies_dir=policies_dir,
            loop=settings,
            arrivals_per_s=arrivals_per_s or 0.0,
            pod_lifetime_s=DEFAULT_LIFETIME_S if pod_lifetime_s is None else pod_lifetime_s,
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
    if ssl_context is not None and tls_cert is not None and tls_key is not None:
        # cert-manager renews the certificate in the mounted Secret: serve the new one.
        reloader = CertificateReloader(ssl_context, tls_cert, tls_key)
        service.stoppers.append(every(CHECK_EVERY_S, reloader.check, name="tls-reload"))
    limits = HttpLimits(
        max_url_bytes,
        max_header_bytes,
        max_headers,
        header_timeout_s,
        keep_alive_s,
        stall_timeout_s,
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
            runner.run(
                _serve_until_signalled(server, sock, shutdown_delay_s, service.stepping_down)
            )
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


async def _serve_until_signalled(
    server: HttpServer,
    sock: socket.socket,
    shutdown_delay_s: float,
    on_terminate: Callable[[], None],
) -> None:
    """Serve until SIGINT, or ``shutdown_delay_s`` after SIGTERM (a second signal stops
    at once), then finish the requests in flight. Kubernetes takes a terminating pod out
    of its Service's endpoints while it sends SIGTERM, not before: kube-scheduler and the
    API server keep calling for a few seconds, and a closed port would have those calls
    skip the extender and the webhook. ``on_terminate`` runs at SIGTERM (the leader starts
    stepping down meanwhile)."""
    loop = asyncio.get_running_loop()

    def terminate() -> None:
        on_terminate()
        if shutdown_delay_s <= 0:
            server.stop()
            return
        log_event(log, logging.INFO, "draining", seconds=shutdown_delay_s)
        loop.add_signal_handler(signal.SIGTERM, server.stop)
        loop.call_later(shutdown_delay_s, server.stop)

    loop.add_signal_handler(signal.SIGTERM, terminate)
    loop.add_signal_handler(signal.SIGINT, server.stop)
    await server.serve(sock)
