"""Defragmentation off, on demand, and on demand plus background compaction.

Three scenarios, FGD placing, seeds 42–44 (medians):

- ``openb_replay``: the openb ``default`` trace in time replay, arrivals
  compressed (gaps divided, durations kept) until the peak GPU demand reaches
  ``--peak-load`` × capacity; the trace as recorded asks for under 15 % at its
  busiest, so an uncompressed replay never meets contention. Large tasks: pods
  taking whole GPUs (one or more).
- ``mig_mix``: 32 nodes × 8 H100-80GB in MIG mode and 4,000 drawn MIG requests
  (profile mix in ``adapters/gpu_training/mig_workload.py``), compressed to
  ``--mig-peak-load``. Large tasks: 7g.80gb requests.
- ``openb_fgd_protocol``: the FGD paper's protocol (arrivals only, 130 % of
  capacity); large tasks are whole-GPU pods arriving while requests are under
  100 % of capacity.

A large request that does not fit may move up to 8 running pods (best-effort
first, never Guaranteed ones); compaction empties partly used GPUs every 5 min,
at most 4 pods a round, while under 5 % of GPUs are empty. Printed: large-task
schedulability and pods migrated as a share of the pods placed.

JSON: ``{"large_task_schedulable_pct": {"without", "with", "with_compaction"},
"pods_migrated_pct", "compression_factor", "scenarios": {"<scenario>": {"<mode>":
{"large_task_schedulable_pct", "pods_migrated_pct", "large_tasks"}}}}`` (the
headline figures are the openb replay's). ``--tiny``: one seed, the first 100 openb
nodes and 1,000 pods, 4 MIG nodes and 200 MIG requests (figures meaningless).

    python benchmarks/defrag.py [--data-dir DIR] [--seeds 42-44] [--peak-load 0.95]
                                [--mig-peak-load 1.0] [--node-limit N] [--pod-limit N]
                                [--mig-nodes 32] [--mig-requests 4000] [--tiny]
                                [--format table|json]
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from _common import format_table, json_line, parse_args, run_main, trace_dir

from kubesage.adapters.gpu_training.compaction import Compactor
from kubesage.adapters.gpu_training.defrag import Defragmenter
from kubesage.adapters.gpu_training.mig_workload import mig_cluster, mig_workload
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.sim.compression import compress_to_peak_load
from kubesage.core.sim.engine import Simulator
from kubesage.core.sim.protocol import fgd_arrivals
from kubesage.core.sim.settings import parse_seeds
from kubesage.core.state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure, typical_pods
from kubesage.core.traces import read_nodes, read_pods
from kubesage.core.types import NodeSpec, PodRequest

MODES = ("off", "on_demand", "with_compaction")
COMPACTION_INTERVAL_S = 300.0
TINY = {"seeds": "42", "node_limit": 100, "pod_limit": 1_000, "mig_nodes": 4, "mig_requests": 200}

IsLarge = Callable[[PodRequest, float], bool]
"""Whether a pod counts as a large task, given the GPU requested before it arrived."""


def simulate(
    nodes: Sequence[NodeSpec],
    pods: Sequence[PodRequest],
    seed: int,
    mode: str,
    replay: bool,
    is_large: IsLarge,
) -> dict[str, float]:
    typical = typical_pods(pods)
    policy = make_policy("fgd", PolicyContext(seed=seed, workload=pods))
    simulator = Simulator(
        nodes,
        policy,
        lambda state: FragmentationMeasure(typical, state.gpu_models),
        defragmenter=Defragmenter(policy) if mode != "off" else None,
        compactor=(
            Compactor(policy, interval_s=COMPACTION_INTERVAL_S)
            if mode == "with_compaction"
            else None
        ),
    )
    if replay:
        simulator.run_replay(pods)
    else:
        simulator.run_arrivals(pods)
    failed = {d.request for d in simulator.failed}
    requested_before = np.cumsum([0, *(p.total_gpu_milli for p in pods)])[:-1]
    large = [p for p, before in zip(pods, requested_before, strict=True) if is_large(p, before)]
    placed = len(pods) - len(failed)
    return {  # nan (null in JSON): no large task, or nothing placed, to take a share of
        "large_task_schedulable_pct": (
            100.0 * sum(p.name not in failed for p in large) / len(large) if large else math.nan
        ),
        "pods_migrated_pct": 100.0 * simulator.migrations / placed if placed else math.nan,
        "large_tasks": float(len(large)),
    }


def scenario(
    runs: Callable[[int, str], dict[str, float]], seeds: list[int]
) -> dict[str, dict[str, float]]:
    """Median over the seeds that measured it, per mode (nan when none did)."""
    document = {}
    for mode in MODES:
        results = [runs(seed, mode) for seed in seeds]
        document[mode] = {key: _median([r[key] for r in results]) for key in results[0]}
    return document


def _median(values: list[float]) -> float:
    """The median of the measured (finite) values: a nan would make it depend on order."""
    measured = [value for value in values if math.isfinite(value)]
    return round(statistics.median(measured), 2) if measured else math.nan


def whole_gpu(pod: PodRequest, _: float) -> bool:
    return pod.num_gpu > 0 and not pod.is_gpu_sharing and pod.mig is None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--peak-load", type=float, default=0.95)
    parser.add_argument("--mig-peak-load", type=float, default=1.0)
    parser.add_argument("--node-limit", type=int, default=0, help="First N openb nodes (0: all).")
    parser.add_argument("--pod-limit", type=int, default=0, help="First N openb pods (0: all).")
    parser.add_argument("--mig-nodes", type=int, default=32, help="Nodes of the MIG cluster.")
    parser.add_argument("--mig-requests", type=int, default=4_000, help="Drawn MIG requests.")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    seeds = parse_seeds(args.seeds)
    openb = trace_dir(args.data_dir, "openb")
    nodes = read_nodes(openb / "openb_node_list_gpu_node.csv")
    pods = read_pods(openb / "openb_pod_list_default.csv")
    if args.node_limit:
        nodes = nodes[: args.node_limit]
    if args.pod_limit:
        pods = pods[: args.pod_limit]
    capacity = ClusterState(nodes).gpu_capacity_milli_total
    replayed, factor = compress_to_peak_load(pods, capacity, args.peak_load)

    def fgd_protocol(seed: int, mode: str) -> dict[str, float]:
        arrivals = fgd_arrivals(pods, gpu_capacity_milli=capacity, seed=seed)
        return simulate(
            nodes,
            arrivals,
            seed,
            mode,
            replay=False,
            is_large=lambda p, before: whole_gpu(p, before) and before <= capacity,
        )

    def mig_mix(seed: int, mode: str) -> dict[str, float]:
        cluster = mig_cluster(args.mig_nodes)
        drawn = mig_workload(args.mig_requests, seed=seed)
        mig_capacity = ClusterState(cluster).gpu_capacity_milli_total
        timed, _ = compress_to_peak_load(drawn, mig_capacity, args.mig_peak_load)
        return simulate(
            cluster,
            timed,
            seed,
            mode,
            replay=True,
            is_large=lambda p, _: p.mig is not None and p.mig.profile == "7g.80gb",
        )

    scenarios = {
        "openb_replay": scenario(
            lambda seed, mode: simulate(nodes, replayed, seed, mode, True, whole_gpu), seeds
        ),
        "mig_mix": scenario(mig_mix, seeds),
        "openb_fgd_protocol": scenario(fgd_protocol, seeds),
    }
    replay = scenarios["openb_replay"]
    if args.format == "json":
        print(
            json_line(
                {
                    "large_task_schedulable_pct": {
                        "without": replay["off"]["large_task_schedulable_pct"],
                        "with": replay["on_demand"]["large_task_schedulable_pct"],
                        "with_compaction": replay["with_compaction"]["large_task_schedulable_pct"],
                    },
                    "pods_migrated_pct": replay["on_demand"]["pods_migrated_pct"],
                    "compression_factor": round(factor, 1),
                    "scenarios": scenarios,
                }
            )
        )
        return 0
    print(
        f"FGD placing, seeds {args.seeds} (medians); openb replay compressed ×{factor:,.0f} "
        f"to peak load {args.peak_load}, MIG mix to {args.mig_peak_load}"
    )
    rows = [
        [name, mode, r["large_task_schedulable_pct"], r["pods_migrated_pct"], r["large_tasks"]]
        for name, document in scenarios.items()
        for mode, r in document.items()
    ]
    print(
        format_table(
            ["scenario", "defragmentation", "large schedulable %", "pods migrated %", "large"],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    run_main(main)
