"""Defragmentation on and off: how often whole-GPU tasks find room, and what it costs.

The openb ``default`` trace under the FGD protocol (seeds 42–44), placed by FGD. A
whole-GPU task (one or more full GPUs) that arrives while requests are below
100 % of GPU capacity counts as schedulable if it is placed; with
defragmentation on, a task that does not fit may move up to 8 running pods
(best-effort first, never Guaranteed ones) to make room. Printed: large-task
schedulability with and without, and pods migrated as a share of pods placed.

(The trace's own creation/deletion times keep under 1 % of GPU capacity busy at
any moment, so a time replay never needs defragmentation; the arrivals-only
protocol is where fragmentation bites.)

    python benchmarks/defrag.py [--data-dir DIR] [--seeds 42-44] [--format table|json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from _common import format_table, shared_data_dir

from kubesage.adapters.gpu_training.defrag import Defragmenter
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.sim.engine import Simulator
from kubesage.core.sim.protocol import fgd_arrivals
from kubesage.core.sim.settings import parse_seeds
from kubesage.core.state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure, typical_pods
from kubesage.core.traces import read_nodes, read_pods


def run(nodes, pods, seed: int, defrag: bool) -> dict[str, float]:  # type: ignore[no-untyped-def]
    capacity = ClusterState(nodes).gpu_capacity_milli_total
    arrivals = fgd_arrivals(pods, gpu_capacity_milli=capacity, seed=seed)
    typical = typical_pods(pods)
    policy = make_policy("fgd", PolicyContext(seed=seed, workload=pods))
    simulator = Simulator(
        nodes,
        policy,
        lambda state: FragmentationMeasure(typical, state.gpu_models),
        defragmenter=Defragmenter(policy) if defrag else None,
    )
    simulator.run_arrivals(arrivals)
    requested = np.cumsum([p.total_gpu_milli for p in arrivals])
    failed = {d.request for d in simulator.failed}
    large = [
        p
        for p, before in zip(arrivals, requested, strict=True)
        if p.num_gpu and not p.is_gpu_sharing and before <= capacity
    ]
    placed = sum(p.name not in failed for p in large)
    pods_placed = len(arrivals) - len(failed)
    return {
        "large_task_schedulable_pct": 100.0 * placed / len(large),
        "pods_migrated_pct": 100.0 * simulator.migrations / pods_placed,
        "large_tasks": float(len(large)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parser.parse_args()
    openb = shared_data_dir(args.data_dir) / "openb"
    nodes = read_nodes(openb / "openb_node_list_gpu_node.csv")
    pods = read_pods(openb / "openb_pod_list_default.csv")
    document: dict[str, dict[str, float]] = {}
    for label, defrag in (("without", False), ("with", True)):
        runs = [run(nodes, pods, seed, defrag) for seed in parse_seeds(args.seeds)]
        document[label] = {key: round(statistics.fmean(r[key] for r in runs), 2) for key in runs[0]}
    if args.format == "json":
        print(
            json.dumps(
                {
                    "large_task_schedulable_pct": {
                        k: v["large_task_schedulable_pct"] for k, v in document.items()
                    },
                    "pods_migrated_pct": document["with"]["pods_migrated_pct"],
                }
            )
        )
        return 0
    print(f"openb default, FGD protocol, FGD policy, seeds {args.seeds} (means)")
    print(
        format_table(
            ["defragmentation", "whole-GPU tasks schedulable %", "pods migrated %", "large tasks"],
            [
                [k, v["large_task_schedulable_pct"], v["pods_migrated_pct"], v["large_tasks"]]
                for k, v in document.items()
            ],
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
