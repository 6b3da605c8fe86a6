"""The learned ppo policy beside FGD: allocation, decision latency, rollout throughput.

- ``alloc_at_130``: mean GPU allocation ratio when 130 % of capacity has arrived,
  FGD protocol, on each shared openb trace (``--traces``; default all), seeds 42–51
  (``--seeds``), for ppo (``--model``, default the shipped
  configs/models/ppo-openb.safetensors) and FGD. The shipped model was trained on
  default, gpushare40 and multigpu20: cpu050 and gpuspec20 are traces it never saw.
- ``latency_ms_p50_10k`` / ``p99``: one ppo decision (candidate selection by FGD,
  features, the network) on a 10,000-node (``--latency-nodes``) synthetic cluster
  about half full.
- ``steps_per_s``: rollout throughput with 1 and 2 Ray workers (each collects
  ``--steps`` decisions; wall time of the slowest), and the ratio.

JSON: ``{"alloc_at_130": {"<trace>": {"ppo", "fgd"}}, "latency_ms_p50_10k",
"latency_ms_p99_10k", "steps_per_s": {"1", "2"}}`` (the keys stay at ``--tiny``,
which runs one trace and seed on the first 100 nodes, 100 nodes for the latency,
and a few rollout steps).

    python benchmarks/ppo.py [--data-dir DIR] [--seeds 42-51] [--traces default,...]
                             [--model FILE] [--tiny] [--format table|json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from _common import format_table, json_line, openb_traces, parse_args, run_main, trace_dir

from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.rl.network import PlacementNetwork
from kubesage.core.rl.persistence import load_network
from kubesage.core.rl.policy import default_model
from kubesage.core.rl.rollout import RolloutWorker
from kubesage.core.rl.training import start_ray, weights_of
from kubesage.core.sim.runner import RunSpec, default_jobs, run_many
from kubesage.core.sim.settings import parse_seeds
from kubesage.core.state import ClusterState
from kubesage.core.traces import read_nodes, read_pods
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from kubesage.core.types import NodeSpec

TINY = {
    "seeds": "42",
    "traces": "default",
    "node_limit": 100,
    "latency_nodes": 100,
    "decisions": 20,
    "steps": 16,
    "jobs": 1,  # in this process: no worker start-up
}
PODS_PER_NODE = 6
"""Synthetic pods drawn per node for the latency run: enough to fill it past half."""
WARMUP_STEPS = 64


def openb_nodes(openb: Path, limit: int) -> list[NodeSpec]:
    """The openb GPU node list, or its first ``limit`` nodes (0: all)."""
    nodes = read_nodes(openb / "openb_node_list_gpu_node.csv")
    return nodes[:limit] if limit else nodes


def allocation(
    openb: Path, traces: list[str], seeds: list[int], model: Path, jobs: int, node_limit: int
) -> dict[str, dict[str, float]]:
    nodes = openb_nodes(openb, node_limit)
    document = {}
    for trace in traces:
        path = openb / f"openb_pod_list_{trace}.csv"
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


def latency(model: Path, num_nodes: int = 10_000, decisions: int = 300) -> tuple[float, float]:
    """Fill a ``num_nodes`` cluster to half with ppo itself (warm caches, as in a running
    scheduler), then time ``decisions`` more."""
    nodes = synthetic_cluster(num_nodes, seed=0)
    pods = synthetic_workload(PODS_PER_NODE * num_nodes, seed=0)
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


def throughput(openb: Path, steps: int, node_limit: int) -> dict[str, float]:
    ray = start_ray(None)
    nodes = openb_nodes(openb, node_limit)
    pods = read_pods(openb / "openb_pod_list_default.csv")
    weights = weights_of(PlacementNetwork())
    actor = ray.remote(num_cpus=1)(RolloutWorker)
    rates = {}
    for workers in (1, 2):
        actors = [
            actor.remote(nodes, [pods], seed, shaping=0.5, tune=1.3) for seed in range(workers)
        ]
        # Warm up: caches, imports.
        ray.get([a.collect.remote(weights, min(WARMUP_STEPS, steps)) for a in actors])
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
    parser.add_argument("--traces", default="", help="Comma-separated openb traces (default all).")
    parser.add_argument("--node-limit", type=int, default=0, help="First N openb nodes (0: all).")
    parser.add_argument("--latency-nodes", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=300, help="Timed ppo decisions.")
    parser.add_argument("--model", type=Path, default=default_model())
    parser.add_argument("--steps", type=int, default=2048)
    parser.add_argument("--jobs", type=int, default=default_jobs())
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    load_network(args.model)  # a bad model is an error here, not a silent FGD run
    openb = trace_dir(args.data_dir, "openb")
    seeds = list(parse_seeds(args.seeds))
    traces = openb_traces(openb, args.traces)
    alloc = allocation(openb, traces, seeds, args.model, args.jobs, args.node_limit)
    print("latency...", file=sys.stderr, flush=True)
    p50, p99 = latency(args.model, args.latency_nodes, args.decisions)
    print("rollout throughput...", file=sys.stderr, flush=True)
    rates = throughput(openb, args.steps, args.node_limit)
    if args.format == "json":
        print(
            json_line(
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
    print(f"\nppo decision at {args.latency_nodes:,} nodes: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    print(
        f"rollout throughput: 1 worker {rates['1']:.0f} steps/s, 2 workers {rates['2']:.0f} "
        f"steps/s ({rates['2'] / rates['1']:.2f}×)"
    )
    return 0


if __name__ == "__main__":
    run_main(main)
