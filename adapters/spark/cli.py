"""``kubesage spark …``: shuffle-aware executor placement as spark-submit conf and pod templates."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.text import Text

from kubesage.adapters.spark.app_kind import OVERHEAD_FACTOR, AppKind, app_kind_of
from kubesage.adapters.spark.cluster_room import live_room
from kubesage.adapters.spark.conf import (
    SparkSettings,
    executor_memory_mib,
    executor_pod_shape,
    spark_settings,
)
from kubesage.adapters.spark.eventlog import read_event_log
from kubesage.adapters.spark.job_hints import DEFAULT_PROFILE, parse_locality
from kubesage.adapters.spark.loop_placement import SparkPlacementReconciler
from kubesage.adapters.spark.placement import (
    ExecutorShape,
    place_executors,
    spread_placement,
)
from kubesage.adapters.spark.shuffle_model import ShuffleProfile, rack_locality
from kubesage.adapters.spark.user_overrides import overridden
from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.cli.foreground import run_in_foreground
from kubesage.core.cli.passthrough import PassThroughCommand
from kubesage.core.dra.claims import DeviceMode
from kubesage.core.errors import CapacityError, InputError
from kubesage.core.loop.reconciler import Actuator, Reconciler
from kubesage.core.loop.settings import ReconcilerContext
from kubesage.core.perception import Collector
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.discovery import DEFAULT_RACK_LABEL
from kubesage.core.topology.examples import topology_file
from kubesage.core.topology.graph import DRTG

spark_app = typer.Typer(
    help="Spark on Kubernetes: rack-aware executor placement, conf and pod templates.",
    no_args_is_help=True,
)

DEFAULT_TOPOLOGY = Path("cpu-racks")
"""The shipped example topology (a name, resolved by ``topology_file``) used without --topology."""

Executors = Annotated[int, typer.Option("--executors", min=1, help="Executors.")]
Cores = Annotated[int, typer.Option("--cores", min=1, help="Cores per executor.")]
Memory = Annotated[
    str,
    typer.Option(
        "--memory", help="Memory per executor, as spark.executor.memory: 4g, 4096m or 4096 (MiB)."
    ),
]
EventLog = Annotated[
    Path | None,
    typer.Option("--event-log", help="A past run's event log (file or rolling directory)."),
]
Locality = Annotated[
    str | None,
    typer.Option(
        "--input-locality", help="Where the input lies: rack-or-zone=fraction,… (e.g. rack-a1=0.6)."
    ),
]
TopologyPath = Annotated[
    Path,
    typer.Option(
        "--topology",
        help="Topology YAML (kubesage topology discover) or a shipped example's name.",
    ),
]
RackLabel = Annotated[str, typer.Option("--rack-label", help="Node label naming the rack.")]
LocalDir = Annotated[
    str | None, typer.Option("--local-dir", help="Host path on a fast disk for shuffle files.")
]
NodeShare = Annotated[
    float, typer.Option("--max-node-share", help="Most executors per node, as a share of all.")
]
ExecutorGpus = Annotated[int, typer.Option("--executor-gpus", min=0, help="GPUs per executor.")]
Devices = Annotated[
    DeviceMode,
    typer.Option(
        "--devices",
        help="How GPU executors ask for GPUs: device-plugin (spark.executor.resource.gpu.*, "
        "nvidia.com/gpu) or dra (a ResourceClaimTemplate, claimed in the executor template).",
    ),
]
Kubeconfig = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Plan on this cluster's room now (its nodes and pods, listed once) instead of "
        "on an empty topology.",
    ),
]
Context = Annotated[
    str | None, typer.Option("--context", help="kubeconfig context (default: current).")
]
SchedulerName = Annotated[
    str | None,
    typer.Option(
        "--scheduler-name",
        help="Have the executors name this scheduler (kubesage's secondary scheduler, e.g. "
        "kubesage): the control loop then binds them together (Spark 3.0+).",
    ),
]
AppKindOption = Annotated[
    AppKind | None,
    typer.Option(
        "--app-kind",
        help="jvm, python or r: sizes the executors' memory overhead as Spark does (10 % "
        "for jvm, 40 % for PySpark and SparkR). Default: submit reads it from the "
        "application's file (.py, .R); conf assumes jvm.",
    ),
]
CLAIM_TEMPLATE_FILE = "gpu-claim-template.yaml"
"""Where a DRA run writes the executors' ResourceClaimTemplate (to create before submit)."""


def plan(
    out: Path,
    executors: int,
    cores: int,
    memory: str,
    event_log: Path | None,
    input_locality: str | None,
    topology: Path,
    rack_label: str,
    local_dir: str | None,
    max_node_share: float,
    executor_gpus: int = 0,
    devices: DeviceMode = DeviceMode.device_plugin,
    scheduler_name: str | None = None,
    kubeconfig: Path | None = None,
    context: str | None = None,
    app_kind: AppKind = AppKind.jvm,
) -> SparkSettings:
    """Place, write conf + templates + plan into ``out``, print the reasons. With a
    ``kubeconfig`` (or a ``context``), on that cluster's room now."""
    if devices is DeviceMode.dra and not executor_gpus:
        raise InputError("--devices dra is for GPU executors: give --executor-gpus too")
    drtg = DRTG.from_yaml(topology_file(topology))
    live_notes: list[str] = []
    if kubeconfig is not None or context is not None:
        from kubesage.core.k8s.apiclient import load_api_client

        api = load_api_client(str(kubeconfig) if kubeconfig else None, context)
        room, live_notes = live_room(drtg, api)
        state = room.state
    else:
        state = ClusterState(drtg.node_specs())
    shape = ExecutorShape(executors, cores, executor_memory_mib(memory), gpus=executor_gpus)
    if event_log is not None:
        app = read_event_log(event_log)
        for note in app.notes:
            stderr.print(f"[yellow]warning:[/] {note}")
        profile = ShuffleProfile.from_application(app)
        if profile.total_shuffle_bytes == 0 and app.total_shuffle_bytes > 0:
            stderr.print(
                f"[yellow]warning:[/] the log's stages read {app.total_shuffle_bytes:,} shuffle "
                "bytes, but no stage that wrote them is in it (a part of a rolling log "
                "missing?): they shape no edge"
            )
        if profile.total_shuffle_bytes == 0 and profile.input_bytes == 0:
            stderr.print("the event log shows no shuffle or input bytes; using the default shape")
            profile = DEFAULT_PROFILE
        elif input_locality and profile.input_bytes == 0:
            stderr.print("the event log shows no input bytes read: --input-locality has no effect")
        stderr.print(
            f"event log: {len(app.stages)} stage(s), {app.total_shuffle_bytes:,} shuffle bytes, "
            f"{sum(app.skipped_events.values())} event(s) of unused types skipped"
        )
    else:
        profile = DEFAULT_PROFILE
    local = rack_locality(drtg, parse_locality(input_locality))
    pods = executor_pod_shape(shape, app_kind)  # what each executor pod asks of a node
    try:
        ours = place_executors(drtg, state, pods, profile, local, max_node_share=max_node_share)
        spread = spread_placement(drtg, state, pods, profile, local)
    except CapacityError as exc:
        where = "the live cluster's room on the topology" if live_notes else "the topology"
        raise InputError(f"on {where} {topology}: {exc}") from None
    settings = spark_settings(
        drtg,
        ours,
        shape,
        template_dir=str(out.resolve()),
        rack_label=rack_label,
        local_dir=local_dir,
        gpus_per_executor=executor_gpus,
        devices=devices,
        scheduler_name=scheduler_name,
        input_locality=input_locality,
        app_kind=app_kind,
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "executor-template.yaml").write_text(yaml.safe_dump(settings.executor_template))
    (out / "driver-template.yaml").write_text(yaml.safe_dump(settings.driver_template))
    (out / "spark-defaults.conf").write_text(settings.properties())
    claim_file = out / CLAIM_TEMPLATE_FILE
    if settings.claim_templates:
        claim_file.write_text(yaml.safe_dump_all(settings.claim_templates, sort_keys=False))
    else:
        claim_file.unlink(missing_ok=True)  # a stale one from an earlier DRA run
    ratio = (
        ours.estimate.cross_rack_bytes / spread.estimate.cross_rack_bytes
        if spread.estimate.cross_rack_bytes
        else 0.0
    )
    lines = [
        *live_notes,
        f"memory overhead {settings.conf['spark.executor.memoryOverhead']} per executor: "
        f"Spark's {OVERHEAD_FACTOR[app_kind]:.0%} for a {app_kind.value} application",
        *ours.reasons,
        f"expected cross-rack bytes: {ours.estimate.cross_rack_bytes:,.0f} "
        f"(default spread: {spread.estimate.cross_rack_bytes:,.0f}, ratio {ratio:.2f})",
    ]
    if settings.claim_templates:
        lines.append(
            f"GPUs through DRA: create {CLAIM_TEMPLATE_FILE} in the application's namespace "
            "before spark-submit (kubectl apply -f); each executor pod claims "
            f"{executor_gpus} GPU(s) from it"
        )
    (out / "plan.txt").write_text("".join(f"{line}\n" for line in lines))
    for line in lines:
        stderr.print(line, highlight=False)
    return settings


@spark_app.command("conf")
@user_errors
def conf(
    executors: Executors,
    cores: Cores,
    memory: Memory,
    out: Annotated[Path, typer.Option("--out", help="Folder for conf, templates and plan.")],
    event_log: EventLog = None,
    input_locality: Locality = None,
    topology: TopologyPath = DEFAULT_TOPOLOGY,
    rack_label: RackLabel = DEFAULT_RACK_LABEL,
    local_dir: LocalDir = None,
    max_node_share: NodeShare = 0.25,
    executor_gpus: ExecutorGpus = 0,
    devices: Devices = DeviceMode.device_plugin,
    scheduler_name: SchedulerName = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    app_kind: AppKindOption = None,
) -> None:
    """Place the executors and write spark-defaults.conf, pod templates and plan.txt
    (and, for GPU executors through DRA, gpu-claim-template.yaml)."""
    settings = plan(
        out,
        executors,
        cores,
        memory,
        event_log,
        input_locality,
        topology,
        rack_label,
        local_dir,
        max_node_share,
        executor_gpus,
        devices,
        scheduler_name,
        kubeconfig,
        context,
        app_kind or AppKind.jvm,
    )
    typer.echo(shlex.join(settings.submit_args()))  # pasted into a shell as it is


def find_spark_submit() -> str:
    """$SPARK_HOME/bin/spark-submit, else spark-submit on PATH, else pyspark's own."""
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "bin" / "spark-submit").exists():
        return str(Path(home) / "bin" / "spark-submit")
    found = shutil.which("spark-submit")
    if found:
        return found
    try:
        import pyspark
    except ImportError:
        raise InputError(
            "spark-submit not found: set SPARK_HOME, put spark-submit on PATH or install pyspark"
        ) from None
    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


@spark_app.command("submit", cls=PassThroughCommand)
@user_errors
def submit(
    ctx: typer.Context,
    executors: Executors,
    cores: Cores,
    memory: Memory,
    out: Annotated[Path, typer.Option("--out", help="Folder for conf, templates and plan.")] = Path(
        "kubesage-spark"
    ),
    event_log: EventLog = None,
    input_locality: Locality = None,
    topology: TopologyPath = DEFAULT_TOPOLOGY,
    rack_label: RackLabel = DEFAULT_RACK_LABEL,
    local_dir: LocalDir = None,
    max_node_share: NodeShare = 0.25,
    executor_gpus: ExecutorGpus = 0,
    devices: Devices = DeviceMode.device_plugin,
    scheduler_name: SchedulerName = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    app_kind: AppKindOption = None,
) -> None:
    """Run spark-submit with the placement's conf before your own arguments (after `--`)."""
    if not ctx.args:
        raise InputError("give the spark-submit arguments after '--'")
    settings = plan(
        out,
        executors,
        cores,
        memory,
        event_log,
        input_locality,
        topology,
        rack_label,
        local_dir,
        max_node_share,
        executor_gpus,
        devices,
        scheduler_name,
        kubeconfig,
        context,
        app_kind or app_kind_of(ctx.args),
    )
    # Yours come last, so an explicit --conf of yours wins; each such key is named.
    for warning in overridden(settings.conf, ctx.args):
        stderr.print(Text(f"warning: {warning}"))
    command = [find_spark_submit(), *settings.submit_args(), *ctx.args]
    sys.stdout.flush()
    raise typer.Exit(run_in_foreground(command))


@dataclass(frozen=True)
class SparkAdapter:
    name: str = "spark"
    cli: typer.Typer = spark_app

    def reconcilers(self, context: ReconcilerContext) -> Sequence[Reconciler]:
        """``spark-placement`` when the loop keeps a topology (DRTG) observed: it places
        Spark executors on it, so without one there is nothing for it to do."""
        if context.topology is None:
            return ()
        return (SparkPlacementReconciler(),)

    def collectors(self, context: ReconcilerContext) -> Sequence[Collector[Any]]:
        """None: its reconcilers read the core's cluster and telemetry snapshots."""
        return ()

    def actuators(self, context: ReconcilerContext) -> Sequence[Actuator]:
        """None: the core executes its actions (bind, evict, scale, patch, label)."""
        return ()


ADAPTER = SparkAdapter()
