"""The learned ppo policy beside FGD: allocation, decision latency, rollout throughput.

- ``alloc_at_130``: mean GPU allocation ratio when 130 % of capacity has arrived,
  FGD protocol, on each shared openb trace, seeds 42–51 (``--seeds``), for ppo
  (``--model``, default the shipped configs/models/ppo-openb.safetensors) and FGD.
  The shipped model was trained on default, gpushare40 and multigpu20: cpu050 and
  gpuspec20 are traces it never saw.
- ``latency_ms_p50_10k`` / ``p99``: one ppo decision (candidate selection by FGD,
  features, the network) on a 10,000-node synthetic cluster about half full.
- ``steps_per_s``: rollout throughput with 1 and 2 Ray workers (each collects
  ``--steps`` decisions; wall time of the slowest), and the ratio.

    python benchmarks/ppo.py [--data-dir DIR] [--seeds 42-51] [--model FILE] [--format table|json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from _common import format_table, shared_data_dir

from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.rl.network import PlacementNetwork
from kubesage.core.rl.persistence import load_network
from kubesage.core.rl.policy import DEFAULT_MODEL
from kubesage.core.rl.rollout import RolloutWorker
from kubesage.core.rl.training import start_ray, weights_of
from kubesage.core.sim.runner import RunSpec, default_jobs, run_many
from kubesage.core.sim.settings import parse_seeds
from kubesage.core.state import ClusterState
from kubesage.core.traces import read_nodes, read_pods
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload


def allocation(
    openb: Path, seeds: list[int], model: Path, jobs: int
) -> dict[str, dict[str, float]]:
    nodes = read_nodes(openb / "openb_node_list_gpu_node.csv")
    document = {}
    for path in sorted(openb.glob("openb_pod_list_*.csv")):
        trace = path.stem.removeprefix("openb_pod_list_")
        print(f"{trace}: {2 * len(seeds)} runs...", file=sys.stderr, flush=True)
        pods = read_pods(path)
        specs = [RunSpec(p, seed, model=model) for p in ("ppo", "fgd") for seed in seeds]
        results = run_many(specs, nodes, pods, jobs=jobs)
        document[trace] = {
            policy: round(
                statistics.fmean(
                    r.alloc_at_130
                    for r in results
                    if r.policy == policy and r.alloc_at_130 is not None
                ),
                2,
            )
            for policy in ("ppo", "fgd")
        }
    return document


def latency(model: Path, decisions: int = 300) -> tuple[float, float]:
    """Fill a 10,000-node cluster to half with ppo itself (warm caches, as in a running
    scheduler), then time ``decisions`` more."""
    nodes = synthetic_cluster(10_000, seed=0)
    pods = synthetic_workload(60_000, seed=0)
    state = ClusterState(nodes)
    policy = make_policy("ppo", PolicyContext(seed=0, workload=pods, model=model))
    half = state.gpu_capacity_milli_total // 2
    times = []
    for pod in pods:
        measuring = state.gpu_allocated_milli_total >= half
        started = time.perf_counter()
        decision = policy.decide(state, pod)
        if measuring:
            times.append((time.perf_counter() - started) * 1000)
            if len(times) == decisions:
                break
        if decision.placement is not None:
            state.allocate(pod, decision.placement)
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def throughput(openb: Path, steps: int) -> dict[str, float]:
    ray = start_ray(None)
    nodes = read_nodes(openb / "openb_node_list_gpu_node.csv")
    pods = read_pods(openb / "openb_pod_list_default.csv")
    weights = weights_of(PlacementNetwork())
    actor = ray.remote(num_cpus=1)(RolloutWorker)
    rates = {}
    for workers in (1, 2):
        actors = [
            actor.remote(nodes, [pods], seed, shaping=0.5, tune=1.3) for seed in range(workers)
        ]
        ray.get([a.collect.remote(weights, 64) for a in actors])  # warm up: caches, imports
        started = time.perf_counter()
        ray.get([a.collect.remote(weights, steps) for a in actors])
        rates[str(workers)] = round(workers * steps / (time.perf_counter() - started), 1)
        for a in actors:
            ray.kill(a)
    ray.shutdown()
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--steps", type=int, default=2048)
    parser.add_argument("--jobs", type=int, default=default_jobs())
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parser.parse_args()
    load_network(args.model)  # a bad model is an error here, not a silent FGD run
    openb = shared_data_dir(args.data_dir) / "openb"
    seeds = list(parse_seeds(args.seeds))
    alloc = allocation(openb, seeds, args.model, args.jobs)
    p50, p99 = latency(args.model)
    rates = throughput(openb, args.steps)
    if args.format == "json":
        print(
            json.dumps(
                {
                    "alloc_at_130": alloc,
                    "latency_ms_p50_10k": round(p50, 3),
                    "latency_ms_p99_10k": round(p99, 3),
                    "steps_per_s": rates,
                }
            )
        )
        return 0
    print(f"GPU allocation at 130 % arrived (%), mean over seeds {args.seeds}")
    rows = [[t, v["ppo"], v["fgd"], v["ppo"] - v["fgd"]] for t, v in alloc.items()]
    rows.append(
        [
            "mean",
            statistics.fmean(v["ppo"] for v in alloc.values()),
            statistics.fmean(v["fgd"] for v in alloc.values()),
            statistics.fmean(v["ppo"] - v["fgd"] for v in alloc.values()),
        ]
    )
    print(format_table(["trace", "ppo", "fgd", "ppo − fgd"], rows))
    print(f"\nppo decision at 10,000 nodes: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    print(
        f"rollout throughput: 1 worker {rates['1']:.0f} steps/s, 2 workers {rates['2']:.0f} "
        f"steps/s ({rates['2'] / rates['1']:.2f}×)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
