"""GPU-sharing pods packed by forecast peaks: GPU-hours, overload and migrations.

Replays the GPU duty cycle and GPU memory of the Alibaba GenAI serving pods
(``../shared/data/genai``) on a pool of GPUs. Every ``--interval`` steps (57 s each)
the pods present are (re)packed so that each pod's reservation for the coming
interval — per policy, below — fits each GPU (sum of duty ≤ 100 %, sum of memory ≤
``--gpu-memory-gib``), by one sticky first-fit-decreasing rule
(``kubesage.core.forecast.packing``); the interval then plays out on the true usage
(``kubesage.core.forecast.packing_replay``, which also says how missing samples count).

Policies: ``one_per_pod`` (a GPU per pod: what requests imply), ``history_peak``
(each pod's peak so far), ``last_value``, ``moving_median``, ``lstm``, ``stgcn`` (each
forecaster's ``--quantile`` upper quantile of the pod's peak over the interval, calibrated
conformally on the last ``--calibration-fraction`` of the training hours:
``kubesage.core.forecast.quantile``), and ``oracle`` (the interval's true peak: the
bound). Forecasters train only on the hours before ``--train-until``; the replay is
the hours after it, which no forecaster saw.

Memory capacity: 80 GiB by default, an 80 GB A100/H100 — the largest pod in the
trace uses 47 GiB, more than a 40/48 GB GPU holds, so 80 GB is the smallest common
GPU every pod fits on.

Reported per policy: ``gpu_hours``; ``overload_minutes`` (per GPU and step whose
pods' true duty cycles sum over 100 % or memory over capacity, the step's minutes);
``migrations_per_pod_hour``; ``distance_to_oracle`` = |GPU-hours − oracle's| /
oracle's + |overload − oracle's| / max(history_peak's overload, 1). JSON:
``{"policies": {"<name>": {...those four...}}, "train_hours", "replay_hours",
"interval_steps", "quantile", "scale", "gpu_memory_gib", "pods", "decisions", "rolling",
"blocks": [{"train_hours", "replay_hours", "decisions"}], "train_seconds", "data"}``;
with ``--sweep Q1,Q2,…`` also ``"quantile_sweep": {"<q>": {"<forecaster>": {"gpu_hours",
"overload_minutes"}}}`` (the same trained forecasters recalibrated at each
quantile: how much the verdict moves with ``q``). ``--tiny``: the first 160 steps, one
epoch, two rolling blocks, a sweep of 0.9 and 0.95.

``--rolling N`` (forecast eval's rolling origins): the replay after ``--train-until`` is
cut into N blocks, and before each block every forecaster is retrained (and
recalibrated) on all steps before that block's first re-packing; the replay itself
stays one run over every block, so the policies without a model are unchanged, and
the figures add up over more hours, so that a few bursts decide less.
``train_seconds`` sums the blocks.

    python benchmarks/forecast_packing.py [--data-dir DIR] [--train-until +10h]
        [--rolling 1] [--interval 5] [--quantile 0.95] [--gpu-memory-gib 80] [--epochs 30]
        [--calibration-fraction 0.2] [--scale series|window] [--sweep Q1,Q2,…]
        [--seed 0] [--tiny]
        [--format table|json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import find_trace, format_table, json_line, parse_args, replay_start, run_main

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.cli.forecast import parse_quantiles
from kubesage.core.errors import InputError
from kubesage.core.forecast.forecaster import make_forecaster
from kubesage.core.forecast.packing_replay import (
    DUTY_CAPACITY,
    ReplayResult,
    decision_steps,
    distance_to_oracle,
    forecast_peaks,
    history_peak,
    oracle,
    replay,
    usage_of,
    whole_gpu,
)
from kubesage.core.forecast.panel import MetricPanel, describe, read_panel
from kubesage.core.forecast.quantile import QuantileForecaster
from kubesage.core.forecast.rolling import Block, blocks_after
from kubesage.core.forecast.synthetic import write_synthetic_metrics
from kubesage.core.forecast.training import TrainConfig

FORECASTERS = ("last_value", "moving_median", "lstm", "stgcn")
POLICIES = ("one_per_pod", "history_peak", *FORECASTERS, "oracle")
GIB = 2.0**30
TINY = {"steps": 160, "train_until": "+100m", "rolling": 2, "epochs": 1, "sweep": (0.9, 0.95)}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_panel(data_dir: Path | None) -> tuple[MetricPanel, str]:
    folder = find_trace(data_dir, "genai")
    if folder is not None:
        log(f"reading {folder}")
        return read_panel(folder), "genai"
    log("no GenAI trace found; using synthetic metrics")
    folder = Path(tempfile.mkdtemp(prefix="kubesage-genai-"))
    return read_panel(write_synthetic_metrics(folder, entities=40, steps=1011)), "synthetic"


def first_steps(panel: MetricPanel, steps: int) -> MetricPanel:
    return panel.head(steps) if 0 < steps < panel.steps else panel


def quantile_list(text: str) -> tuple[float, ...]:
    """``--sweep``: comma-separated quantiles, each in (0, 1) (``forecast eval --quantiles``'
    rule)."""
    try:
        values = tuple(parse_quantiles(text, "--sweep"))
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected quantiles like 0.9,0.95; got {text!r}")
    return values


def block_origins(origins: IntArray, blocks: list[Block]) -> list[IntArray]:
    """The decisions of each rolling block: those from its start to its end. A block's
    forecasters train on every step before its first decision."""
    groups = [origins[(origins >= b.cut_off) & (origins < b.end)] for b in blocks]
    if any(group.size == 0 for group in groups):
        raise SystemExit(f"--rolling {len(blocks)}: a block holds no re-packing; use fewer blocks")
    return groups


def sweep_table(sweep: dict[str, dict[str, dict[str, float]]]) -> str:
    """Rows: quantiles; cells: each forecaster's GPU-hours / overload minutes."""
    rows = [
        [q, *(f"{r[n]['gpu_hours']:.1f} / {r[n]['overload_minutes']:g}" for n in FORECASTERS)]
        for q, r in sweep.items()
    ]
    return format_table(["q", *(f"{n}: GPU-h / overload min" for n in FORECASTERS)], rows)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--train-until", default="+10h", help="+DURATION after the first sample.")
    parser.add_argument(
        "--rolling",
        type=int,
        default=1,
        metavar="N",
        help="Split the replay into N blocks; before each, every forecaster is retrained on "
        "all steps before it (forecast eval's rolling origins). The replay itself is one.",
    )
    parser.add_argument("--interval", type=int, default=5, help="Steps between re-packings.")
    parser.add_argument("--quantile", type=float, default=0.95)
    parser.add_argument("--calibration-fraction", type=float, default=0.2)
    parser.add_argument(
        "--scale",
        choices=["series", "window"],
        default="series",
        help="Residual scale of the quantile calibration (kubesage.core.forecast.quantile).",
    )
    parser.add_argument(
        "--sweep",
        type=quantile_list,
        default=(),
        metavar="Q1,Q2,…",
        help="Also replay each forecaster at these quantiles (same trained models, "
        "recalibrated): the JSON key quantile_sweep and a second table.",
    )
    parser.add_argument("--gpu-memory-gib", type=float, default=80.0)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=0, help="Use only the first N steps.")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    panel, source = load_panel(args.data_dir)
    panel = first_steps(panel, args.steps)
    log(describe(panel))
    cut = replay_start(panel, args.train_until)
    capacity = np.array([DUTY_CAPACITY, args.gpu_memory_gib * GIB])
    usage = usage_of(panel)
    origins = decision_steps(cut, panel.steps, args.interval)
    blocks = blocks_after(cut, panel.steps, args.rolling, min_steps=args.interval)
    groups = block_origins(origins, blocks)
    reservations = {
        "one_per_pod": whole_gpu(usage, origins, capacity),
        "history_peak": history_peak(usage, origins, args.interval),
        "oracle": oracle(usage, origins, args.interval),
    }
    train_seconds: dict[str, float] = {}
    notes: dict[str, str] = {}
    sweep: dict[str, dict[str, dict[str, float]]] = {str(q): {} for q in args.sweep}
    config = TrainConfig(epochs=args.epochs, seed=args.seed)
    for name in FORECASTERS:
        peaks: list[FloatArray] = []
        swept: dict[float, list[FloatArray]] = {q: [] for q in args.sweep}
        train_seconds[name] = 0.0
        for number, group in enumerate(groups, start=1):
            before = int(group[0])
            log(
                f"block {number}/{len(groups)}: training {name} on steps before {before} "
                "(calibrating on the last part)"
            )
            started = time.perf_counter()
            forecaster = QuantileForecaster(
                make_forecaster(name, config=config, horizon=args.interval),
                quantile=args.quantile,
                calibration_fraction=args.calibration_fraction,
                scale=args.scale,
            )
            try:
                forecaster.fit(panel, before)
            except InputError as exc:
                raise SystemExit(f"{name}, block {number}: {exc}") from None
            train_seconds[name] = round(train_seconds[name] + time.perf_counter() - started, 1)
            if forecaster.note:
                notes[name if len(groups) == 1 else f"{name}, block {number}"] = forecaster.note
            peaks.append(forecast_peaks(forecaster, panel, usage, group, args.interval))
            for q in args.sweep:
                at_q = forecaster.at_quantile(q)
                swept[q].append(forecast_peaks(at_q, panel, usage, group, args.interval))
        reservations[name] = np.concatenate(peaks)
        for q in args.sweep:
            log(f"replaying {name} at q = {q:g}")
            result = replay(usage, origins, args.interval, np.concatenate(swept[q]), capacity)
            sweep[str(q)][name] = {
                "gpu_hours": round(result.gpu_hours, 3),
                "overload_minutes": round(result.overload_minutes, 2),
            }
    results: dict[str, ReplayResult] = {}
    for name in POLICIES:
        log(f"replaying {name}")
        results[name] = replay(usage, origins, args.interval, reservations[name], capacity)
    scale = results["history_peak"].overload_minutes
    policies = {
        name: {
            "gpu_hours": round(r.gpu_hours, 3),
            "overload_minutes": round(r.overload_minutes, 2),
            "migrations_per_pod_hour": round(r.migrations_per_pod_hour, 4),
            "distance_to_oracle": round(distance_to_oracle(r, results["oracle"], scale), 4),
        }
        for name, r in results.items()
    }
    hours = panel.step_s / 3600.0
    document: dict[str, object] = {
        "policies": policies,
        "train_hours": [0.0, round(cut * hours, 3)],
        "replay_hours": [round(cut * hours, 3), round(panel.steps * hours, 3)],
        "interval_steps": args.interval,
        "quantile": args.quantile,
        "scale": args.scale,
        "gpu_memory_gib": args.gpu_memory_gib,
        "pods": len(panel.entities),
        "decisions": int(origins.size),
        "rolling": len(groups),
        "blocks": [
            {
                "train_hours": [0.0, round(int(group[0]) * hours, 3)],
                "replay_hours": [
                    round(int(group[0]) * hours, 3),
                    round(min(int(group[-1]) + args.interval, panel.steps) * hours, 3),
                ],
                "decisions": int(group.size),
            }
            for group in groups
        ],
        "train_seconds": train_seconds,
        "data": source,
    }
    if notes:
        document["notes"] = notes
    if sweep:
        document["quantile_sweep"] = sweep
    if args.format == "json":
        print(json_line(document))
        return 0
    print(
        f"{source}: {len(panel.entities)} pods, {panel.step_s:g} s steps; forecasters train on "
        f"hours 0–{cut * hours:.2f}, the replay is hours {cut * hours:.2f}–"
        f"{panel.steps * hours:.2f} ({origins.size} re-packings every {args.interval} steps); "
        f"GPUs of 100 % duty and {args.gpu_memory_gib:g} GiB; q = {args.quantile:g}"
    )
    if len(groups) > 1:
        starts = ", ".join(f"{int(group[0]) * hours:.2f}" for group in groups)
        print(f"rolling: each forecaster retrained on all hours before each block ({starts} h)")
    rows = [
        [
            name,
            p["gpu_hours"],
            p["overload_minutes"],
            p["migrations_per_pod_hour"],
            p["distance_to_oracle"],
            train_seconds.get(name),
        ]
        for name, p in policies.items()
    ]
    print(
        format_table(
            ["policy", "GPU-hours", "overload min", "migrations/pod-h", "to oracle", "train s"],
            rows,
            digits=3,
        )
    )
    if sweep:
        print("\nThe same trained forecasters, recalibrated at other quantiles:")
        print(sweep_table(sweep))
    for name, note in notes.items():
        print(f"{name}: {note}")
    return 0


if __name__ == "__main__":
    run_main(main)
