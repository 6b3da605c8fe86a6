"""``kubesage telemetry …``: what kubesage perceives through Prometheus, and its PCA.

- ``snapshot``: one (or ``--count``) collection of the metric map's columns, summarised
  per node as the features see them: which sources report, how many columns have data,
  a few headline values; a snapshot served from the last good one because Prometheus
  failed is marked ``STALE`` with the reason.
- ``fit-pca``: a range of history → sliding-window features → PCA, saved as
  safetensors; prints how much variance the kept components explain, and how many were
  kept and why.

Prometheus failures are one-line ``error:`` messages (exit 2) naming the URL and the
cause, through the CLI's KubesageError handling.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.table import Table

from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.cli.options import MetricMapOption, OutputFormat, prometheus_url
from kubesage.core.cli.tables import print_table
from kubesage.core.durations import format_duration, parse_duration_s, parse_promql_duration
from kubesage.core.errors import DependencyError, InputError
from kubesage.core.model_files import check_output, write_replacing
from kubesage.core.perception import Snapshot
from kubesage.core.telemetry.features import (
    FeatureBuilder,
    MetricHistory,
    NodeFeatures,
    NodeMetrics,
)
from kubesage.core.telemetry.metric_map import MetricMap, load_metric_map
from kubesage.core.telemetry.pca import DEFAULT_COMPONENTS, PcaModel, fit_pca, save_pca
from kubesage.core.telemetry.prometheus import PrometheusCollector, PrometheusUnavailableError

telemetry_app = typer.Typer(
    help="Perception: per-node features from Prometheus, and their PCA.", no_args_is_help=True
)

HEADLINE_COLUMNS = (
    ("node_exporter.cpu_busy_fraction", "cpu", "{:.0%}"),
    ("node_exporter.memory_used_fraction", "mem", "{:.0%}"),
    ("dcgm.gpu_util_percent.mean", "gpu", "{:.0f}%"),
    ("dcgm.fb_used_mib.sum", "gpu MiB", "{:,.0f}"),
)
"""Columns shown in the table when the metric map has them: (column, heading, format)."""
MAX_INTERVAL_S = 86_400.0
"""Longest ``--interval`` between snapshots (a day)."""
MAX_RANGE_S = 366 * 86_400.0
"""Longest ``--range`` of history (a year)."""
MAX_STEPS = 1_000_000
"""Most time steps ``--range`` / ``--step`` may ask for (each series is one array of them)."""
MAX_TIMEOUT_S = 600.0
"""Longest ``--timeout-s`` per query."""
VARIANCE_TARGETS = (0.5, 0.9, 0.95, 0.99)
"""Explained-variance levels ``fit-pca`` reports the component count for."""

_OS_ERROR = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)|(timed out)")


class PrometheusUnreachableError(DependencyError):
    """Prometheus did not answer the CLI (down, refused, timing out, or an error status)."""


def _unreachable(url: str, exc: PrometheusUnavailableError) -> PrometheusUnreachableError:
    """A short message: the URL and the cause (requests' messages run to several hundred
    characters of pool internals)."""
    text = str(exc)
    found = _OS_ERROR.search(text)
    if found is not None:
        cause = (found.group(1) or found.group(2)).strip()
    else:
        # the collector bounds the query it quotes; Prometheus' own error text stays whole
        cause = text.removeprefix(f"{url}: ").split(" (no earlier good snapshot")[0]
    return PrometheusUnreachableError(f"cannot read Prometheus at {url}: {cause}")


@contextmanager
def _collector_logs_quiet() -> Iterator[None]:
    """The commands report Prometheus failures themselves (one ``error:`` line, or the
    stale mark with its reason): keep the collector's log lines off the terminal."""
    logger = logging.getLogger(PrometheusCollector.__module__)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def metric_map_from_options(path: Path | None, rate_window: str | None) -> MetricMap:
    metric_map = load_metric_map(path)
    if rate_window is not None:
        metric_map = metric_map.with_rate_window(
            parse_promql_duration(rate_window, "--rate-window")
        )
    return metric_map


# --- snapshot ---------------------------------------------------------------------------


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class NodeSummary(_Out):
    """One node's features at one snapshot."""

    node: str
    columns_seen: int
    """Metric-map columns with a value (the rest are imputed and flagged missing)."""
    sources_seen: dict[str, str]
    """Per source of the map, ``seen/total`` columns."""
    headline: dict[str, float | None]
    features: list[float]
    """The feature vector, in ``SnapshotReport.feature_names`` order."""


class SnapshotReport(_Out):
    """A snapshot as ``telemetry snapshot`` reports it."""

    prometheus: str
    taken_at: float
    stale: bool
    reason: str | None
    columns: int
    feature_names: list[str]
    nodes: list[NodeSummary]
    dropped: list[str] = []
    """Per source, series that could not be placed on a node (e.g. no node label)."""


def summarise(
    url: str,
    metric_map: MetricMap,
    snapshot: Snapshot[NodeMetrics],
    builder: FeatureBuilder,
    dropped: Sequence[str] = (),
) -> SnapshotReport:
    """Per-node feature summary of ``snapshot`` (marked stale when it is a fallback)."""
    data = snapshot.data
    features: NodeFeatures = builder.instant_features(data)
    observed = np.isfinite(data.values)
    sources: dict[str, list[int]] = {}
    for metric in metric_map.metrics:
        start = data.columns.index(metric.columns[0])
        sources.setdefault(metric.source, []).extend(range(start, start + len(metric.columns)))
    headline = [(c, h) for c, h, _ in HEADLINE_COLUMNS if c in data.columns]
    nodes = []
    for n, node in enumerate(data.nodes):
        values = {h: float(data.values[n, data.columns.index(c)]) for c, h in headline}
        nodes.append(
            NodeSummary(
                node=node,
                columns_seen=int(observed[n].sum()),
                sources_seen={
                    source: f"{int(observed[n, idx].sum())}/{len(idx)}"
                    for source, idx in sources.items()
                },
                headline={h: (v if math.isfinite(v) else None) for h, v in values.items()},
                features=[float(x) for x in features.values[n]],
            )
        )
    return SnapshotReport(
        prometheus=url,
        taken_at=snapshot.taken_at,
        stale=snapshot.stale,
        reason=snapshot.reason,
        columns=len(data.columns),
        feature_names=list(features.names),
        nodes=nodes,
        dropped=list(dropped),
    )


def snapshots(
    collector: PrometheusCollector,
    count: int,
    interval_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Snapshot[NodeMetrics]]:
    """``count`` collections ``interval_s`` apart. The first must succeed (nothing to fall
    back to: PrometheusUnreachableError); later ones fall back to the last good snapshot,
    marked stale, as the collector does for the scheduler."""
    for index in range(count):
        if index:
            sleep(interval_s)
        try:
            yield collector.collect()
        except PrometheusUnavailableError as exc:
            raise _unreachable(collector.url, exc) from exc


def print_snapshot(report: SnapshotReport, console: Console) -> None:
    """The table ``telemetry snapshot`` prints: one row per node, stale marked in the title."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.taken_at))
    state = f"[bold red]STALE[/] ({report.reason})" if report.stale else "fresh"
    console.print(
        f"{report.prometheus} at {when}: {state}; {len(report.nodes)} node(s), "
        f"{report.columns} columns → {len(report.feature_names)} features each"
    )
    table = Table(caption="columns with data / in the map, per source; cpu, mem, gpu: now")
    table.add_column("node", no_wrap=True)
    sources = list(report.nodes[0].sources_seen) if report.nodes else []
    for source in sources:
        table.add_column(source, justify="right")
    formats = {h: f for _, h, f in HEADLINE_COLUMNS}
    headings = list(report.nodes[0].headline) if report.nodes else []
    for heading in headings:
        table.add_column(heading, justify="right")
    for node in report.nodes:
        row = [node.node, *(node.sources_seen[s] for s in sources)]
        row += [
            "–" if node.headline[h] is None else formats[h].format(node.headline[h])
            for h in headings
        ]
        table.add_row(*row)
    if report.nodes:
        print_table(console, table)
    else:
        console.print("no node reported any metric of the map")
    for line in report.dropped:
        console.print(f"dropped: {line}", highlight=False, markup=False)


PrometheusOption = Annotated[
    str, typer.Option("--prometheus", help="Prometheus base URL, e.g. http://prometheus:9090.")
]
RateWindowOption = Annotated[
    str | None,
    typer.Option("--rate-window", help="Override the map's rate() window ($window), e.g. 1m."),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout-s",
        "--timeout",
        min=0.1,
        max=MAX_TIMEOUT_S,
        help="Seconds to wait for each query.",
    ),
]


@telemetry_app.command("snapshot")
@user_errors
def snapshot_command(
    prometheus: PrometheusOption,
    metric_map: MetricMapOption = None,
    rate_window: RateWindowOption = None,
    output_format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.table,
    count: Annotated[int, typer.Option("--count", min=1, help="Snapshots to take.")] = 1,
    interval: Annotated[
        str, typer.Option("--interval", help="Time between snapshots (with --count).")
    ] = "15s",
    timeout: TimeoutOption = 5.0,
) -> None:
    """Per-node feature summary of the metric map now (stale snapshots are marked)."""
    url = prometheus_url(prometheus)
    interval_s = parse_duration_s(interval, "--interval", maximum_s=MAX_INTERVAL_S)
    loaded = metric_map_from_options(metric_map, rate_window)
    builder = FeatureBuilder(loaded)
    collector = PrometheusCollector(url, loaded, timeout_s=timeout)
    reports = []
    try:
        with _collector_logs_quiet():
            for snapshot in snapshots(collector, count, interval_s):
                dropped = [d.describe() for d in collector.dropped.values()]
                report = summarise(url, loaded, snapshot, builder, dropped)
                if output_format is OutputFormat.json:
                    reports.append(report.model_dump(mode="json"))
                else:
                    print_snapshot(report, Console())
    finally:
        collector.close()
    if output_format is OutputFormat.json:
        document: dict[str, Any] = reports[0] if count == 1 else {"snapshots": reports}
        typer.echo(json.dumps(document))


# --- fit-pca ----------------------------------------------------------------------------


def components_for(model: PcaModel, share: float) -> int | None:
    """Fewest kept components explaining at least ``share`` of the variance (None: the
    kept ones do not reach it)."""
    cumulative = np.cumsum(model.explained_variance_ratio)
    reached = np.flatnonzero(cumulative >= share - 1e-12)
    return int(reached[0]) + 1 if reached.size else None


def read_history(
    prometheus: str,
    range_: str,
    step: str,
    metric_map: MetricMap,
    timeout: float,
    *,
    selected: str | None = None,
) -> MetricHistory:
    """``--range`` of the metric map's columns at ``--step``, ending now, from Prometheus;
    a clear error when it is unreachable or holds none of the map's series (``selected``:
    the option that chose the columns, named there)."""
    url = prometheus_url(prometheus)
    range_s = parse_duration_s(range_, "--range", maximum_s=MAX_RANGE_S)
    step_s = parse_duration_s(step, "--step")
    if step_s > range_s:
        raise InputError(f"--step {step} is longer than --range {range_}")
    if range_s / step_s > MAX_STEPS:
        shortest = format_duration(math.ceil(range_s / MAX_STEPS))
        raise InputError(
            f"--range {range_} at --step {step} is {range_s / step_s:,.0f} steps, more than "
            f"{MAX_STEPS:,}: use a step of at least {shortest}"
        )
    collector = PrometheusCollector(url, metric_map, timeout_s=timeout)
    end = time.time()
    try:
        with (
            _collector_logs_quiet(),
            stderr.status(f"reading {range_} of history at {step} from {url}"),
        ):
            history = collector.history(end - range_s, end, step_s)
    except PrometheusUnavailableError as exc:
        raise _unreachable(url, exc) from exc
    finally:
        collector.close()
    if not history.nodes:
        dropped = "; ".join(d.describe() for d in collector.dropped.values())
        which = f"the metric map's columns {selected} chose" if selected else "the metric map"
        raise InputError(
            f"Prometheus at {url} has no series of {which} in the last {range_}: "
            "nothing to learn from (are the exporters scraped? is --metric-map right?)"
            + (f"; dropped: {dropped}" if dropped else "")
        )
    return history


@telemetry_app.command("fit-pca")
@user_errors
def fit_pca_command(
    prometheus: PrometheusOption,
    range_: Annotated[
        str, typer.Option("--range", help="History to fit on, ending now: 30m, 1h, 1d.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Model file to write (safetensors).")],
    step: Annotated[str, typer.Option("--step", help="Resolution of the history.")] = "15s",
    components: Annotated[
        int, typer.Option("--components", min=1, help="Components to keep at most.")
    ] = DEFAULT_COMPONENTS,
    window: Annotated[
        int, typer.Option("--window", min=1, help="Steps per feature window (sliding).")
    ] = 4,
    metric_map: MetricMapOption = None,
    rate_window: RateWindowOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Fit PCA on a range of Prometheus history and save it; print what it kept and why."""
    check_output(out)
    loaded = metric_map_from_options(metric_map, rate_window)
    history = read_history(prometheus, range_, step, loaded, timeout)
    builder = FeatureBuilder(loaded)
    if history.steps < window:
        raise InputError(
            f"--range {range_} at --step {step} gives {history.steps} steps, "
            f"fewer than one --window of {window}"
        )
    rows = builder.training_matrix(history, window)
    model = fit_pca(rows, builder.names, n_components=components)
    path = write_replacing(out, lambda target: save_pca(model, target))
    why = (
        f"limited by {model.limited_by}"
        if model.limited_by
        else f"as requested (--components {components})"
    )
    typer.echo(
        f"history: {history.steps} steps × {len(history.nodes)} node(s); "
        f"{rows.shape[0]} rows of {rows.shape[1]} features (windows of {window} steps)"
    )
    typer.echo(f"kept {model.n_components} of {components} requested components: {why}")
    explained = float(model.explained_variance_ratio.sum())
    first = float(model.explained_variance_ratio[0])
    typer.echo(f"explained variance: first {first:.1%}, all {model.n_components} {explained:.1%}")
    reach = [
        f"{share:.0%} in {n}" if (n := components_for(model, share)) else f"{share:.0%} not reached"
        for share in VARIANCE_TARGETS
    ]
    typer.echo("components to reach: " + ", ".join(reach))
    typer.echo(f"saved {path}")
