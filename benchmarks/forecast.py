"""ST-GCN against its baselines on the Alibaba GenAI serving trace.

Trains every model on the first 12 hours of ``../shared/data/genai`` and scores it
on the last 4, at horizons 1, 5 and 15 steps (57 s each): WAPE (headline = mean of
the per-metric WAPEs), sMAPE, the burst subset, WAPE per metric, and training time.

JSON: the ``kubesage forecast eval --format json`` document (``"models": {"<model>":
{"<horizon>": {"wape", "smape", "per_metric", "burst"}}}`` and the rest) plus
``"train_seconds": {"<model>"}``. ``--tiny``: one epoch on the first hour.

    python benchmarks/forecast.py [--data-dir DIR] [--train-until +12h] [--epochs 30]
                                  [--seed 0] [--tiny] [--format table|json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _common import format_table, parse_args, shared_data_dir

from kubesage.core.cli.forecast import cut_off_step
from kubesage.core.forecast.evaluate import evaluate
from kubesage.core.forecast.panel import describe, read_panel
from kubesage.core.forecast.training import TrainConfig

HORIZONS = (1, 5, 15)
TINY = {"train_until": "+1h", "epochs": 1}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--train-until", default="+12h")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    panel = read_panel(shared_data_dir(args.data_dir) / "genai")
    print(describe(panel), file=sys.stderr)
    step, timestamp = cut_off_step(panel, args.train_until)
    result = evaluate(
        panel,
        step,
        horizons=HORIZONS,
        train_until_label=timestamp,
        config=TrainConfig(epochs=args.epochs, seed=args.seed),
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    document = dict(result.document)
    document["train_seconds"] = {k: round(v, 1) for k, v in result.train_seconds.items()}
    if args.format == "json":
        print(json.dumps(document))
        return 0
    models = result.document["models"]
    assert isinstance(models, dict)
    metrics = list(panel.metrics)
    print(
        f"Train: first {step} steps ({args.train_until}); test: the remaining "
        f"{panel.steps - step} steps. Graph: {result.graph}."
    )
    headline = []
    for name, per_h in models.items():
        row: list[object] = [name]
        for h in HORIZONS:
            row += [per_h[str(h)]["wape"], per_h[str(h)]["burst"]["wape"]]
        row.append(result.train_seconds[name])
        headline.append(row)
    headers = ["model"]
    for h in HORIZONS:
        headers += [f"WAPE h={h}", f"burst h={h}"]
    print("\nHeadline WAPE (mean of per-metric WAPE; lower is better) and training seconds")
    print(format_table([*headers, "train s"], headline, digits=3))
    for h in HORIZONS:
        rows = []
        for name, per_h in models.items():
            cells = per_h[str(h)]["per_metric"]
            rows.append([name, *(cells[m]["wape"] for m in metrics), per_h[str(h)]["smape"]])
        print(f"\nWAPE per metric, horizon {h} ({per_h[str(h)]['burst']['cells']} burst cells)")
        print(format_table(["model", *metrics, "sMAPE"], rows, digits=3))
    stgcn = {h: models["stgcn"][str(h)]["wape"] for h in HORIZONS}
    for name in models:
        if name == "stgcn":
            continue
        ratios = ", ".join(
            f"h={h}: {models[name][str(h)]['wape'] / stgcn[h]:.2f}x" for h in HORIZONS if stgcn[h]
        )
        print(f"{name} WAPE / stgcn WAPE: {ratios}")
    for name, note in result.notes.items():
        print(f"note: {name}: {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
