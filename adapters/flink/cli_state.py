"""``kubesage flink state``: a hot/cold state setup per job, and carrying it out."""

from __future__ import annotations

from typing import Annotated

import typer

from kubesage.adapters.flink.cli_support import (
    DryRun,
    FlinkHome,
    JobManager,
    Jobs,
    RegistryPath,
    connect,
    running_job_ids,
)
from kubesage.adapters.flink.errors import FlinkNotFound
from kubesage.adapters.flink.registry import JobRegistry
from kubesage.adapters.flink.state_apply import (
    DEFAULT_RUNNING_TIMEOUT_S,
    StateApplier,
    plan_apply,
)
from kubesage.adapters.flink.state_tiering import observe_state, recommend
from kubesage.adapters.flink.submit import resolve_flink_home
from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.errors import InputError


@user_errors
def state_command(
    jobmanager: JobManager,
    job: Jobs = None,
    remote_dir: Annotated[
        str | None, typer.Option("--remote-dir", help="Remote DFS dir for ForSt primary state.")
    ] = None,
    local_dir: Annotated[
        str | None, typer.Option("--local-dir", help="Local disk dir for state or its cache.")
    ] = None,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply", help="Carry it out: savepoint, restart with it, roll back on failure."
        ),
    ] = False,
    dry_run: DryRun = False,
    savepoint_dir: Annotated[
        str | None,
        typer.Option("--savepoint-dir", help="Savepoint target (default: Flink's savepoint dir)."),
    ] = None,
    timeout_s: Annotated[
        float, typer.Option("--timeout-s", min=1.0, help="Wait this long for RUNNING.")
    ] = DEFAULT_RUNNING_TIMEOUT_S,
    flink_home: FlinkHome = None,
    registry: RegistryPath = None,
) -> None:
    """Recommend a hot/cold state setup (backend, cache, TTL) per job, as config.yaml lines;
    with --apply, restart the job with it from a savepoint (rollback if it does not run)."""
    if (apply or dry_run) and not job:
        raise InputError("--apply restarts jobs (--dry-run shows how): name each with --job")
    jobs_registry = JobRegistry(registry)
    rolled_back = False
    with connect(jobmanager) as client:
        for job_id in job or running_job_ids(client):
            try:
                observation = observe_state(client, job_id)
            except FlinkNotFound as exc:
                if job:  # a job the user named: say so
                    raise
                # e.g. a batch job without checkpointing: nothing to tier
                stderr.print(f"job {job_id}: no checkpoint statistics ({exc}); skipped")
                continue
            if not observation.samples:
                stderr.print(f"job {job_id}: no completed checkpoint yet; skipped")
                continue
            advice = recommend(observation, remote_dir=remote_dir, local_dir=local_dir)
            typer.echo(advice.snippet())
            if not (apply or dry_run):
                continue
            plan = plan_apply(job_id, advice.config, jobs_registry, savepoint_dir=savepoint_dir)
            for note in plan.notes:
                typer.echo(f"  note: {note}")
            if not plan.settings:
                typer.echo(f"job {job_id}: already runs with these settings; nothing to apply")
            elif dry_run:
                typer.echo("\n".join(f"  would {step}" for step in plan.steps()))
            else:
                applier = StateApplier(
                    client,
                    jobs_registry,
                    resolve_flink_home(flink_home),
                    running_timeout_s=timeout_s,
                    on_step=lambda step: typer.echo(f"  {step}"),
                )
                outcome = applier.apply(plan)
                rolled_back |= not outcome.applied
                typer.echo(outcome.describe())
                for note in outcome.notes:
                    typer.echo(f"  note: {note}")
    if rolled_back:
        raise typer.Exit(code=1)
