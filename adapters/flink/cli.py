"""``kubesage flink …``: submit (parallelism, checkpoint phase), autoscale, stagger checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from kubesage.adapters.flink.autoscale_loop import run_autoscaler
from kubesage.adapters.flink.autoscaler import AutoscalerSettings, ScalingDecision
from kubesage.adapters.flink.checkpoint_coordinator import (
    CheckpointRecord,
)
from kubesage.adapters.flink.checkpoint_history import (
    history_peak_concurrent,
)
from kubesage.adapters.flink.cli_state import state_command
from kubesage.adapters.flink.cli_support import (
    DryRun,
    DurationS,
    FlinkHome,
    JobManager,
    Jobs,
    RegistryPath,
    connect,
    positive_ms,
    running_job_ids,
    say,
    stop_after,
)
from kubesage.adapters.flink.demand_forecast import DemandForecast
from kubesage.adapters.flink.errors import (
    FlinkError,
)
from kubesage.adapters.flink.loop_rescale import DEFAULT_RESCALE_TIMEOUT_S
from kubesage.adapters.flink.operator_patch import FlinkDeploymentRef, connect_deployment
from kubesage.adapters.flink.registry import JobRegistry
from kubesage.adapters.flink.stagger import (
    DEFAULT_RESOLUTION_MS,
    CheckpointProfile,
    StaggerPlan,
    aligned_plan,
    plan_stagger,
)
from kubesage.adapters.flink.stagger_rounds import run_stagger_rounds
from kubesage.adapters.flink.submit import SubmitRequest, submit
from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.cli.passthrough import PassThroughCommand
from kubesage.core.dra.claims import DeviceMode
from kubesage.core.errors import InputError
from kubesage.core.loop.reconciler import Actuator, Reconciler
from kubesage.core.loop.settings import ReconcilerContext
from kubesage.core.perception import Collector

flink_app = typer.Typer(
    help="Flink: submit with chosen parallelism and checkpoint phase, autoscale, stagger.",
    no_args_is_help=True,
)


@flink_app.command("submit", cls=PassThroughCommand)
@user_errors
def submit_command(
    ctx: typer.Context,
    jobmanager: JobManager = "http://127.0.0.1:8081",
    name: Annotated[
        str | None, typer.Option("--name", help="Job identity across runs (history).")
    ] = None,
    parallelism: Annotated[
        int | None, typer.Option("--parallelism", min=1, help="Initial parallelism.")
    ] = None,
    forecast_rate: Annotated[
        float | None, typer.Option("--forecast-rate", help="Expected input, records/s.")
    ] = None,
    subtask_rate: Annotated[
        float | None,
        typer.Option("--subtask-rate", help="Records/s one subtask of the bottleneck handles."),
    ] = None,
    checkpoint_interval_s: Annotated[
        float | None, typer.Option("--checkpoint-interval-s", help="Checkpoint interval.")
    ] = None,
    drive: Annotated[
        bool,
        typer.Option(
            "--drive/--no-drive",
            help="Let `kubesage flink stagger` trigger its checkpoints (exact phase), "
            "or let Flink (phase within a window).",
        ),
    ] = True,
    flink_home: FlinkHome = None,
    registry: RegistryPath = None,
    taskmanager_gpus: Annotated[
        int, typer.Option("--taskmanager-gpus", min=0, help="GPUs per TaskManager.")
    ] = 0,
    devices: Annotated[
        DeviceMode,
        typer.Option(
            "--devices",
            help="How TaskManagers ask for GPUs: device-plugin (nvidia.com/gpu) or dra "
            "(a claim in the TaskManager pod template).",
        ),
    ] = DeviceMode.device_plugin,
    out: Annotated[
        Path,
        typer.Option("--out", help="Folder for the TaskManager pod and claim templates (DRA)."),
    ] = Path("kubesage-flink"),
) -> None:
    """Run `flink run -d` (arguments after `--`) with a chosen parallelism and checkpoint phase."""
    request = SubmitRequest(
        flink_args=tuple(ctx.args),
        jobmanager=jobmanager,
        name=name,
        parallelism=parallelism,
        forecast_rate=forecast_rate,
        subtask_rate=subtask_rate,
        checkpoint_interval_ms=positive_ms(checkpoint_interval_s, "--checkpoint-interval-s"),
        driven=drive,
        flink_home=flink_home,
        taskmanager_gpus=taskmanager_gpus,
        devices=devices,
        template_dir=out,
    )
    outcome = submit(request, JobRegistry(registry))
    for reason in outcome.reasons:
        stderr.print(reason, highlight=False)
    typer.echo(outcome.job_id)


def print_decision(decision: ScalingDecision, outcome: object | None) -> None:
    """The decision, its reasons per vertex, and what the rescale did (if one ran)."""
    typer.echo(f"[{decision.job_id}] {decision.describe()}")
    if outcome is not None:
        describe = getattr(outcome, "describe", None)
        typer.echo(f"  outcome: {describe() if callable(describe) else outcome}")


FORECAST_HELP = "Scale ahead of load: none (reactive), trend, or seasonal (with --season-s)."
FLINK_DEPLOYMENT_HELP = "NAMESPACE/NAME: rescale by patching this FlinkDeployment, not over REST."


@flink_app.command("autoscale")
@user_errors
def autoscale_command(
    jobmanager: JobManager,
    dry_run: DryRun = False,
    job: Annotated[
        str | None,
        typer.Option(
            "--job", help="The job to scale (default: the only running job; waits while several)."
        ),
    ] = None,
    duration_s: DurationS = None,
    target_utilisation: Annotated[
        float,
        typer.Option(
            "--target-utilisation",
            min=0.05,
            max=1.0,
            help="Share of its capacity a vertex runs at.",
        ),
    ] = AutoscalerSettings.target_utilisation,
    scale_down_delay_s: Annotated[
        float,
        typer.Option(
            "--scale-down-delay-s", min=0.0, help="How long a scale-down must be proposed first."
        ),
    ] = AutoscalerSettings.scale_down_delay_s,
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", help="A vertex name or id never rescaled (repeatable)."),
    ] = None,
    interval_s: Annotated[
        float, typer.Option("--interval-s", min=1.0, help="Seconds between decisions.")
    ] = 5.0,
    forecast: Annotated[str, typer.Option("--forecast", help=FORECAST_HELP)] = "none",
    forecast_horizon_s: Annotated[
        float, typer.Option("--forecast-horizon-s", help="How far ahead the forecast looks.")
    ] = 30.0,
    season_s: Annotated[
        float | None, typer.Option("--season-s", help="The seasonal period (86400: a day).")
    ] = None,
    flink_deployment: Annotated[
        str | None, typer.Option("--flink-deployment", help=FLINK_DEPLOYMENT_HELP)
    ] = None,
    kubeconfig: Annotated[
        Path | None, typer.Option("--kubeconfig", help="kubeconfig for --flink-deployment.")
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="kubeconfig context (default: current).")
    ] = None,
    allow_stateless_upgrade: Annotated[
        bool,
        typer.Option(
            "--allow-stateless-upgrade",
            help="Rescale a FlinkDeployment even when the operator would restart its job "
            "from empty state (upgradeMode stateless, no adaptive scheduler).",
        ),
    ] = False,
    rescale_timeout_s: Annotated[
        float, typer.Option("--rescale-timeout-s", min=1.0, help="Wait this long for a rescale.")
    ] = DEFAULT_RESCALE_TIMEOUT_S,
) -> None:
    """Run the backpressure-driven autoscaler, printing each decision with its reasons."""
    deployment = None if flink_deployment is None else FlinkDeploymentRef.parse(flink_deployment)
    if deployment is None and (kubeconfig or context or allow_stateless_upgrade):
        raise InputError(
            "--kubeconfig, --context and --allow-stateless-upgrade go with --flink-deployment"
        )
    ahead = DemandForecast(forecast, horizon_s=forecast_horizon_s, season_s=season_s)
    settings = AutoscalerSettings(
        target_utilisation=target_utilisation,
        utilisation_boundary=min(AutoscalerSettings.utilisation_boundary, target_utilisation / 2),
        scale_down_delay_s=scale_down_delay_s,
        exclude=frozenset(exclude or ()),
    )
    kube = None  # a dry run makes no Kubernetes call
    if deployment is not None and not dry_run:
        kube = connect_deployment(
            deployment,
            str(kubeconfig) if kubeconfig else None,
            context,
            allow_stateless=allow_stateless_upgrade,
        )
    with connect(jobmanager) as client, stop_after(duration_s) as stop:
        stats = run_autoscaler(
            client,
            job,
            dry_run=dry_run,
            on_decision=print_decision,
            stop=stop,
            settings=settings,
            interval_s=interval_s,
            forecast=ahead,
            rescale_timeout_s=rescale_timeout_s,
            flink_deployment=deployment,
            custom_objects=kube,
        )
    typer.echo(stats.describe(patching=deployment is not None))


@flink_app.command("stagger")
@user_errors
def stagger_command(
    jobmanager: JobManager,
    dry_run: DryRun = False,
    job: Jobs = None,
    interval_s: Annotated[
        float | None,
        typer.Option("--interval-s", help="Interval for jobs with none registered."),
    ] = None,
    resolution_ms: Annotated[
        int, typer.Option("--resolution-ms", min=1, help="Planning grid.")
    ] = DEFAULT_RESOLUTION_MS,
    probe_rounds: Annotated[
        int,
        typer.Option("--probe-rounds", min=0, help="Probe checkpoints per job with no history."),
    ] = 2,
    duration_s: DurationS = None,
    registry: RegistryPath = None,
) -> None:
    """Plan checkpoint phases across jobs and trigger checkpoints on that plan; without
    --job, plan again whenever the running jobs change."""
    jobs_registry = JobRegistry(registry)
    fallback_interval_ms = positive_ms(interval_s, "--interval-s")
    with connect(jobmanager) as client, stop_after(None) as stop:  # Ctrl-C
        rounds = run_stagger_rounds(
            client,
            jobs_registry,
            named=job or [],
            running=lambda: running_job_ids(client),
            stop=stop,
            plan_jobs=lambda profiles: plan_stagger(profiles, resolution_ms=resolution_ms),
            interval_ms=fallback_interval_ms,
            probe_rounds=0 if dry_run else probe_rounds,
            say=say,
            on_plan=print_plan,
            on_record=print_record,
            drive=not dry_run,
            duration_s=duration_s,
        )
        if not rounds.plans:
            raise InputError(
                "no job to stagger: none running without periodic checkpoints and with a "
                "known interval (submit with `kubesage flink submit --checkpoint-interval-s`, "
                "or pass --interval-s)"
            )
        if dry_run:
            return
        peaks = "/".join(str(plan.peak_concurrent) for plan in rounds.plans)
        typer.echo(
            f"measured peak concurrent checkpoints: {rounds.peak_concurrent()} "
            f"(plan {peaks}); completed {rounds.count('completed')}, "
            f"failed {rounds.count('failed')}, skipped {rounds.count('skipped')}, "
            f"Flink errors {rounds.flink_errors}"
            + (
                f"; {len(rounds.plans)} plans (the running jobs changed)"
                if len(rounds.plans) > 1
                else ""
            )
        )
        try:
            phases = rounds.plans[-1].phases_ms
            seen = str(history_peak_concurrent(client, phases, since_ms=rounds.started_ms))
        except FlinkError as exc:
            seen = f"unknown ({exc})"
        typer.echo(
            f"peak concurrent checkpoints of these jobs in Flink's checkpoint history: {seen}"
        )


flink_app.command("state")(state_command)  # after stagger: the help lists them in order


def print_plan(plan: StaggerPlan, profiles: list[CheckpointProfile]) -> None:
    aligned = aligned_plan(profiles, resolution_ms=plan.resolution_ms)
    typer.echo(f"{'job':34} {'interval_ms':>11} {'duration_ms':>11} {'bytes':>12} {'phase_ms':>9}")
    for profile in sorted(profiles, key=lambda p: p.job_id):
        typer.echo(
            f"{profile.job_id:34} {plan.intervals_ms[profile.job_id]:>11} "
            f"{plan.durations_ms[profile.job_id]:>11} {profile.size_bytes:>12} "
            f"{plan.phases_ms[profile.job_id]:>9}"
        )
    optimum = "unproven" if plan.optimum_concurrent is None else str(plan.optimum_concurrent)
    typer.echo(
        f"plan ({plan.method}): peak {plan.peak_concurrent} concurrent, {plan.peak_bytes} bytes; "
        f"optimum {optimum}, lower bound {plan.lower_bound_concurrent}; "
        f"all at once: {aligned.peak_concurrent} concurrent, {aligned.peak_bytes} bytes"
    )
    for note in plan.notes:
        typer.echo(f"  note: {note}")


def print_record(record: CheckpointRecord) -> None:
    timing = (
        f" {record.start_ms}–{record.end_ms} ({record.duration_ms} ms, {record.size_bytes} B)"
        if record.duration_ms is not None
        else ""
    )
    checkpoint = f" #{record.checkpoint_id}" if record.checkpoint_id is not None else ""
    detail = f": {record.detail}" if record.detail else ""
    typer.echo(f"{record.job_id} {record.outcome}{checkpoint}{timing}{detail}")


@dataclass(frozen=True)
class FlinkAdapter:
    name: str = "flink"
    cli: typer.Typer = flink_app

    def reconcilers(self, context: ReconcilerContext) -> Sequence[Reconciler]:
        """``flink-autoscaler`` when the job registry lists a run (docs/flink.md)."""
        from kubesage.adapters.flink.loop_scaling import FlinkAutoscaler

        return (FlinkAutoscaler(),) if JobRegistry().runs() else ()

    def collectors(self, context: ReconcilerContext) -> Sequence[Collector[Any]]:
        """The ``flink`` collector of the registered jobs, when the registry lists a run."""
        from kubesage.adapters.flink.loop_observe import RegisteredJobsCollector

        registry = JobRegistry()
        return (RegisteredJobsCollector(registry),) if registry.runs() else ()

    def actuators(self, context: ReconcilerContext) -> Sequence[Actuator]:
        """The in-place rescale of ``flink-rescale`` actions, when the registry lists a run."""
        from kubesage.adapters.flink.loop_rescale import FlinkRescaleActuator

        return (FlinkRescaleActuator(),) if JobRegistry().runs() else ()


ADAPTER = FlinkAdapter()
