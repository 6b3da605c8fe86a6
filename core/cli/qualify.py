"""``kubesage qualify``: should this cluster run the learned policy? Replay and judge.

Replays the cluster's own workload in arrival orders of its own through a candidate
policy and a baseline (:mod:`kubesage.core.sim.qualification`) and says which one to
run with ``kubesage serve --policy``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.cli.options import Format, Jobs, NodesCsv, OutputFormat, PodsCsv
from kubesage.core.cli.progress import runs_progress
from kubesage.core.cli.simulate import load_inputs, simulation_settings
from kubesage.core.cli.tables import print_table
from kubesage.core.errors import InputError, UnknownPolicyError
from kubesage.core.policy.registry import policy_names
from kubesage.core.sim.qualification import DEFAULT_RUNS, DEFAULT_Z, Qualification, qualify
from kubesage.core.sim.runner import default_jobs


@user_errors
def qualify_command(
    nodes: NodesCsv = None,
    pods: PodsCsv = None,
    candidate: Annotated[str, typer.Option("--candidate", help="The policy to qualify.")] = "ppo",
    baseline: Annotated[str, typer.Option("--baseline", help="The policy it must beat.")] = "fgd",
    runs: Annotated[
        int, typer.Option("--runs", min=2, help="Arrival orders replayed per policy.")
    ] = DEFAULT_RUNS,
    z: Annotated[
        float,
        typer.Option("--z", min=0.0, help="Standard errors the mean gain must clear."),
    ] = DEFAULT_Z,
    model: Annotated[
        Path | None,
        typer.Option("--model", help="Model file for a learned candidate (default: shipped)."),
    ] = None,
    jobs: Jobs = None,
    output_format: Format = OutputFormat.table,
) -> None:
    """Replay the workload through the candidate and the baseline; say which to serve.

    With no --nodes/--pods: the embedded synthetic openb-like cluster and workload.
    The candidate qualifies when its mean gain in GPU allocation at 130 % arrived is
    ahead by more than --z standard errors of the gains, order by order
    (docs/ppo.md#qualifying-it-for-a-cluster).
    """
    known = policy_names()
    for name in (candidate, baseline):
        if name not in known:
            raise UnknownPolicyError(name, known)
    if candidate == baseline:
        raise InputError(f"--candidate and --baseline are both '{candidate}'")
    if model is not None and "ppo" not in (candidate, baseline):
        raise InputError(
            f"--model is the ppo policy's model file; neither {candidate} nor {baseline} reads it"
        )
    if not math.isfinite(z):  # before the runs, not after them
        raise InputError(f"--z must be a finite number >= 0, got {z}")
    settings, base = simulation_settings(None, nodes=nodes, pods=pods, jobs=jobs, model=model)
    node_specs, pod_specs, described = load_inputs(settings, base)
    workers = min(settings.jobs or default_jobs(), 2 * runs)
    stderr.print(
        f"Qualifying {candidate} against {baseline}: {runs} arrival orders each on "
        f"{described}; {workers} worker(s)."
    )
    with runs_progress() as progress:
        task = progress.add_task("runs", total=2 * runs)
        verdict = qualify(
            node_specs,
            pod_specs,
            candidate=candidate,
            baseline=baseline,
            runs=runs,
            z=z,
            model=settings.model,
            jobs=workers,
            on_result=lambda _: progress.advance(task),
        )
    if output_format is OutputFormat.json:
        typer.echo(json.dumps(verdict.as_dict(), separators=(",", ":")))
        return
    _print(verdict, Console())


def _print(verdict: Qualification, console: Console) -> None:
    title = f"{verdict.candidate} − {verdict.baseline}, GPU allocation at 130 % arrived"
    table = Table(title=title)
    table.add_column("arrival order (seed)", justify="right")
    table.add_column("gain (points)", justify="right")
    for seed, gain in zip(verdict.seeds, verdict.gains, strict=True):
        table.add_row(str(seed), f"{gain:+.3f}")
    print_table(console, table)
    console.print(
        f"mean gain {verdict.mean_gain:+.3f} ± {verdict.standard_error:.3f} (standard error); "
        f"lower bound at z = {verdict.z:g}: {verdict.lower_bound:+.3f}"
    )
    if verdict.qualified:
        console.print(f"{verdict.candidate} qualifies: serve with --policy {verdict.candidate}")
    else:
        console.print(
            f"{verdict.candidate} does not qualify (not ahead beyond the spread of arrival "
            f"orders): keep --policy {verdict.baseline}"
        )
