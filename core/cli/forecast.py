"""``kubesage forecast …``: train and evaluate load forecasters on per-entity metric series."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kubesage.core.cli.errors import refuse_unused_options, stderr, user_errors
from kubesage.core.cli.options import MetricMapOption, OutputFormat
from kubesage.core.cli.tables import print_table
from kubesage.core.cli.telemetry import RateWindowOption, metric_map_from_options, read_history
from kubesage.core.durations import format_duration, parse_duration_s
from kubesage.core.errors import InputError
from kubesage.core.forecast import ABLATION_NAMES, DEFAULT_HISTORY, DEFAULT_HORIZON, MODEL_NAMES
from kubesage.core.forecast.node_panel import DEFAULT_COLUMNS, node_panel, select_columns
from kubesage.core.forecast.panel import MetricPanel, describe, read_panel
from kubesage.core.loop.settings import DEFAULT_TICK_S
from kubesage.core.model_files import check_output, write_replacing

forecast_app = typer.Typer(help="Load forecasting: ST-GCN and its baselines.", no_args_is_help=True)

TRAIN_RANGE = "6h"
"""``forecast train --prometheus``: the history it trains on by default."""
TRAIN_STEP = f"{DEFAULT_TICK_S:g}s"
"""``forecast train --prometheus``: the history's step by default (the loop's tick)."""


def cut_off_step(panel: MetricPanel, train_until: str) -> tuple[int, float]:
    """The first test step for ``train_until``: a timestamp, or ``+12h``/``+90m``/``+600s``
    after the data's first timestamp. Returns the step and the absolute timestamp."""
    text = train_until.strip()
    if text.startswith("+"):
        timestamp = panel.start_s + parse_duration_s(text[1:], "--train-until")
    else:
        try:
            timestamp = float(train_until)
        except ValueError:
            timestamp = math.nan
        if not math.isfinite(timestamp):
            raise InputError(
                f"--train-until '{train_until}' is neither a timestamp nor +DURATION (e.g. +12h)"
            )
    span = (panel.steps - 1) * panel.step_s
    end = panel.start_s + span
    step = panel.step_of(timestamp)
    # Past the last step's time the last step may hold only samples from before the
    # cut-off: nothing would be tested.
    if not 0 < step < panel.steps or timestamp > end:
        raise InputError(
            f"--train-until {text} ({timestamp:.0f}) leaves no steps on one side: the data "
            f"spans {format_duration(span)}, from {panel.start_s:.0f} to {end:.0f}"
        )
    return step, timestamp


def parse_quantiles(text: str, flag: str = "--quantiles") -> list[float]:
    """``--quantiles 0.9,0.95``: distinct quantiles, each strictly between 0 and 1; errors
    name ``flag``."""
    from kubesage.core.forecast.quantile import check_quantile

    try:
        values = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise InputError(f"{flag} '{text}' is not a comma-separated list of numbers") from None
    return [check_quantile(value, f"each of {flag} ('{text}')") for value in values]


def parse_horizons(text: str) -> list[int]:
    try:
        horizons = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise InputError(f"--horizons '{text}' is not a comma-separated list of steps") from None
    if not horizons or horizons[0] < 1:
        raise InputError(f"--horizons '{text}' must list positive step counts")
    return horizons


DataOption = Annotated[Path, typer.Option("--data", help="Folder of per-entity metric CSVs.")]
UntilOption = Annotated[
    str, typer.Option("--train-until", help="Cut-off timestamp, or +12h after the first sample.")
]
EpochsOption = Annotated[int, typer.Option("--epochs", min=1, help="Most training epochs.")]
SeedOption = Annotated[int, typer.Option("--seed", min=0, help="Training seed.")]
DeviceOption = Annotated[
    str, typer.Option("--device", help="Torch device to train on: cpu, or cuda where present.")
]


def parse_names(text: str, known: tuple[str, ...], option: str) -> list[str]:
    """A comma-separated subset of ``known`` (``all``: every one), unknown names refused."""
    chosen = list(known) if text.strip() == "all" else [n.strip() for n in text.split(",")]
    chosen = [n for n in chosen if n]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        kind = "model(s)" if option == "--models" else "ablation(s)"
        raise InputError(f"unknown {kind} {unknown}; known: {', '.join(known)}")
    return chosen


@forecast_app.command("train")
@user_errors
def train_command(
    out: Annotated[Path, typer.Option("--out", help="Model file to write (safetensors).")],
    data: Annotated[
        Path | None, typer.Option("--data", help="Folder of per-entity metric CSVs.")
    ] = None,
    train_until: Annotated[
        str | None,
        typer.Option(
            "--train-until",
            help="With --data: cut-off timestamp, or +12h after the first sample "
            "(default: all of it).",
        ),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            help="Train on this Prometheus's node metrics instead of --data: the series the "
            "control loop forecasts, for `serve --forecast-model`.",
        ),
    ] = None,
    range_: Annotated[
        str | None,
        typer.Option(
            "--range",
            help=f"With --prometheus: history to train on, ending now (default {TRAIN_RANGE}).",
        ),
    ] = None,
    step: Annotated[
        str | None,
        typer.Option(
            "--step",
            help="With --prometheus: the history's step; use the loop's --tick-s "
            f"(default {TRAIN_STEP}).",
        ),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            "--metrics",
            help="With --prometheus: metric-map columns to forecast (patterns; default "
            f"{','.join(DEFAULT_COLUMNS)}). With --data: the metric files to read (default all).",
        ),
    ] = None,
    metric_map: MetricMapOption = None,
    rate_window: RateWindowOption = None,
    model: Annotated[str, typer.Option("--model", help="stgcn or lstm.")] = "stgcn",
    history: Annotated[
        int, typer.Option("--history", min=2, help="Input steps the model reads.")
    ] = DEFAULT_HISTORY,
    horizon: Annotated[
        int, typer.Option("--horizon", min=1, help="Steps to forecast.")
    ] = DEFAULT_HORIZON,
    epochs: EpochsOption = 20,
    seed: SeedOption = 0,
    device: DeviceOption = "cpu",
    quantile: Annotated[
        float | None,
        typer.Option(
            "--quantile",
            help="Also calibrate this upper quantile (e.g. 0.95) on the last 20 % of the "
            "history, which the model then does not train on; the loop reads it instead "
            "of the median.",
        ),
    ] = None,
) -> None:
    """Train a neural forecaster on a folder of metric CSVs (everything before the cut-off)
    or on Prometheus history, and save it."""
    from kubesage.core.forecast.forecaster import NeuralForecaster, make_forecaster
    from kubesage.core.forecast.persistence import save_forecaster
    from kubesage.core.forecast.quantile import QuantileForecaster, check_quantile
    from kubesage.core.forecast.training import TrainConfig, check_device

    check_output(out)
    if model not in ("stgcn", "lstm"):
        raise InputError(f"--model must be stgcn or lstm, got '{model}'")
    if quantile is not None:
        check_quantile(quantile, "--quantile")
    if (data is None) == (prometheus is None):
        raise InputError("give one source to train on: --data DIR or --prometheus URL")
    if prometheus is not None:
        if train_until is not None:
            raise InputError(
                "--train-until goes with --data; --prometheus trains on all of --range"
            )
        columns = ",".join(DEFAULT_COLUMNS) if metrics is None else metrics
        panel = _prometheus_panel(
            prometheus,
            TRAIN_RANGE if range_ is None else range_,
            TRAIN_STEP if step is None else step,
            columns,
            metric_map,
            rate_window,
        )
    else:
        assert data is not None
        refuse_unused_options(
            {
                "--range": range_ is not None,
                "--step": step is not None,
                "--metric-map": metric_map is not None,
                "--rate-window": rate_window is not None,
            },
            "with --prometheus",
            "--data trains on the metric files of the folder",
        )
        panel = read_panel(data, metrics=_names(metrics))
        stderr.print(describe(panel))
    if train_until is None:
        until, timestamp = panel.steps, panel.start_s + panel.steps * panel.step_s
    else:
        until, timestamp = cut_off_step(panel, train_until)
    forecaster = make_forecaster(
        model,
        history=history,
        horizon=horizon,
        config=TrainConfig(epochs=epochs, seed=seed, device=check_device(device)),
    )
    assert isinstance(forecaster, NeuralForecaster)
    upper = None if quantile is None else QuantileForecaster(forecaster, quantile=quantile)
    with stderr.status(f"training {model} on {until} steps") as status:
        (upper or forecaster).fit(
            panel,
            until,
            on_epoch=lambda e, n, loss: status.update(
                f"{model}: epoch {e}/{n}, validation L1 {loss:.4f}"
            ),
        )
    if forecaster.fallback_reason:
        raise InputError(
            f"{out} not written: {forecaster.fallback_reason} — such a model would only "
            "repeat the last value; train on more history (an earlier start or a later "
            "--train-until, --range with --prometheus) or a shorter --history/--horizon"
        )
    if forecaster.training_note:
        stderr.print(forecaster.training_note, markup=False)
    assert forecaster.graph is not None
    stderr.print(f"graph: {forecaster.graph.description}", markup=False)
    if forecaster.report:
        stderr.print(
            f"trained {forecaster.report.epochs_run} epochs in {forecaster.report.seconds:.0f} s "
            f"(best epoch {forecaster.report.best_epoch})"
        )
    if upper is not None and upper.calibration is not None:
        peaks = ", ".join(
            f"{m} {o:+.2f}σ"
            for m, o in zip(forecaster.metrics, upper.calibration.peak_offsets, strict=True)
        )
        stderr.print(
            f"calibrated q={upper.quantile:g} on the last {upper.calibration_fraction:.0%} of "
            f"the history ({upper.calibration.residuals} residuals at least per metric and "
            f"step); peak offsets {peaks}"
        )
        if upper.note:
            raise InputError(
                f"{out} not written: {upper.note} — its upper quantile would be the point "
                "forecast; train on more history so the last "
                f"{upper.calibration_fraction:.0%} holds windows to calibrate on"
            )
    fitted = upper or forecaster
    path = write_replacing(
        out,
        lambda target: save_forecaster(
            fitted, target, train_until_s=timestamp, step_s=panel.step_s
        ),
    )
    typer.echo(str(path))


def _names(metrics: str | None) -> list[str] | None:
    """``--metrics`` with ``--data``: the metric files' names, as ``a,b,c``."""
    return None if metrics is None else [m.strip() for m in metrics.split(",") if m.strip()]


def _prometheus_panel(
    url: str,
    range_: str,
    step: str,
    metrics: str,
    metric_map: Path | None,
    rate_window: str | None,
) -> MetricPanel:
    """The chosen metric-map columns of Prometheus's history, per node (what was left out
    said on stderr)."""
    patterns = [p.strip() for p in metrics.split(",") if p.strip()]
    if not patterns:
        raise InputError(
            "--metrics is empty: name metric-map columns, e.g. dcgm.gpu_util_percent.gpu*"
        )
    loaded = metric_map_from_options(metric_map, rate_window)
    wanted = loaded.only(select_columns(loaded.columns, patterns))  # query only those
    history = read_history(url, range_, step, wanted, timeout=30.0, selected=f"--metrics {metrics}")
    chosen = node_panel(history, patterns)
    panel = chosen.panel
    stderr.print(
        f"{panel.steps} steps of {panel.step_s:g} s, {len(panel.entities)} node(s), "
        f"{len(panel.metrics)} column(s): {', '.join(panel.metrics)}"
    )
    if chosen.empty_columns:
        stderr.print(
            f"left out, no node reported them: {', '.join(chosen.empty_columns)}", markup=False
        )
    if chosen.silent_nodes:
        stderr.print(
            f"left out, reported none of the columns: {', '.join(chosen.silent_nodes)}",
            markup=False,
        )
    return panel


@forecast_app.command("eval")
@user_errors
def eval_command(
    data: DataOption,
    train_until: UntilOption,
    horizons: Annotated[str, typer.Option("--horizons", help="Steps ahead to score.")] = "1,5,15",
    metrics: Annotated[
        str | None,
        typer.Option("--metrics", help="The metric files of --data to read (default all)."),
    ] = None,
    output_format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.table,
    models: Annotated[
        str, typer.Option("--models", help="Comma-separated subset of the models.")
    ] = ",".join(MODEL_NAMES),
    epochs: EpochsOption = 20,
    seed: SeedOption = 0,
    rolling: Annotated[
        int,
        typer.Option(
            "--rolling",
            min=1,
            help="Split the steps after --train-until into N test blocks; retrain before each "
            "and report every block and the mean.",
        ),
    ] = 1,
    ablations: Annotated[
        str,
        typer.Option(
            "--ablations",
            help="ST-GCN ablations, reported apart: 'all' or some of " + ", ".join(ABLATION_NAMES),
        ),
    ] = "",
    quantiles: Annotated[
        str,
        typer.Option(
            "--quantiles",
            help="Also score these upper quantiles (e.g. 0.9,0.95) of each model: pinball "
            "loss, wQL and coverage, from a second fit calibrated on the last 20 % of the "
            "training steps.",
        ),
    ] = "",
    device: DeviceOption = "cpu",
) -> None:
    """Train every model before the cut-off and score them all after it."""
    from kubesage.core.forecast.evaluate import evaluate
    from kubesage.core.forecast.rolling import rolling_evaluate
    from kubesage.core.forecast.training import TrainConfig, check_device

    panel = read_panel(data, metrics=_names(metrics))
    stderr.print(describe(panel))
    step, timestamp = cut_off_step(panel, train_until)
    chosen = parse_names(models, MODEL_NAMES, "--models")
    removed = parse_names(ablations, ABLATION_NAMES, "--ablations")
    steps = parse_horizons(horizons)
    levels = parse_quantiles(quantiles)
    config = TrainConfig(epochs=epochs, seed=seed, device=check_device(device))
    with stderr.status("evaluating") as status:
        if rolling > 1:
            result = rolling_evaluate(
                panel,
                step,
                rolling,
                horizons=steps,
                models=chosen,
                ablations=removed,
                quantiles=levels,
                config=config,
                progress=status.update,
                train_until_label=timestamp,
            )
        else:
            result = evaluate(
                panel,
                step,
                horizons=steps,
                models=chosen,
                ablations=removed,
                quantiles=levels,
                train_until_label=timestamp,
                config=config,
                progress=status.update,
            )
    stderr.print(f"graph: {result.graph}", markup=False)
    for name, note in result.notes.items():
        stderr.print(f"[yellow]warning:[/] {escape(f'{name}: {note}')}")
    if output_format is OutputFormat.json:
        typer.echo(json.dumps(result.document))
        return
    console = Console()
    blocks = result.document.get("blocks")
    if isinstance(blocks, list):
        for k, block in enumerate(blocks, start=1):
            _print_eval(block, steps, console, f"block {k}/{len(blocks)}: ")
        _print_eval(result.document, steps, console, f"mean over {len(blocks)} blocks: ")
    else:
        _print_eval(result.document, steps, console)


def _print_eval(
    document: dict[str, object], horizons: list[int], console: Console, title: str = ""
) -> None:
    models = document["models"]
    assert isinstance(models, dict)
    ablations = document.get("ablations", {})
    assert isinstance(ablations, dict)
    metrics = document["metrics"]
    assert isinstance(metrics, list)
    table = Table(title=f"{title}WAPE by horizon (headline = mean over metrics; lower is better)")
    table.add_column("model", no_wrap=True)
    for h in horizons:
        table.add_column(f"h={h}", justify="right")
        table.add_column(f"burst h={h}", justify="right")
    for metric in metrics:
        table.add_column(f"{metric} h={horizons[-1]}", justify="right")

    def fmt(value: object) -> str:
        return "–" if value is None else f"{value:.3f}"

    for name, per_h in {**models, **ablations}.items():
        if name == next(iter(ablations), None):
            table.add_section()  # the ablations below the models
        row = [name]
        for h in horizons:
            row += [fmt(per_h[str(h)]["wape"]), fmt(per_h[str(h)]["burst"]["wape"])]
        last = per_h[str(horizons[-1])]["per_metric"]
        row += [fmt(last[metric]["wape"]) for metric in metrics]
        table.add_row(*row)
    print_table(console, table)
    _print_quantiles(models, horizons, console, title)


def quantile_table(
    models: dict[str, Any], horizons: list[int]
) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of ``wQL / coverage`` per model, quantile and horizon, for the
    models --quantiles scored (no rows when none was)."""
    scored = {
        name: per_h for name, per_h in models.items() if "quantiles" in per_h[str(horizons[0])]
    }
    if not scored:
        return [], []
    levels = list(next(iter(scored.values()))[str(horizons[0])]["quantiles"])
    headers = ["model"] + [f"q={q} h={h}" for q in levels for h in horizons]
    rows = []
    for name, per_h in scored.items():
        row = [name]
        for q in levels:
            for h in horizons:
                cell = per_h[str(h)]["quantiles"][q]
                wql, coverage = cell["wql"], cell["coverage"]
                row.append(
                    "–" if wql is None or coverage is None else f"{wql:.3f} / {coverage:.3f}"
                )
        rows.append(row)
    return headers, rows


def _print_quantiles(
    models: dict[str, Any],
    horizons: list[int],
    console: Console,
    title: str,
) -> None:
    """wQL and coverage per model, quantile and horizon, when --quantiles asked for them."""
    headers, rows = quantile_table(models, horizons)
    if not rows:
        return
    table = Table(title=f"{title}upper quantiles: wQL (lower is better) / coverage (aim: q)")
    table.add_column(headers[0], no_wrap=True)
    for header in headers[1:]:
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(*row)
    print_table(console, table)
