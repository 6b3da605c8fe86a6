"""ST-GCN against its baselines on the Alibaba GenAI serving trace, with rolling origins.

The steps after ``--train-until`` (default: the first 8 of the 16 shared hours) are
split into ``--rolling`` test blocks (default 4, two hours each); before each block
every model is retrained on everything before it and scored on that block only,
at horizons 1, 5 and 15 steps (57 s each): WAPE (headline = mean of the
per-metric WAPEs), MAPE over non-zero truths, sMAPE, the burst subset, WAPE per
metric, and training time. It prints every block and the mean side by side.

JSON: the ``kubesage forecast eval --rolling N --format json`` document
(``"models": {"<model>": {"<horizon>": {"wape", "mape_nonzero", "smape",
"per_metric", "burst"}}}`` holding the mean over blocks, ``"blocks"`` each
block's own document, ``"rolling"`` and the rest) plus ``"train_seconds":
{"<model>"}`` summed over blocks. ``--ablations`` adds the ST-GCN's ablations
under ``"ablations"``. ``--quantiles 0.9,0.95`` scores each model's upper quantiles
too (``forecast eval --quantiles``: a second fit calibrated on the last 20 % of each
block's training steps): ``"quantiles": {"<q>": {"wql", "coverage", "per_metric"}}``
under every horizon, and ``"<model>@q"`` training seconds. ``--tiny``: one epoch, two
blocks after the first two hours, q = 0.9.

    python benchmarks/forecast.py [--data-dir DIR] [--train-until +8h] [--rolling 4]
                                  [--epochs 20] [--seed 0] [--ablations] [--device cpu]
                                  [--quantiles 0.9,0.95] [--tiny] [--format table|json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _common import format_table, json_line, parse_args, run_main, trace_dir

from kubesage.core.cli.forecast import cut_off_step, parse_quantiles, quantile_table
from kubesage.core.forecast import ABLATION_NAMES, MODEL_NAMES
from kubesage.core.forecast.panel import describe, read_panel
from kubesage.core.forecast.rolling import rolling_evaluate
from kubesage.core.forecast.training import TrainConfig, check_device

HORIZONS = (1, 5, 15)
TINY = {"train_until": "+2h", "rolling": 2, "epochs": 1, "quantiles": "0.9"}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--train-until", default="+8h")
    parser.add_argument("--rolling", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=TrainConfig().epochs)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ablations", action="store_true", help="Also the ST-GCN ablations.")
    parser.add_argument(
        "--quantiles", default="", help="Also score these upper quantiles, e.g. 0.9,0.95."
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    panel = read_panel(trace_dir(args.data_dir, "genai"))
    print(describe(panel), file=sys.stderr)
    step, _ = cut_off_step(panel, args.train_until)
    result = rolling_evaluate(
        panel,
        step,
        args.rolling,
        horizons=HORIZONS,
        ablations=ABLATION_NAMES if args.ablations else (),
        quantiles=parse_quantiles(args.quantiles),
        config=TrainConfig(epochs=args.epochs, seed=args.seed, device=check_device(args.device)),
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    document = dict(result.document)
    document["train_seconds"] = {k: round(v, 1) for k, v in result.train_seconds.items()}
    if args.format == "json":
        print(json_line(document))
        return 0
    print_tables(document, list(panel.metrics), args.train_until, panel.step_s)
    for name, note in result.notes.items():
        print(f"note: {name}: {note}")
    return 0


def print_tables(
    document: dict[str, object], metrics: list[str], train_until: str, step_s: float
) -> None:
    models = {**document["models"], **document.get("ablations", {})}  # type: ignore[dict-item]
    blocks = document["blocks"]
    seconds = document["train_seconds"]
    assert isinstance(blocks, list) and isinstance(seconds, dict)
    spans = ", ".join(
        f"{(b['train_until'] - blocks[0]['train_until']) / 3600:+.1f} h ({b['test_steps']} steps)"
        for b in blocks
    )
    print(
        f"Rolling origins from {train_until}: {len(blocks)} blocks starting {spans} after the "
        f"first cut-off; each model retrained before each block. Graph: {document['graph']}"
    )
    headers, rows = ["model"], []
    for k in range(len(blocks)):
        headers += [f"b{k + 1} h={h}" for h in HORIZONS]
    headers += [f"mean h={h}" for h in HORIZONS]
    for name, per_h in models.items():
        row: list[object] = [name]
        for block in blocks:
            entry = {**block["models"], **block.get("ablations", {})}[name]
            row += [entry[str(h)]["wape"] for h in HORIZONS]
        row += [per_h[str(h)]["wape"] for h in HORIZONS]
        rows.append(row)
    print(
        "\nHeadline WAPE per block and mean over blocks (mean of per-metric WAPE; lower is better)"
    )
    print(format_table(headers, rows, digits=3))
    rows = []
    for name, per_h in models.items():
        row = [name]
        for h in HORIZONS:
            row += [per_h[str(h)]["mape_nonzero"], per_h[str(h)]["smape"]]
        row += [per_h["1"]["burst"]["wape"], seconds.get(name)]
        rows.append(row)
    headers = ["model"]
    for h in HORIZONS:
        headers += [f"MAPE≠0 h={h}", f"sMAPE h={h}"]
    print("\nMean over blocks: MAPE over non-zero truths, sMAPE, burst WAPE h=1, training s")
    print(format_table([*headers, "burst h=1", "train s"], rows, digits=3))
    for h in HORIZONS:
        rows = [
            [name, *(per_h[str(h)]["per_metric"][m]["wape"] for m in metrics)]
            for name, per_h in models.items()
        ]
        print(f"\nMean WAPE per metric, horizon {h} ({h * step_s / 60:.0f} min)")
        print(format_table(["model", *metrics], rows, digits=3))
    print_quantiles(document)
    stgcn = {h: models["stgcn"][str(h)]["wape"] for h in HORIZONS} if "stgcn" in models else {}
    for name in models:
        if name == "stgcn" or not stgcn or name not in MODEL_NAMES:
            continue
        ratios = ", ".join(
            f"h={h}: {models[name][str(h)]['wape'] / stgcn[h]:.2f}x" for h in HORIZONS if stgcn[h]
        )
        print(f"{name} WAPE / stgcn WAPE (mean over blocks): {ratios}")


def print_quantiles(document: dict[str, object]) -> None:
    """wQL / coverage per model, quantile and horizon (mean over blocks), if scored."""
    models = document["models"]
    assert isinstance(models, dict)
    headers, rows = quantile_table(models, list(HORIZONS))
    if rows:
        print("\nUpper quantiles, mean over blocks: wQL (lower is better) / coverage (aim: q)")
        print(format_table(headers, rows, digits=3))


if __name__ == "__main__":
    run_main(main)
