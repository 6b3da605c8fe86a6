"""How much the gateway's request rate can tell about each pod's next values.

The GenAI trace's request-rate file holds, besides each pod's rate, rows without a
pod: the gateway's. Their sum per step follows the pods' summed rate and leads it by
about a step — the one signal found in the trace that a per-pod forecaster cannot
see, and the reason a gateway node in the ST-GCN's graph was the next idea
(docs/forecasting.md). Before building it, this measures its ceiling with the
simplest model that can use it: for each metric and horizon h, a linear model fitted
for least absolute error (what WAPE rewards) on the steps before ``--train-until``,
predicting a pod's value h steps ahead from

- its own history: last value, means of its last 3 and 12 steps, a constant;
- the same plus the gateway: its rate, its last change, and the pod's 12-step mean
  scaled by the gateway's level and change relative to the gateway's 12-step mean;

then scored (WAPE) on every later step. ``last_value`` is the naive reference. If the
gateway's features do not lower the error of a model that can weigh them directly,
a graph node carrying the same series has little to give.

JSON: ``{"train_until_step", "test_steps", "gateway_rows", "horizons": {"<h>":
{"per_metric": {"<metric>": {"own", "with_gateway", "last_value"}}, "headline":
{"own", "with_gateway", "last_value"}}}}`` (headline = mean of the per-metric WAPEs).
``--tiny``: the first 2 hours for training, h = 1 only.

    python benchmarks/forecast_gateway.py [--data-dir DIR] [--train-until +8h]
                                          [--horizons 1,5,15] [--tiny] [--format json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from _common import format_table, json_line, parse_args, run_main, trace_dir

from kubesage.core.arrays import BoolArray, FloatArray
from kubesage.core.cli.forecast import cut_off_step, parse_horizons
from kubesage.core.forecast.baselines import least_absolute
from kubesage.core.forecast.metrics import mean_of, scores
from kubesage.core.forecast.panel import MetricPanel, describe, read_entityless, read_panel

TINY = {"train_until": "+2h", "horizons": "1"}
GATEWAY_METRIC = "qps"
HISTORY = 12
"""Steps of history every feature reads."""


def features(
    panel: MetricPanel, gateway: FloatArray, metric: int, horizon: int, with_gateway: bool
) -> tuple[FloatArray, FloatArray, BoolArray, FloatArray]:
    """``(X[t, n, k], y[t, n], usable[t, n], last[t, n])`` for origins t = HISTORY − 1 …
    steps − 1 − horizon; a cell is usable where the last value and the target are real."""
    values = np.where(panel.mask[:, :, metric], panel.values[:, :, metric], 0.0)
    observed = panel.mask[:, :, metric]
    origins = np.arange(HISTORY - 1, panel.steps - horizon)
    windows = np.stack([values[origins - lag] for lag in range(HISTORY)])  # (lag, t, n)
    last = windows[0]
    recent, mean = windows[:3].mean(axis=0), windows.mean(axis=0)
    columns = [last, recent, mean, np.ones_like(last)]
    if with_gateway:
        level = np.stack([gateway[origins - lag] for lag in range(HISTORY)]).mean(axis=0)
        scale = np.maximum(level, 1e-9)[:, None]
        now = gateway[origins][:, None]
        change = (gateway[origins] - gateway[origins - 1])[:, None]
        columns += [
            np.broadcast_to(now / scale, last.shape),
            np.broadcast_to(change / scale, last.shape),
            mean * now / scale,
            mean * change / scale,
        ]
    usable = observed[origins] & observed[origins + horizon]
    return np.stack(columns, axis=-1), values[origins + horizon], usable, last


def evaluate(
    panel: MetricPanel, gateway: FloatArray, cut: int, horizons: list[int]
) -> dict[str, object]:
    result: dict[str, object] = {}
    for horizon in horizons:
        per_metric: dict[str, dict[str, float | None]] = {}
        for m, name in enumerate(panel.metrics):
            row: dict[str, float | None] = {}
            for label, with_gateway in (("own", False), ("with_gateway", True)):
                x, y, usable, last = features(panel, gateway, m, horizon, with_gateway)
                origins = np.arange(HISTORY - 1, panel.steps - horizon)
                train = (origins + horizon < cut)[:, None] & usable
                test = (origins >= cut)[:, None] & usable
                if not train.any() or not test.any():
                    raise SystemExit(f"error: too few steps around the cut for h = {horizon}")
                weights = least_absolute(x[train], y[train])
                row[label] = scores(x @ weights, y, test)["wape"]
                row["last_value"] = scores(last, y, test)["wape"]
            per_metric[name] = row
        headline = {
            label: mean_of([per_metric[m][label] for m in panel.metrics])
            for label in ("own", "with_gateway", "last_value")
        }
        result[str(horizon)] = {"per_metric": per_metric, "headline": headline}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--train-until", default="+8h")
    parser.add_argument("--horizons", default="1,5,15")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    directory = trace_dir(args.data_dir, "genai")
    panel = read_panel(directory)
    print(describe(panel), file=sys.stderr)
    gateway = read_entityless(directory, panel, GATEWAY_METRIC)
    cut, _ = cut_off_step(panel, args.train_until)
    horizons = parse_horizons(args.horizons)
    document = {
        "train_until_step": cut,
        "test_steps": panel.steps - cut,
        "gateway_rows": panel.excluded_rows.get(GATEWAY_METRIC, 0),
        "horizons": evaluate(panel, gateway, cut, horizons),
    }
    if args.format == "json":
        print(json_line(document))
        return 0
    rows = []
    for horizon, entry in document["horizons"].items():  # type: ignore[union-attr]
        for name, row in [*entry["per_metric"].items(), ("headline", entry["headline"])]:
            own, gated = row["own"], row["with_gateway"]
            change = None if not own or gated is None else gated / own - 1
            rows.append([f"h={horizon} {name}", row["last_value"], own, gated, change])
    print(
        f"WAPE of a least-absolute-error linear model per metric, trained on steps before "
        f"{cut} ({args.train_until}), tested on the {panel.steps - cut} steps after"
    )
    print(
        format_table(
            ["horizon, metric", "last value", "own history", "+ gateway", "change"],
            rows,
            digits=3,
        )
    )
    return 0


if __name__ == "__main__":
    run_main(main)
