"""Reproduce the FGD paper's allocation ratios on the shared openb traces.

Runs the six published policies on every shared pod list with seeds 42–51 under the
paper's protocol (requests inflated to 130 % of GPU capacity, arrivals only) and
prints our mean GPU allocation ratio at 100 % and 130 % arrived workload beside
the published means (``published_allocation_ratio.csv``), with the difference.

JSON: ``{"seeds": [...], "traces": {"<trace>": {"<policy>": {"ours_at_100",
"ours_at_130", "published_at_100", "published_at_130", "delta_at_130"}}}}``.
``--tiny`` runs one trace and seed on the first 100 nodes (figures meaningless).

    python benchmarks/fgd_reproduction.py [--data-dir DIR] [--seeds 42-51] [--jobs N]
                                          [--traces default,cpu050,...] [--node-limit N]
                                          [--tiny] [--format table|json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from _common import (
    PUBLISHED_NAMES,
    format_table,
    json_line,
    openb_traces,
    parse_args,
    published_allocation,
    run_main,
    trace_dir,
)

from kubesage.core.policy import PAPER_POLICIES
from kubesage.core.sim.runner import RunSpec, default_jobs, run_many
from kubesage.core.sim.settings import parse_seeds
from kubesage.core.traces import read_nodes, read_pods

TINY = {"seeds": "42", "traces": "default", "node_limit": 100}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=default_jobs())
    parser.add_argument("--traces", default="")
    parser.add_argument("--node-limit", type=int, default=0, help="First N nodes (0: all).")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    openb = trace_dir(args.data_dir, "openb")
    seeds = parse_seeds(args.seeds)
    traces = openb_traces(openb, args.traces)
    reference = published_allocation(openb)
    nodes = read_nodes(openb / "openb_node_list_gpu_node.csv")
    if args.node_limit:
        nodes = nodes[: args.node_limit]
    rows = []
    document: dict[str, dict[str, dict[str, float | None]]] = {}
    started = time.perf_counter()
    for trace in traces:
        pods = read_pods(openb / f"openb_pod_list_{trace}.csv")
        specs = [RunSpec(policy, seed) for policy in PAPER_POLICIES for seed in seeds]
        print(
            f"{trace}: {len(specs)} runs on {args.jobs} worker(s)...", file=sys.stderr, flush=True
        )
        results = run_many(specs, nodes, pods, jobs=args.jobs)
        document[trace] = {}
        for policy in PAPER_POLICIES:
            mine = [r for r in results if r.policy == policy]
            at_100 = statistics.fmean(r.alloc_at_100 for r in mine if r.alloc_at_100 is not None)
            at_130 = statistics.fmean(r.alloc_at_130 for r in mine if r.alloc_at_130 is not None)
            paper = reference.get((trace, PUBLISHED_NAMES[policy]))
            delta = None if paper is None else at_130 - paper[1]
            document[trace][policy] = {
                "ours_at_100": round(at_100, 2),
                "ours_at_130": round(at_130, 2),
                "published_at_100": paper[0] if paper else None,
                "published_at_130": paper[1] if paper else None,
                "delta_at_130": None if delta is None else round(delta, 2),
            }
            rows.append(
                [
                    trace,
                    policy,
                    at_100,
                    paper[0] if paper else None,
                    at_130,
                    paper[1] if paper else None,
                    delta,
                ]
            )
    elapsed = time.perf_counter() - started
    if args.format == "json":
        print(json_line({"seeds": list(seeds), "traces": document}))
        return 0
    print(
        f"GPU allocation ratio (%) at 100 % and 130 % arrived workload, mean over seeds "
        f"{args.seeds}; published = the FGD paper's simulator (ATC '23)"
    )
    print(
        format_table(
            ["trace", "policy", "ours@100", "paper@100", "ours@130", "paper@130", "Δ@130"], rows
        )
    )
    deltas = [abs(r[6]) for r in rows if r[6] is not None]
    if deltas:
        print(
            f"\nlargest |Δ@130| = {max(deltas):.2f} points over {len(deltas)} trace×policy cells; "
            f"median {statistics.median(deltas):.2f}"
        )
    for trace in traces:
        ours = {p: document[trace][p]["ours_at_130"] for p in PAPER_POLICIES}
        best = max(ours, key=lambda p: ours[p] or 0.0)
        print(f"{trace}: best policy at 130 % is {best}")
    print(f"({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    run_main(main)
