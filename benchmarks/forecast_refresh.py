"""What a trained forecaster costs, per tick in the loop and to train, as the nodes grow.

With ``kubesage serve --forecast-model`` the loop's forecast panel asks the model once
per tick for every series it knows (``kubesage.core.loop.forecasts``): the series are
laid on the loop's ticks and the model predicts ``--horizon`` steps from the last
``--history``. This measures that refresh beside the default, the last value (which
predicts nothing), for a model of each node's eight GPU-utilisation columns — what
``kubesage forecast train --prometheus`` trains by default — and what training that
model on ``--train-steps`` of history costs (``--epochs`` epochs; the cost of a refresh
does not depend on how well it was trained).

Per node count, in a process of its own (so that its peak memory is its own): a
synthetic history (a sine per GPU with its own phase, plus noise; 5 s steps) trains an
ST-GCN, then the panel is fed one sample per series and tick for ``--ticks`` ticks, the
model asked for the history it reads (its ``context``), as ``serve --forecast-model``
asks it; refreshes are timed once the panel's rolling window is full (the loop's steady
state: before it the model answers with the last value, then makes the forecasts of
every earlier origin its highway scores, then one origin a tick). Training keeps at
most 500,000 windows × nodes (origins thinned evenly beyond that,
:data:`kubesage.core.forecast.windows.MAX_WINDOW_SERIES`) and 8,192 series per batch, so
its memory does not grow with the history.

Figures per count: ``last_value_ms`` and ``model_ms`` (median refresh), ``series`` (the
series the model answers), ``fit_seconds``, ``train_windows`` (windows trained on, of
``windows_available``) and ``peak_rss_mib`` (the process's peak resident memory: history,
training and the refreshes). JSON: ``{"history", "horizon", "ticks", "train_steps",
"nodes": {"<n>": {those figures}}}``.

    python benchmarks/forecast_refresh.py [--nodes 1000,3000,10000] [--ticks 76]
        [--train-steps 720] [--epochs 1] [--tiny] [--format table|json]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import statistics
import sys
import time
from typing import Any

import numpy as np
from _common import format_table, json_line, parse_args, run_main

from kubesage.core.forecast.forecaster import NeuralForecaster, make_forecaster
from kubesage.core.forecast.loop_adapter import LoopForecaster
from kubesage.core.forecast.node_panel import node_panel
from kubesage.core.forecast.training import TrainConfig
from kubesage.core.loop.forecasts import DEFAULT_HISTORY, GPU_UTIL_METRIC, ForecastPanel
from kubesage.core.telemetry.features import MetricHistory

HISTORY = 24
HORIZON = 15
STEP_S = 5.0
GPUS = 8
WINDOW = max(DEFAULT_HISTORY, HISTORY)
"""The loop's rolling window of ticks (the panel's history)."""
TINY = {"nodes": [20], "ticks": WINDOW + 3, "train_steps": 120}


def node_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected node counts like 1000,3000; got {text!r}")
    return counts


def synthetic_history(nodes: int, steps: int, seed: int = 0) -> MetricHistory:
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0.0, 2 * np.pi, (1, nodes, GPUS))
    t = np.arange(steps, dtype=np.float64)[:, None, None]
    values = np.clip(
        50 + 30 * np.sin(t / 5 + phase) + rng.normal(0, 5, (steps, nodes, GPUS)), 0, 100
    )
    names = tuple(f"node-{i:05d}" for i in range(nodes))
    columns = tuple(GPU_UTIL_METRIC.format(gpu=g) for g in range(GPUS))
    return MetricHistory(STEP_S * t[:, 0, 0], names, columns, values)


def timed_refreshes(panel: ForecastPanel, history: MetricHistory, ticks: int) -> list[float]:
    """Seconds per refresh once the panel's window (``WINDOW`` ticks) is full."""
    times = []
    for tick in range(ticks):
        row = history.values[tick % history.steps]
        for n, node in enumerate(history.nodes):
            for c, column in enumerate(history.columns):
                panel.observe(node, column, float(row[n, c]))
        started = time.perf_counter()
        panel.refresh()
        if tick >= WINDOW:
            times.append(time.perf_counter() - started)
    return times


def measure(nodes: int, ticks: int, epochs: int, train_steps: int) -> dict[str, Any]:
    history = synthetic_history(nodes, train_steps)
    panel = node_panel(history).panel
    model = make_forecaster(
        "stgcn", history=HISTORY, horizon=HORIZON, config=TrainConfig(epochs=epochs, seed=0)
    )
    assert isinstance(model, NeuralForecaster)
    started = time.perf_counter()
    model.fit(panel, panel.steps)
    fit_seconds = time.perf_counter() - started
    last = timed_refreshes(ForecastPanel(horizon_steps=HORIZON), history, ticks)
    # A model of HISTORY steps reads its context (50) from the loop's window.
    assert model.context <= WINDOW
    loop = ForecastPanel(horizon_steps=HORIZON, history=WINDOW)
    loop.use(
        LoopForecaster(
            model,
            model.entities,
            model.metrics,
            step_s=STEP_S,
            history_steps=model.context,
            horizon_steps=HORIZON,
        )
    )
    with_model = timed_refreshes(loop, history, ticks)
    return {
        "last_value_ms": round(1000 * statistics.median(last), 3),
        "model_ms": round(1000 * statistics.median(with_model), 2),
        "series": loop.answered,
        "fit_seconds": round(fit_seconds, 1),
        "train_windows": model.training_windows,
        "windows_available": panel.steps - HISTORY - HORIZON + 1,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def measure_apart(nodes: int, ticks: int, epochs: int, train_steps: int) -> dict[str, Any]:
    """:func:`measure` in a fresh process, so that its peak memory is its own."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result: dict[str, Any] = pool.apply(measure, (nodes, ticks, epochs, train_steps))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=node_counts, default=[1000, 3000, 10000])
    parser.add_argument("--ticks", type=int, default=WINDOW + 12)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--train-steps", type=int, default=720, help="history to train on")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    if args.ticks <= WINDOW:
        raise SystemExit(f"--ticks must exceed the loop's window of {WINDOW} ticks")
    if args.train_steps < HISTORY + HORIZON + 40:
        raise SystemExit(f"--train-steps must be at least {HISTORY + HORIZON + 40}")
    results = {}
    for nodes in args.nodes:
        print(f"{nodes} nodes: training, then {args.ticks} ticks", file=sys.stderr, flush=True)
        results[str(nodes)] = measure_apart(nodes, args.ticks, args.epochs, args.train_steps)
    document = {
        "history": HISTORY,
        "horizon": HORIZON,
        "ticks": args.ticks,
        "train_steps": args.train_steps,
        "nodes": results,
    }
    if args.format == "json":
        print(json_line(document))
        return 0
    print(
        f"forecast panel refresh per tick, {GPUS} GPU columns per node, an ST-GCN of "
        f"history {HISTORY} and horizon {HORIZON}; medians of {args.ticks - WINDOW} ticks"
    )
    rows = [
        [
            n,
            r["series"],
            r["last_value_ms"],
            r["model_ms"],
            r["fit_seconds"],
            f"{r['train_windows']} of {r['windows_available']}",
            r["peak_rss_mib"],
        ]
        for n, r in results.items()
    ]
    headers = ["nodes", "series", "last value ms", "ST-GCN ms", "fit s", "windows", "peak MiB"]
    print(format_table(headers, rows))
    return 0


if __name__ == "__main__":
    run_main(main)
