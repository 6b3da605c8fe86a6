"""Placements per second for every policy, on one core, at openb size and at 10,000 nodes.

A placement is one arrival under the FGD protocol: the policy's decision (fit check,
scores over every node, GPU choice) plus applying it to the ClusterState. Each
measurement replays a prefix of the protocol's arrival sequence from an empty
cluster — FGD's per-shape score cache starts cold, so its first placements pay
for full-cluster scoring and are counted. The figure is the median over repeats.

Targets (issue): FGD ≥ 200 placements/s and the simple heuristics ≥ 2,000/s at
10,000 nodes.

JSON: ``{"placements_per_s": {"openb-1213": {"<policy>"}, "synthetic-10000":
{"<policy>"}}, "repeats", "arrivals"}`` (the synthetic cluster's key names its size).
``--tiny``: 50 arrivals, one repeat, a 1,000-node synthetic cluster.

    python benchmarks/placement_speed.py [--repeats 3] [--arrivals 20000]
                                         [--synthetic-nodes 10000] [--tiny] [--format table|json]
"""

from __future__ import annotations

import os

# One core: pin the process and keep BLAS single-threaded before numpy loads.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from _common import format_table, json_line, parse_args, run_main, trace_dir  # noqa: E402

from kubesage.core.policy import PolicyContext, make_policy, policy_names  # noqa: E402
from kubesage.core.sim.protocol import fgd_arrivals  # noqa: E402
from kubesage.core.state import ClusterState  # noqa: E402
from kubesage.core.traces import read_nodes, read_pods  # noqa: E402
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload  # noqa: E402
from kubesage.core.types import NodeSpec, PodRequest  # noqa: E402

TARGETS_10K = {"fgd": 200.0}
DEFAULT_TARGET_10K = 2_000.0
TINY = {"repeats": 1, "arrivals": 50, "synthetic_nodes": 1_000}


def placements_per_second(
    policy_name: str,
    nodes: Sequence[NodeSpec],
    workload: Sequence[PodRequest],
    arrivals: int,
    seed: int,
) -> float:
    state = ClusterState(nodes)
    sequence = fgd_arrivals(workload, gpu_capacity_milli=state.gpu_capacity_milli_total, seed=seed)
    sequence = sequence[:arrivals]
    policy = make_policy(policy_name, PolicyContext(seed=seed, workload=workload))
    started = time.perf_counter()
    for request in sequence:
        decision = policy.decide(state, request)
        if decision.placement is not None:
            state.allocate(request, decision.placement)
    return len(sequence) / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--arrivals", type=int, default=20_000)
    parser.add_argument("--synthetic-nodes", type=int, default=10_000)
    parser.add_argument("--policy", action="append")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    synthetic = f"synthetic-{args.synthetic_nodes}"
    openb = trace_dir(args.data_dir, "openb")
    clusters = {
        "openb-1213": (
            read_nodes(openb / "openb_node_list_gpu_node.csv"),
            read_pods(openb / "openb_pod_list_default.csv"),
        ),
        synthetic: (
            synthetic_cluster(args.synthetic_nodes, seed=0),
            synthetic_workload(8_152, seed=0),
        ),
    }
    names = args.policy or policy_names()
    results: dict[str, dict[str, float]] = {}
    for cluster_name, (nodes, workload) in clusters.items():
        results[cluster_name] = {}
        for name in names:
            rates = [
                placements_per_second(name, nodes, workload, args.arrivals, seed=42 + repeat)
                for repeat in range(args.repeats)
            ]
            results[cluster_name][name] = statistics.median(rates)
            print(
                f"{cluster_name} {name}: {results[cluster_name][name]:.0f}/s",
                file=sys.stderr,
                flush=True,
            )
    if args.format == "json":
        print(
            json_line(
                {"placements_per_s": results, "repeats": args.repeats, "arrivals": args.arrivals}
            )
        )
        return 0
    rows = []
    for name in names:
        target = TARGETS_10K.get(name, DEFAULT_TARGET_10K)
        at_10k = results[synthetic][name]
        rows.append(
            [
                name,
                round(results["openb-1213"][name]),
                round(at_10k),
                round(target),
                f"{at_10k / target:.1f}x",
            ]
        )
    print(
        f"Placements per second on one core (median of {args.repeats}; first {args.arrivals:,} "
        "arrivals of the FGD protocol from an empty cluster)"
    )
    print(
        format_table(
            [
                "policy",
                "openb 1,213 nodes",
                f"{args.synthetic_nodes:,} nodes",
                "target @10k",
                "vs target",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    run_main(main)
