"""``kubesage simulate``: replay a workload through every policy and compare them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kubesage.core.cli.errors import refuse_unused_options, stderr, user_errors
from kubesage.core.cli.options import Format, Jobs, Mode, NodesCsv, OutputFormat, PodsCsv
from kubesage.core.cli.progress import runs_progress
from kubesage.core.cli.scenario import SCENARIOS, parse_variants, run_scenario_command
from kubesage.core.cli.tables import print_table
from kubesage.core.config import API_VERSION, load_config, parse_config
from kubesage.core.errors import ConfigError, InputError
from kubesage.core.model_files import check_output_dir, writing_report
from kubesage.core.policy.registry import DEFAULT_POLICIES, POLICIES
from kubesage.core.report.html import write_report
from kubesage.core.scenario.profiles import default_data_dir, trace_files
from kubesage.core.scenario.result import ScenarioSettings
from kubesage.core.sim.protocol import check_gpu_capacity
from kubesage.core.sim.runner import RunResult, RunSpec, default_jobs, run_many
from kubesage.core.sim.settings import (
    DEFAULT_REPORT_DIR,
    SIMULATION_KIND,
    SimulationSettings,
    parse_seeds,
)
from kubesage.core.sim.summary import json_document, missing_points, summary_table
from kubesage.core.state.unplaceable import never_fit
from kubesage.core.traces.openb import read_nodes, read_pods
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from kubesage.core.types import GPU_MILLI_PER_GPU, NodeSpec, PodRequest

SCENARIO_SEEDS = (42, 43, 44)
"""The scenario's default seeds (each runs every variant)."""
DEFAULT_SCENARIO_REPORT_DIR = DEFAULT_REPORT_DIR / "scenario"


def _resolve(path: Path | None, base: Path | None) -> Path | None:
    if path is None or path.is_absolute() or base is None:
        return path
    return base / path


def load_inputs(
    settings: SimulationSettings, base: Path | None = None
) -> tuple[list[NodeSpec], list[PodRequest], str]:
    """The cluster and workload the settings name, and a sentence saying what they are."""
    cluster, workload = settings.cluster, settings.workload
    nodes_csv = _resolve(cluster.nodes_csv, base)
    pods_csv = _resolve(workload.pods_csv, base)
    if nodes_csv is not None:
        nodes = read_nodes(nodes_csv)
        cluster_text = f"nodes from {nodes_csv}"
        try:
            check_gpu_capacity(sum(node.gpu_count for node in nodes) * GPU_MILLI_PER_GPU)
        except InputError as exc:
            raise InputError(f"{nodes_csv}: {exc}") from None
    else:
        nodes = synthetic_cluster(cluster.synthetic.nodes, seed=cluster.synthetic.seed)
        cluster_text = (
            f"synthetic openb-like cluster ({cluster.synthetic.nodes} nodes, "
            f"seed {cluster.synthetic.seed})"
        )
    if pods_csv is not None:
        pods = read_pods(pods_csv, require_creation_time=settings.mode == "replay")
        workload_text = f"pods from {pods_csv}"
    else:
        models = tuple(sorted({n.gpu_model for n in nodes if n.gpu_model}))
        pods = synthetic_workload(
            workload.synthetic.pods,
            seed=workload.synthetic.seed,
            gpu_models=models,
            gpu_constraint_fraction=workload.synthetic.gpu_constraint_fraction,
        )
        workload_text = (
            f"synthetic openb-like workload ({workload.synthetic.pods} pods, "
            f"seed {workload.synthetic.seed})"
        )
    for why, count in never_fit(nodes, pods).items():
        stderr.print(
            f"[yellow]warning:[/] {count} pod(s) of {workload_text} can never be placed on "
            f"the {cluster_text}, not even empty (nearest miss: {why}); they still count as "
            "arrived work"
        )
    return nodes, pods, f"{cluster_text}; {workload_text}"


def _print_table(results: list[RunResult], console: Console) -> None:
    title, headers, rows = summary_table(results)
    table = Table(title=title)
    for header in headers:
        table.add_column(header, justify="left" if header == "policy" else "right")
    for row in rows:
        table.add_row(*row)
    print_table(console, table)


@user_errors
def simulate(
    nodes: NodesCsv = None,
    pods: PodsCsv = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            help=f"Policy to run (repeatable): {', '.join(POLICIES)}; "
            f"default: {', '.join(DEFAULT_POLICIES)}.",
        ),
    ] = None,
    seeds: Annotated[
        str | None,
        typer.Option(
            "--seeds",
            help="Seeds: 42-51, 1,2,3 or a mix (default: configs/simulate.yaml's; "
            f"{SCENARIO_SEEDS[0]}-{SCENARIO_SEEDS[-1]} with --scenario).",
        ),
    ] = None,
    tune: Annotated[
        float | None,
        typer.Option("--tune", help="Inflate requests to this × GPU capacity (fgd mode)."),
    ] = None,
    mode: Annotated[
        Mode | None, typer.Option("--mode", help="fgd: arrivals only; replay: times.")
    ] = None,
    jobs: Jobs = None,
    output_format: Format = OutputFormat.table,
    report_dir: Annotated[
        Path | None, typer.Option("--report-dir", help="Report folder (default ./kubesage-report).")
    ] = None,
    no_report: Annotated[
        bool, typer.Option("--no-report", help="Do not write the HTML report.")
    ] = False,
    config: Annotated[
        Path | None, typer.Option("--config", help="A Simulation YAML (see configs/simulate.yaml).")
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option("--model", help="Model file for --policy ppo (default: the shipped one)."),
    ] = None,
    scenario: Annotated[
        str | None,
        typer.Option("--scenario", help="A whole-system scenario: mixed (docs/scenario.md)."),
    ] = None,
    gpu_nodes: Annotated[
        int | None,
        typer.Option(
            "--gpu-nodes",
            help=f"Scenario: DGX-class nodes, 8 GPUs each (default {ScenarioSettings.gpu_nodes}).",
        ),
    ] = None,
    hours: Annotated[
        float | None,
        typer.Option(
            "--hours", help=f"Scenario: simulated hours (default {ScenarioSettings.hours:g})."
        ),
    ] = None,
    load: Annotated[
        float | None,
        typer.Option(
            "--load",
            help="Scenario: offered GPU load, share of capacity "
            f"(default {ScenarioSettings.load:g}).",
        ),
    ] = None,
    variants: Annotated[
        str | None,
        typer.Option("--variants", help="Scenario: variants, comma-separated (default: all)."),
    ] = None,
    do_sweep: Annotated[
        bool, typer.Option("--sweep", help="Scenario: also sweep the offered load 0.6-0.95.")
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address", help="Scenario: run on this Ray cluster ('local': start one)."
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="Scenario: the shared traces (default: $KUBESAGE_SHARED_DATA, ../shared/data).",
        ),
    ] = None,
) -> None:
    """Run policies over a cluster and workload; print a comparison and write a report.

    With no arguments: the embedded synthetic openb-like cluster and workload, every
    policy, seeds 42-51, the FGD paper's protocol. With ``--scenario mixed``: the
    whole control loop on a mixed workload, every variant (docs/scenario.md).
    """
    if scenario is not None:
        if scenario not in SCENARIOS:
            raise InputError(f"unknown --scenario '{scenario}'; known: {', '.join(SCENARIOS)}")
        if any(option is not None for option in (nodes, pods, policy, tune, mode, config, model)):
            raise InputError(
                "--scenario takes --gpu-nodes, --hours, --load, --seeds, --variants, --sweep, "
                "--jobs, --ray-address, --format and the report options, not the packing "
                "options (--nodes, --pods, --policy, --tune, --mode, --config, --model)"
            )
        if data_dir is not None and trace_files(data_dir) is None:
            raise InputError(
                f"--data-dir {data_dir}: no genai/ folder with the GenAI trace's GPU duty-cycle "
                "and GPU memory files (pod_gpu_duty_cycle_anon.csv[.gz], "
                "pod_gpu_memory_used_bytes_anon.csv[.gz]); leave --data-dir out for the "
                "synthetic profiles"
            )
        if not no_report:
            check_output_dir(report_dir or DEFAULT_SCENARIO_REPORT_DIR, "--report-dir")
        traces = data_dir or default_data_dir()
        run_scenario_command(
            ScenarioSettings(
                gpu_nodes=ScenarioSettings.gpu_nodes if gpu_nodes is None else gpu_nodes,
                hours=ScenarioSettings.hours if hours is None else hours,
                load=ScenarioSettings.load if load is None else load,
                data_dir=str(traces.resolve()) if traces is not None else None,
            ),
            seeds=parse_seeds(seeds) if seeds is not None else SCENARIO_SEEDS,
            variants=parse_variants(variants),
            do_sweep=do_sweep,
            jobs=jobs or default_jobs(),
            ray_address=ray_address,
            output_format=output_format,
            report_dir=report_dir or DEFAULT_SCENARIO_REPORT_DIR,
            no_report=no_report,
        )
        return
    scenario_only = {
        "--gpu-nodes": gpu_nodes is not None,
        "--hours": hours is not None,
        "--load": load is not None,
        "--variants": variants is not None,
        "--sweep": do_sweep,
        "--ray-address": ray_address is not None,
        "--data-dir": data_dir is not None,
    }
    refuse_unused_options(
        scenario_only,
        "with --scenario (e.g. --scenario mixed)",
        "the packing simulation takes --nodes, --pods, --policy, --seeds, --tune, --mode",
    )
    settings, base = simulation_settings(
        config,
        nodes=nodes,
        pods=pods,
        policy=policy,
        seeds=seeds,
        tune=tune,
        mode=mode.value if mode else None,
        jobs=jobs,
        report_dir=report_dir,
        model=model,
    )
    if settings.model is not None and "ppo" not in settings.policies:
        raise InputError(
            f"--model (model: in a config) is the ppo policy's model file; the policies run "
            f"are {', '.join(settings.policies)}"
        )
    if not no_report:
        check_output_dir(settings.report_dir, "--report-dir")
    node_specs, pod_specs, described = load_inputs(settings, base)
    specs = [
        RunSpec(
            policy=name,
            seed=seed,
            mode=settings.mode,
            tune=settings.tune,
            model=settings.model,
        )
        for name in settings.policies
        for seed in settings.seeds
    ]
    worker_count = min(settings.jobs or default_jobs(), len(specs))
    stderr.print(
        f"Simulating {len(settings.policies)} policies × {len(settings.seeds)} seeds "
        f"({settings.mode} mode) on {described}; {worker_count} worker(s)."
    )
    progress = runs_progress()
    with progress:
        task = progress.add_task("runs", total=len(specs))
        results = run_many(
            specs,
            node_specs,
            pod_specs,
            jobs=worker_count,
            on_result=lambda result: progress.advance(task),
        )
    for note in missing_points(results):
        stderr.print(f"[yellow]warning:[/] {escape(note)}")
    if output_format is OutputFormat.json:
        typer.echo(json.dumps(json_document(results)))
    else:
        _print_table(results, Console())
    if not no_report:
        with writing_report(settings.report_dir, "--report-dir"):
            path = write_report(
                results,
                settings.report_dir,
                title="kubesage simulation report",
                description=f"{described}. Protocol: {settings.mode}, tune {settings.tune}.",
            )
        stderr.print(f"Report written to {path}", markup=False)


def simulation_settings(
    config: Path | None,
    *,
    nodes: Path | None = None,
    pods: Path | None = None,
    policy: list[str] | None = None,
    seeds: str | None = None,
    tune: float | None = None,
    mode: str | None = None,
    jobs: int | None = None,
    report_dir: Path | None = None,
    model: Path | None = None,
) -> tuple[SimulationSettings, Path | None]:
    """Settings from the config file (or defaults) with command-line options on top
    (an option left None keeps the file's value or the default).

    Returns the settings and the folder that relative CSV paths in the file are
    resolved against (the config file's own folder).
    """
    document: dict[str, Any] = {}
    base: Path | None = None
    if config is not None:
        document = load_config(config, SimulationSettings, kind=SIMULATION_KIND).model_dump(
            mode="json", exclude_unset=True
        )
        base = config.parent.resolve()
    if nodes is not None:
        document.setdefault("cluster", {})["nodes_csv"] = str(nodes.resolve())
    if pods is not None:
        document.setdefault("workload", {})["pods_csv"] = str(pods.resolve())
    options: dict[str, Any] = {
        "policies": list(dict.fromkeys(policy)) if policy else None,
        "seeds": list(parse_seeds(seeds)) if seeds is not None else None,
        "tune": tune,
        "mode": mode,
        "jobs": jobs,
        "report_dir": str(report_dir) if report_dir is not None else None,
        "model": str(model.resolve()) if model is not None else None,
    }
    given = {key for key, value in options.items() if value is not None}
    document.update({key: options[key] for key in given})
    if nodes is not None:
        given.add("cluster.nodes_csv")
    if pods is not None:
        given.add("workload.pods_csv")
    try:
        settings = parse_config(
            {"apiVersion": API_VERSION, "kind": SIMULATION_KIND, "spec": document},
            SimulationSettings,
            kind=SIMULATION_KIND,
            source=config or "command line",
        )
    except ConfigError as exc:
        # A value given as an option is named by its option, not by the config field.
        field = (exc.field or "").removeprefix("spec.")
        key = next((key for key in given if field == key or field.startswith(f"{key}.")), None)
        if key is None:
            raise
        raise InputError(f"{_OPTION_OF_FIELD[key]}: {exc.message}") from None
    return settings, base


_OPTION_OF_FIELD = {
    "policies": "--policy",
    "seeds": "--seeds",
    "tune": "--tune",
    "mode": "--mode",
    "jobs": "--jobs",
    "report_dir": "--report-dir",
    "model": "--model",
    "cluster.nodes_csv": "--nodes",
    "workload.pods_csv": "--pods",
}
"""The option that sets each field of the Simulation spec."""
