"""``kubesage loop``: the control loop's wiring, and one tick of it from the command line.

:func:`embedded_loop` and :func:`live_loop` build the :class:`ControlLoop` that
``kubesage serve`` runs in a background thread: the cluster collector of the mode
(:mod:`~kubesage.core.cli.loop_sources`), the actuators of the mode
(:mod:`kubesage.core.k8s.actuators`), and the reconcilers of the installed adapters
(entry points) plus the core's. ``kubesage loop --once`` runs one tick and prints what
it did or would do (``--dry-run``), and why.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kubesage.core.adapter import LoopParts, adapter_parts, load_adapters
from kubesage.core.cli.errors import refuse_unused_options, stderr, user_errors
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
    loop_settings,
)
from kubesage.core.cli.options import MetricMapOption, OutputFormat
from kubesage.core.cli.tables import print_table
from kubesage.core.errors import DependencyError, InputError
from kubesage.core.loop.audit import AuditLog
from kubesage.core.loop.clock import Clock, WallClock
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.forecasts import DEFAULT_HISTORY, ForecastPanel
from kubesage.core.loop.reconciler import Actuator, Outcome, Reconciler
from kubesage.core.loop.report import TickReport
from kubesage.core.loop.settings import (
    DEFAULT_TICK_S,
    LoopSettings,
    ReconcilerContext,
)
from kubesage.core.loop.world import WorldModel
from kubesage.core.observability.logging import configure_logging
from kubesage.core.perception import Collector
from kubesage.core.policy.base import Policy, PolicyContext
from kubesage.core.policy.registry import make_policy, policy_names
from kubesage.core.sim.settings import DEFAULT_SYNTHETIC_NODES, DEFAULT_SYNTHETIC_PODS
from kubesage.core.traces.synthetic import synthetic_workload
from kubesage.core.types import PodRequest

if TYPE_CHECKING:  # the Kubernetes modules import the kubernetes client: seconds, so late
    from kubesage.core.k8s.embedded import EmbeddedCluster
    from kubesage.core.k8s.scheduling_policy import NamespaceLabels

log = logging.getLogger("kubesage.loop")

SYNC_TIMEOUT_S = 30.0
"""How long ``kubesage loop --once`` waits for the first list of a live cluster."""


def loop_inputs(
    *,
    policy: str,
    embedded: bool,
    kubeconfig: Path | None,
    context: str | None,
    **options: Any,
) -> tuple[LoopSettings, Any]:
    """What ``kubesage serve`` and ``kubesage loop`` both check and build from their
    options: the policy name, the loop's settings (``options``: the keyword arguments
    of :func:`~kubesage.core.cli.loop_options.loop_settings`), and the API client
    (None: no cluster configured, or ``--embedded``)."""
    if policy not in policy_names():
        raise InputError(f"unknown policy '{policy}'; known: {', '.join(policy_names())}")
    settings = loop_settings(**options)
    if embedded:
        return settings, None
    from kubesage.core.k8s.apiclient import load_api_client

    return settings, load_api_client(str(kubeconfig) if kubeconfig else None, context)


def loop_claims(control: ControlLoop) -> Callable[[Sequence[Mapping[str, Any]]], bool]:
    """What the secondary scheduler asks before placing a gang: does the loop place
    these v1 Pods itself (:meth:`ControlLoop.claims`)? Never a gang with a pod the loop
    gives no node (a claimed volume, a constraint kubesage does not check): claimed, it
    would be placed by nobody."""

    from kubesage.core.cli.loop_sources import pod_info
    from kubesage.core.k8s.unsupported_constraints import (
        claimed_volumes,
        unsupported_constraints,
    )

    def claims(pods: Sequence[Mapping[str, Any]]) -> bool:
        if any(claimed_volumes(pod) or unsupported_constraints(pod) for pod in pods):
            return False  # the secondary scheduler keeps it (its own rules apply)
        infos = [pod_info(pod) for pod in pods]
        known = [info for info in infos if info is not None]
        return len(known) == len(infos) and control.claims(known)

    return claims


def with_forecasts(
    policy: Policy, control: ControlLoop | None, settings: LoopSettings | None
) -> Policy:
    """``policy`` with the forecast term over the loop's panel (the extender's and the
    secondary scheduler's policy) when the loop runs with ``--forecast-weight`` > 0."""
    weight = 0.0 if settings is None else settings.forecast_weight
    if control is None or weight == 0.0:
        return policy
    from kubesage.core.loop.placement import forecast_policy

    return forecast_policy(policy, lambda: control.world.forecasts, weight)


def core_reconcilers(context: ReconcilerContext) -> list[Reconciler]:
    """The core's own reconcilers: ``forecast-placement``."""
    from kubesage.core.loop.placement import ForecastPlacement

    return [ForecastPlacement.from_context(context)]


def loop_parts(context: ReconcilerContext) -> LoopParts:
    """The installed adapters' reconcilers, collectors and actuators, then the core's
    reconcilers; adapter failures are logged and skipped."""
    adapters, warnings = load_adapters()
    parts = adapter_parts(adapters, context)
    for warning in (*warnings, *parts.warnings):
        log.warning("%s", warning)
    parts.reconcilers.extend(core_reconcilers(context))
    return parts


def forecast_panel(settings: LoopSettings) -> ForecastPanel:
    """The loop's forecast panel: the last value, or the model of ``--forecast-model``
    (asked every tick at its own horizon, with at least the history it reads)."""
    if settings.forecast_model is None:
        return ForecastPanel()
    from kubesage.core.forecast.loop_adapter import load_loop_forecaster

    model = load_loop_forecaster(settings.forecast_model, settings.tick_s)
    panel = ForecastPanel(
        horizon_steps=model.horizon_steps, history=max(DEFAULT_HISTORY, model.history_steps)
    )
    panel.use(model)
    log.info(
        "forecaster %s from %s: %d node(s) × %d metric(s), %d steps ahead (%g s)",
        model.name,
        settings.forecast_model,
        len(model.entities),
        len(model.metrics),
        model.horizon_steps,
        model.horizon_steps * model.step_s,
    )
    return panel


def build_loop(
    cluster: Collector[Any],
    actuators: Sequence[Actuator],
    context: ReconcilerContext,
    *,
    clock: Clock | None = None,
    reconcilers: Sequence[Reconciler] | None = None,
    collectors: Sequence[Collector[Any]] = (),
) -> ControlLoop:
    """A loop over the cluster collector, ``collectors`` (telemetry), the adapters'
    collectors and actuators, on the wall clock unless told otherwise. ``reconcilers``
    replaces the installed ones (tests)."""
    settings = context.settings
    parts = loop_parts(context) if reconcilers is None else LoopParts(list(reconcilers))
    sources = {c.name: c for c in (cluster, *collectors, *parts.collectors)}
    return ControlLoop(
        clock or WallClock(),
        sources,
        WorldModel(topology=context.topology, forecasts=forecast_panel(settings)),
        parts.reconcilers,
        [*actuators, *parts.actuators],
        budgets=settings.budgets,
        dry_run=settings.dry_run,
        audit=AuditLog(settings.audit_log),
        max_data_age_s=settings.max_data_age_s,
        tick_s=settings.tick_s,
    )


def embedded_loop(
    cluster: EmbeddedCluster, policy_name: str, settings: LoopSettings
) -> ControlLoop:
    """The loop on the embedded cluster: binds and evictions in memory."""
    from kubesage.core.cli.loop_sources import (
        EmbeddedClusterCollector,
        loop_topology,
        telemetry_collectors,
    )
    from kubesage.core.k8s.actuators import embedded_actuators

    workload = tuple(cluster.workload)
    # Its own policy instance: policy caches are not shared across threads.
    policy = make_policy(policy_name, PolicyContext(seed=0, workload=workload))
    context = ReconcilerContext(
        settings=settings,
        topology=loop_topology(settings),
        policy=policy_name,
        workload=workload,
        evicted_pods_come_back=True,  # evict() keeps the pod pending, as it was
    )
    return build_loop(
        EmbeddedClusterCollector(cluster),
        embedded_actuators(cluster, policy),
        context,
        collectors=telemetry_collectors(settings),
    )


def live_loop(
    api: Any,
    sync: Any,
    policy_name: str,
    workload: Sequence[PodRequest],
    settings: LoopSettings,
    *,
    binder: Any = None,
    scheduler_name: str | None = None,
    clock: Clock | None = None,
    reconcilers: Sequence[Reconciler] | None = None,
    collectors: Sequence[Collector[Any]] = (),
    namespace_labels: NamespaceLabels | None = None,
) -> ControlLoop:
    """The loop on a live cluster: ClusterSync (and Prometheus, and ``collectors``) in,
    the API server's subresources out; ``namespace_labels`` (the namespaces' labels) for
    the placed pods' anti-affinity terms that select namespaces by label."""
    from kubesage.core.cli.loop_sources import (
        LiveClusterCollector,
        loop_topology,
        telemetry_collectors,
    )
    from kubesage.core.k8s.actuators import live_actuators
    from kubesage.core.k8s.mig_config_map import MigConfigMap

    context = ReconcilerContext(
        settings=settings,
        topology=loop_topology(settings),
        policy=policy_name,
        workload=tuple(workload),
        relayouts=settings.mig_config_map is not None,
    )
    collector = LiveClusterCollector(
        sync, [scheduler_name] if scheduler_name else [], namespace_labels
    )
    # Its own policy instance: policy caches are not shared across threads.
    policy = make_policy(policy_name, PolicyContext(seed=0, workload=tuple(workload)))
    return build_loop(
        collector,
        live_actuators(
            api,
            sync,
            policy,
            binder=binder,
            namespace_labels=namespace_labels,
            mig_config_map=(
                MigConfigMap.parse(settings.mig_config_map) if settings.mig_config_map else None
            ),
        ),
        context,
        clock=clock,
        reconcilers=reconcilers,
        collectors=[*telemetry_collectors(settings), *collectors],
    )


@user_errors
def loop(
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Run one tick, print it and exit (1 if a collector, reconciler or action failed).",
        ),
    ] = False,
    dry_run: DryRunOption = False,
    kubeconfig: Annotated[
        Path | None, typer.Option("--kubeconfig", help="kubeconfig of the cluster.")
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="kubeconfig context (default: current).")
    ] = None,
    embedded: Annotated[
        bool, typer.Option("--embedded", help="Use the embedded simulated cluster.")
    ] = False,
    nodes: Annotated[
        int | None,
        typer.Option(
            "--nodes",
            min=1,
            help=f"Nodes of the embedded cluster (default {DEFAULT_SYNTHETIC_NODES}).",
        ),
    ] = None,
    fill: Annotated[
        float | None,
        typer.Option(
            "--fill", help="Pre-load the embedded cluster to this GPU share, in [0, 1) (default 0)."
        ),
    ] = None,
    policy: Annotated[str, typer.Option("--policy", help="Scheduling policy.")] = "fgd",
    tick_s: TickOption = DEFAULT_TICK_S,
    audit_log: AuditLogOption = None,
    max_evictions_per_tick: MaxEvictionsOption = None,
    topology: TopologyOption = None,
    prometheus: PrometheusOption = None,
    metric_map: MetricMapOption = None,
    forecast_weight: ForecastWeightOption = 0.0,
    forecast_model: ForecastModelOption = None,
    mig_config_map: MigConfigMapOption = None,
    output: Annotated[
        OutputFormat, typer.Option("--format", help="table, or json (one object).")
    ] = OutputFormat.table,
) -> None:
    """Run the control loop: one tick with --once (printed), else every --tick-s until Ctrl-C."""
    if not once:
        # A running loop logs its actions as JSON lines; one tick prints its report
        # instead (and leaves the process's logging alone).
        configure_logging("info")
    if fill is not None and not 0.0 <= fill < 1.0:
        raise InputError(f"--fill must be in [0, 1), got {fill}")
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
    if api is not None:
        refuse_unused_options(
            {"--nodes": nodes is not None, "--fill": fill is not None},
            "to the embedded cluster (--embedded)",
            "this runs on the live cluster of the kubeconfig",
        )
    from kubesage.core.k8s.embedded import EmbeddedCluster

    stoppers: list[Callable[[], None]] = []
    try:
        if api is None:
            cluster = EmbeddedCluster.synthetic(DEFAULT_SYNTHETIC_NODES if nodes is None else nodes)
            if fill:
                workload = tuple(cluster.workload)
                cluster.fill(make_policy(policy, PolicyContext(seed=0, workload=workload)), fill)
            control = embedded_loop(cluster, policy, settings)
        else:
            control = _live(api, policy, settings, stoppers)
        stoppers.append(control.close)
        if once:
            report = control.tick()
            _print(report, output)
            if failures := tick_failures(report):
                # printed in full above; the exit status tells a script (a CronJob) too
                stderr.print(Text(f"the tick did not go cleanly: {'; '.join(failures)}"))
                raise typer.Exit(code=1)
            return
        stop = threading.Event()
        try:
            control.run(stop)
        except KeyboardInterrupt:
            stop.set()
    finally:
        for stopper in reversed(stoppers):
            stopper()


def _live(
    api: Any, policy: str, settings: LoopSettings, stoppers: list[Callable[[], None]]
) -> ControlLoop:
    from kubesage.core.k8s.informer import ClusterSync

    sync = ClusterSync(api)
    sync.start()
    stoppers.append(sync.stop)
    if not sync.wait_until_ready(SYNC_TIMEOUT_S):
        raise DependencyError(f"the cluster was not listed within {SYNC_TIMEOUT_S:g} s")
    workload = synthetic_workload(DEFAULT_SYNTHETIC_PODS, seed=0)
    return live_loop(api, sync, policy, workload, settings)


def tick_failures(report: TickReport) -> list[str]:
    """What went wrong in a tick: failed collectors, reconcilers that raised, failed
    actions (``loop --once`` exits 1 when there is any)."""
    failed = [f"collector {c.name} failed" for c in report.collectors if not c.ok]
    failed += [f"reconciler {name} raised" for name in report.reconciler_errors]
    actions = sum(  # a raising reconciler's note says "failed" too: counted above
        1 for r in report.records if r.outcome == Outcome.FAILED and r.action != "note"
    )
    if actions:
        failed.append(f"{actions} action{'' if actions == 1 else 's'} failed")
    return failed


def _print(report: TickReport, output: OutputFormat) -> None:
    if output == OutputFormat.json:
        typer.echo(json.dumps(report.to_json(), sort_keys=True))
        return
    console = Console()
    age = f"{report.data_age_s:.1f} s" if math.isfinite(report.data_age_s) else "no data"
    mode = "dry run" if report.dry_run else "live"
    console.print(
        f"tick {report.tick} ({mode}): data age {age}, forecaster {report.forecaster}, "
        f"reconcilers: {', '.join(report.reconcilers) or 'none'}",
        highlight=False,
    )
    for collector in report.collectors:
        state = "failed" if not collector.ok else "stale" if collector.stale else "fresh"
        detail = f": {collector.detail}" if collector.detail else ""
        console.print(
            f"  collector {collector.name}: {state}{detail}", highlight=False, markup=False
        )
    for name, error in report.reconciler_errors.items():
        console.print(f"  reconciler {name} raised {error}", highlight=False, markup=False)
    table = Table("reconciler", "action", "target", "outcome", "why", "detail")
    for record in report.records:
        table.add_row(
            record.reconciler,
            record.action,
            record.target,
            record.outcome,
            record.explanation,
            record.detail,
        )
    if report.records:
        print_table(console, table)
    else:
        console.print("  nothing to do", highlight=False)
