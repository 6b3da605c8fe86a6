"""Forecast-aware placement of GPU-sharing pods against its base policy (FGD), on the
GPU utilisation of the Alibaba GenAI serving trace.

GPU-sharing pods are placed by their requests; the interference they see comes from
their co-tenants' real load. This replays that: serving pods arrive as a Poisson
process over the trace's 16 hours and live an exponential time (mean ``--lifetime``
steps of 57 s). Each takes the GPU duty cycle of a trace pod alive at its arrival,
replayed in step with the trace (so co-tenants' bursts stay as correlated as they
were), and a request drawn from openb's GPU-sharing pods. The cluster is ``--nodes``
nodes of 8 GPUs; the arrival rate keeps its requested GPU at about ``--load``.

Each arrival is placed by ``kubesage.core.policy.forecast_aware.ForecastAwarePolicy``
over FGD at weights 0 (FGD alone: requests only) to 1, reading a forecast of each
GPU's utilisation — the sum of its pods' duty cycles, what dcgm-exporter reports — made
three ways: ``last`` (the last step: the control loop's cold start), ``mean15`` (the
mean of the last 15 steps) and ``oracle`` (the true mean of the next 15 steps: the
ceiling a forecaster could reach).

``--learned stgcn,lstm`` adds trained forecasters: each is trained (``--epochs``,
``--seed``) on the steps before ``--train-until`` to forecast 15 steps, and forecasts
each pod's mean duty over the next 15 steps from the steps before every arrival — the
loop's ``--forecast-model`` in place. ``stgcn-q0.95`` is the ST-GCN's upper 0.95
quantile instead, as ``forecast train --quantile 0.95`` saves it (trained on the
first 80 % of those steps, split-conformal offsets from the rest). Then every
variant, FGD alone included, replays only the steps after ``--train-until``, which no
forecaster saw; the JSON adds ``learned``, ``replay_steps`` ([first, end)) and
``train_seconds``.

Reported, as medians over ``--seeds`` seeds (arrivals, profiles, requests):
``contended`` — the share of running pod-steps spent on a GPU whose pods' duty cycles
add up to more than 100 % (the pod is slowed); ``overload`` — Σ max(0, load − 100 %) /
Σ load over GPU-steps; ``rejected`` — arrivals no node could take (placement quality
must not be bought with capacity). JSON keys: ``variants`` → ``"<forecast>@<weight>"``
→ {``contended``, ``overload``, ``rejected``}, plus ``baseline`` (FGD alone) and the
run's settings.

    python benchmarks/forecast_placement.py [--data-dir DIR] [--nodes 4] [--load 0.8]
        [--lifetime 120] [--seeds 5] [--weights 0.25,0.5,1]
        [--learned stgcn,lstm,stgcn-q0.95 --train-until +10h --epochs 30 --seed 0]
        [--tiny] [--format table|json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _common import (
    find_trace,
    format_table,
    json_line,
    parse_args,
    positive_float,
    positive_int,
    replay_start,
    run_main,
)

from kubesage.core.arrays import FloatArray
from kubesage.core.errors import InputError
from kubesage.core.forecast.forecaster import make_forecaster
from kubesage.core.forecast.panel import MetricPanel, read_panel
from kubesage.core.forecast.quantile import QuantileForecaster
from kubesage.core.forecast.synthetic import write_synthetic_metrics
from kubesage.core.forecast.training import TrainConfig
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.policy.forecast_aware import ForecastAwarePolicy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.traces.synthetic import synthetic_workload
from kubesage.core.types import NodeSpec, PodRequest

DUTY = "gpu_duty_cycle"
GPUS_PER_NODE = 8
WINDOW = 15
FORECASTS = ("last", "mean15", "oracle")
LEARNED = ("stgcn", "lstm")
TINY = {
    "seeds": 1,
    "steps": 160,
    "weights": "0.5",
    "learned": "stgcn,stgcn-q0.9",
    "train_until": "+100m",
    "epochs": 1,
}


@dataclass
class Running:
    request: PodRequest
    profile: int
    until: int
    node: int
    gpu: int


@dataclass
class Outcome:
    contended: float
    overload: float
    rejected: int
    arrivals: int


def duty_matrix(panel: MetricPanel) -> tuple[FloatArray, np.ndarray]:
    """Duty cycle ``[steps, pods]`` in percent (0 where no sample) and ``alive``."""
    if DUTY not in panel.metrics:
        raise SystemExit(f"the panel has no '{DUTY}' metric: {', '.join(panel.metrics)}")
    m = panel.metrics.index(DUTY)
    duty = np.where(panel.mask[:, :, m], panel.values[:, :, m], 0.0)
    return np.clip(duty, 0.0, 100.0), panel.alive


def gpu_loads(running: list[Running], duty: FloatArray, steps: slice, num_nodes: int) -> FloatArray:
    """Per node and GPU, the mean over ``steps`` of the sum of its pods' duty (fraction)."""
    window = duty[steps]
    per_pod = window.mean(axis=0) if window.shape[0] else np.zeros(duty.shape[1])
    return loads_of(running, per_pod, num_nodes)


def loads_of(running: list[Running], per_pod: FloatArray, num_nodes: int) -> FloatArray:
    """Per node and GPU, the sum of its pods' duty (``per_pod`` in percent) as a fraction."""
    table = np.zeros((num_nodes, GPUS_PER_NODE))
    for pod in running:
        table[pod.node, pod.gpu] += float(per_pod[pod.profile]) / 100.0
    return table


def learned_forecasts(
    panel: MetricPanel, cut: int, name: str, config: TrainConfig
) -> tuple[FloatArray, float]:
    """``[steps, pods]``: from each step ``s`` at or after ``cut``, the forecaster's mean
    duty (percent) over the next WINDOW steps, made from the steps before ``s`` (NaN
    before ``cut``); trained on the steps before ``cut``. Also the training seconds.
    ``<model>-q<Q>`` is that model's upper ``Q`` quantile (``forecast train --quantile``:
    trained on the first 80 % of those steps, calibrated on the rest)."""
    model, _, level = name.partition("-q")
    point = make_forecaster(model, config=config, horizon=WINDOW)
    forecaster = QuantileForecaster(point, quantile=float(level)) if level else point
    started = time.perf_counter()
    try:
        forecaster.fit(panel, cut)
    except InputError as exc:
        raise SystemExit(f"{name}: {exc}") from None
    seconds = time.perf_counter() - started
    assert point.normaliser is not None
    predicted = np.full((panel.steps, len(panel.entities)), np.nan)
    origins = np.arange(max(cut, point.history), panel.steps)
    m = panel.metrics.index(DUTY)
    for chunk in np.array_split(origins, max(1, origins.size // 64)) if origins.size else []:
        windows = point.windows_at(panel, chunk)
        mean = forecaster.forecast_windows(windows)[:, :, :, m].mean(axis=1)
        predicted[chunk] = np.clip(mean, 0.0, 100.0)
    return predicted, seconds


def run(
    duty: FloatArray,
    alive: np.ndarray,
    *,
    nodes: int,
    load: float,
    lifetime: int,
    seed: int,
    forecast: str,
    weight: float,
    sharing: list[PodRequest],
    fgd_workload: list[PodRequest],
    start: int = 1,
    learned: FloatArray | None = None,
) -> Outcome:
    """One replay from step ``start``; ``learned`` holds the forecasts of a trained
    forecaster (``forecast`` is then its name; see :func:`learned_forecasts`)."""
    steps = duty.shape[0]
    rng = np.random.default_rng(seed)
    mean_milli = statistics.fmean(p.gpu_milli for p in sharing)
    concurrent = load * nodes * GPUS_PER_NODE * 1000 / mean_milli
    rate = concurrent / lifetime
    specs = [
        NodeSpec(
            name=f"node-{i}",
            cpu_milli=128_000,
            memory_mib=1_048_576,
            gpu_count=GPUS_PER_NODE,
            gpu_model="A10",
        )
        for i in range(nodes)
    ]
    state = ClusterState(specs)
    table: list[FloatArray] = [np.zeros((nodes, GPUS_PER_NODE))]
    base = make_policy("fgd", PolicyContext(seed=seed, workload=tuple(fgd_workload)))
    policy = ForecastAwarePolicy(base, lambda _state: table[0], weight)
    running: list[Running] = []
    contended = pod_steps = 0
    overload = total = 0.0
    rejected = arrivals = 0
    for step in range(max(1, start), steps):
        for pod in [p for p in running if p.until <= step]:
            running.remove(pod)
            state.release(pod.request, state.placement(pod.node, (pod.gpu,), pod.request))
        live = np.flatnonzero(alive[step])
        for _ in range(int(rng.poisson(rate))):
            arrivals += 1
            if live.size == 0:
                rejected += 1
                continue
            template = sharing[int(rng.integers(len(sharing)))]
            request = template.model_copy(update={"name": f"serve-{arrivals}"})
            if learned is not None:
                table[0] = loads_of(running, learned[step], nodes)
            else:
                if forecast == "last":
                    window = slice(step - 1, step)
                elif forecast == "mean15":
                    window = slice(max(0, step - WINDOW), step)
                else:
                    window = slice(step, min(steps, step + WINDOW))
                table[0] = gpu_loads(running, duty, window, nodes)
            decision = policy.decide(state, request)
            if decision.placement is None:
                rejected += 1
                continue
            state.allocate(request, decision.placement)
            (gpu,) = decision.placement.gpu_indices
            running.append(
                Running(
                    request,
                    int(rng.choice(live)),
                    step + max(1, int(rng.exponential(lifetime))),
                    decision.placement.node_index,
                    gpu,
                )
            )
        now = gpu_loads(running, duty, slice(step, step + 1), nodes)
        for pod in running:
            if now[pod.node, pod.gpu] > 1.0:
                contended += 1
        pod_steps += len(running)
        overload += float(np.clip(now - 1.0, 0.0, None).sum())
        total += float(now.sum())
    return Outcome(
        contended=contended / max(1, pod_steps),
        overload=overload / max(total, 1e-9),
        rejected=rejected,
        arrivals=arrivals,
    )


def learned_list(text: str) -> tuple[str, ...]:
    """``--learned``: comma-separated names of trained forecasters, each a model or its
    upper quantile (``stgcn-q0.95``)."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names or not all(_learned_name(n) for n in names):
        raise argparse.ArgumentTypeError(
            f"expected some of {', '.join(LEARNED)}, each alone or as <model>-q<quantile> "
            f"(stgcn-q0.95); got {text!r}"
        )
    return names


def _learned_name(name: str) -> bool:
    model, dash, level = name.partition("-q")
    if model not in LEARNED:
        return False
    if not dash:
        return True
    try:
        return 0.0 < float(level) < 1.0
    except ValueError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--lifetime", type=int, default=120, help="Mean lifetime, in steps.")
    parser.add_argument("--seeds", type=positive_int, default=5)
    parser.add_argument("--steps", type=int, default=0, help="Replay only the first N steps.")
    parser.add_argument("--weights", default="0.25,0.5,1")
    parser.add_argument(
        "--learned",
        type=learned_list,
        default=(),
        metavar="NAMES",
        help=f"Trained forecasters to add (some of {', '.join(LEARNED)}); the replay then "
        "starts at --train-until.",
    )
    parser.add_argument("--train-until", default="+10h", help="+DURATION after the first step.")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0, help="Training seed.")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    try:
        weights = [positive_float(w) for w in args.weights.split(",") if w]
    except argparse.ArgumentTypeError as exc:
        parser.error(f"--weights: {exc}")
    if not weights:
        parser.error("--weights names no weight")
    found = find_trace(args.data_dir, "genai")
    if found is not None:
        data = found
    else:
        print("no GenAI trace found; using synthetic metrics", file=sys.stderr)
        data = write_synthetic_metrics(
            Path(tempfile.mkdtemp(prefix="kubesage-genai-")), entities=60, steps=600
        )
    panel = read_panel(data)
    if 0 < args.steps < panel.steps:
        panel = panel.head(args.steps)
    duty, alive = duty_matrix(panel)
    start, learned, train_seconds = 1, {}, {}
    if args.learned:
        start = replay_start(panel, args.train_until)
        config = TrainConfig(epochs=args.epochs, seed=args.seed)
        for name in args.learned:
            print(f"training {name} on the {start} steps before the replay", file=sys.stderr)
            learned[name], seconds = learned_forecasts(panel, start, name, config)
            train_seconds[name] = round(seconds, 1)
    workload = synthetic_workload(4000, seed=0)
    sharing = [p for p in workload if p.is_gpu_sharing and not p.gpu_models]
    print(
        f"{duty.shape[1]} trace pods, {duty.shape[0]} steps; {len(sharing)} sharing requests "
        f"(mean {statistics.fmean(p.gpu_milli for p in sharing):.0f} milli-GPU)",
        file=sys.stderr,
    )

    def median_of(forecast: str, weight: float) -> dict[str, float]:
        outcomes = []
        for seed in range(args.seeds):
            print(f"{forecast}@{weight:g} seed {seed}", file=sys.stderr, flush=True)
            outcomes.append(
                run(
                    duty,
                    alive,
                    nodes=args.nodes,
                    load=args.load,
                    lifetime=args.lifetime,
                    seed=seed,
                    forecast=forecast,
                    weight=weight,
                    sharing=sharing,
                    fgd_workload=workload,
                    start=start,
                    learned=learned.get(forecast),
                )
            )
        return {
            "contended": statistics.median(o.contended for o in outcomes),
            "overload": statistics.median(o.overload for o in outcomes),
            "rejected": statistics.median(o.rejected for o in outcomes),
            "arrivals": statistics.median(o.arrivals for o in outcomes),
        }

    baseline = median_of("last", 0.0)
    names = (*FORECASTS, *args.learned)
    variants = {f"{f}@{w:g}": median_of(f, w) for f in names for w in weights}
    document = {
        "baseline": baseline,
        "variants": variants,
        "nodes": args.nodes,
        "load": args.load,
        "lifetime_steps": args.lifetime,
        "seeds": args.seeds,
    }
    if args.learned:
        document |= {
            "learned": list(args.learned),
            "replay_steps": [start, panel.steps],
            "train_seconds": train_seconds,
        }
    if args.format == "json":
        print(json_line(document))
        return 0
    rows = [["fgd (requests only)", *_cells(baseline, baseline)]]
    rows += [[name, *_cells(v, baseline)] for name, v in variants.items()]
    replayed = f"steps {start}–{panel.steps} (after training)" if args.learned else "all steps"
    print(
        f"{args.nodes} nodes × {GPUS_PER_NODE} GPUs at ~{args.load:.0%} requested GPU, "
        f"mean lifetime {args.lifetime} steps; {replayed}; medians of {args.seeds} seeds"
    )
    print(
        format_table(
            ["placement", "contended %", "vs fgd", "overload %", "rejected", "arrivals"],
            rows,
            digits=3,
        )
    )
    return 0


def _cells(v: dict[str, float], base: dict[str, float]) -> list[object]:
    ratio = v["contended"] / base["contended"] if base["contended"] else float("nan")
    return [
        100 * v["contended"],
        f"{ratio:.2f}×",
        100 * v["overload"],
        v["rejected"],
        v["arrivals"],
    ]


if __name__ == "__main__":
    run_main(main)
