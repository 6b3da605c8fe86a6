"""The limit of GPU packing on the openb traces: FGD, a hindsight search, an upper bound.

For every shared pod list and seeds 42–44, under the FGD paper's protocol (requests
inflated to 130 % of GPU capacity, arrivals only, a pod that fits is placed):

- ``fgd``: FGD's GPU allocation when arrivals stop (130 % arrived);
- ``hindsight``: the best placement sequence the hindsight search found knowing every
  arrival (``core/sim/hindsight.py``: policy switches at checkpoints, each judged on
  the finished run) — a feasible run, so a lower bound on the optimum, never below FGD;
- ``upper_bound``: a relaxation's bound (``core/sim/packing_bound.py``) — no
  placement sequence allocates more;
- ``ppo``: the shipped learned policy run throughout (one of the search's portfolio),
  and ``headroom_captured`` = (ppo − fgd) / (hindsight − fgd);
- ``online``: the same kind of switch search judged on futures sampled from the
  workload instead of the true arrivals (``core/sim/online_switch.py``: what an
  online scheduler could do with that portfolio), and ``online_captured``, its share
  of the headroom.

Figures are means over seeds, % of GPU capacity. ``what_changed`` says what the
hindsight run did differently from FGD's: failed pods by kind (GPUs they asked for),
GPUs left free by model, pods it placed on another node, the switches it kept.

JSON: ``{"seeds": [...], "traces": {"<trace>": {"fgd", "hindsight", "upper_bound",
"ppo", "hindsight_minus_fgd", "headroom_captured", "online", "online_captured",
"online_policies": {"<seed>": [...]}, "bound": {...}, "throughout":
{"<policy>"}, "what_changed": {...}, "per_seed": [...]}}, "wall_s"}``.
``--tiny``: one trace and seed on the first 60 nodes, two checkpoints (figures
meaningless).

    python benchmarks/packing_bounds.py [--data-dir DIR] [--seeds 42-44] [--jobs N]
                                        [--traces default,...] [--node-limit N]
                                        [--checkpoints 0,40,...] [--tiny]
                                        [--format table|json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from _common import format_table, json_line, openb_traces, parse_args, run_main, trace_dir

from kubesage.core.sim.hindsight import (
    DEFAULT_CHECKPOINTS_PCT,
    default_portfolio,
    hindsight_search,
)
from kubesage.core.sim.online_switch import ONLINE_POLICIES, online_switch_search
from kubesage.core.sim.packing_bound import allocation_upper_bound
from kubesage.core.sim.protocol import fgd_arrivals
from kubesage.core.sim.runner import default_jobs
from kubesage.core.sim.settings import parse_seeds
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.traces import read_nodes, read_pods

TINY = {"seeds": "42", "traces": "default", "node_limit": 60, "checkpoints": "0,80"}


def one_run(
    openb: Path, trace: str, seed: int, node_limit: int, checkpoints: tuple[float, ...]
) -> dict[str, Any]:
    """FGD, the hindsight search and the bound for one trace and seed."""
    started = time.perf_counter()
    nodes = read_nodes(openb / "openb_node_list_gpu_node.csv")
    if node_limit:
        nodes = nodes[:node_limit]
    workload = read_pods(openb / f"openb_pod_list_{trace}.csv")
    capacity = ClusterState(nodes).gpu_capacity_milli_total
    arrivals = fgd_arrivals(workload, gpu_capacity_milli=capacity, seed=seed)
    bound = allocation_upper_bound(nodes, arrivals)
    portfolio = default_portfolio(workload)
    result = hindsight_search(
        nodes, arrivals, seed=seed, portfolio=portfolio, checkpoints_pct=checkpoints
    )
    online = online_switch_search(
        nodes,
        arrivals,
        workload,
        seed=seed,
        portfolio={name: portfolio[name] for name in ONLINE_POLICIES},
        checkpoints_pct=checkpoints,
    )
    return {
        "trace": trace,
        "seed": seed,
        "fgd": result.base.allocation_pct,
        "hindsight": result.hindsight.allocation_pct,
        "upper_bound": bound.percent,
        "online": online.allocation_pct,
        "online_policies": list(online.policies),
        "throughout": result.throughout,
        "bound": {
            "flow": bound.flow_percent,
            "stranded": bound.stranded_percent,
            "usable": bound.usable_percent,
            "surely_placed": bound.surely_placed,
            "big_shares": bound.big_shares,
        },
        "failed_fgd": result.base.failed_by_kind,
        "failed_hindsight": result.hindsight.failed_by_kind,
        "failed_gpu_fgd": result.base.failed_gpu_by_kind,
        "failed_gpu_hindsight": result.hindsight.failed_gpu_by_kind,
        "free_fgd": result.base.free_gpu_by_model,
        "free_hindsight": result.hindsight.free_gpu_by_model,
        "placed_elsewhere": result.placed_elsewhere,
        "switches": [
            {
                "arrived_pct": round(s.arrived_pct, 1),
                "policy": s.policy,
                "gain_pct": round(s.gain_gpu_milli * 100.0 / capacity, 3),
            }
            for s in result.switches
        ],
        "rollouts": result.rollouts,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def _mean(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.fmean(run[key] for run in runs), 3)


def _summed(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    total: Counter[str] = Counter()
    for run in runs:
        total.update(run[key])
    return {k: round(v, 2) for k, v in sorted(total.items())}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One trace's entry: means over seeds, and what the hindsight runs changed."""
    fgd, hindsight = _mean(runs, "fgd"), _mean(runs, "hindsight")
    policies = sorted({name for run in runs for name in run["throughout"]})
    throughout = {
        name: round(statistics.fmean(run["throughout"][name] for run in runs), 3)
        for name in policies
    }
    ppo = throughout.get("ppo")
    online = _mean(runs, "online")
    gap = hindsight - fgd
    return {
        "fgd": fgd,
        "hindsight": hindsight,
        "upper_bound": _mean(runs, "upper_bound"),
        "ppo": ppo,
        "hindsight_minus_fgd": round(gap, 3),
        "headroom_captured": None if ppo is None or gap <= 0 else round((ppo - fgd) / gap, 2),
        "online": online,
        "online_captured": None if gap <= 0 else round((online - fgd) / gap, 2),
        "online_policies": {str(run["seed"]): run["online_policies"] for run in runs},
        "bound": {
            key: round(statistics.fmean(run["bound"][key] for run in runs), 3)
            for key in runs[0]["bound"]
        },
        "throughout": throughout,
        "what_changed": {
            "failed_pods_fgd": _summed(runs, "failed_fgd"),
            "failed_pods_hindsight": _summed(runs, "failed_hindsight"),
            "failed_gpus_fgd": _summed(runs, "failed_gpu_fgd"),
            "failed_gpus_hindsight": _summed(runs, "failed_gpu_hindsight"),
            "free_gpus_fgd": _summed(runs, "free_fgd"),
            "free_gpus_hindsight": _summed(runs, "free_hindsight"),
            "placed_elsewhere": sum(run["placed_elsewhere"] for run in runs),
            "switches": {str(run["seed"]): run["switches"] for run in runs},
        },
        "per_seed": [
            {
                k: run[k]
                for k in ("seed", "fgd", "hindsight", "online", "upper_bound", "rollouts", "wall_s")
            }
            for run in runs
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--jobs", type=int, default=default_jobs())
    parser.add_argument("--traces", default="")
    parser.add_argument("--node-limit", type=int, default=0, help="First N nodes (0: all).")
    parser.add_argument(
        "--checkpoints",
        default=",".join(f"{p:g}" for p in DEFAULT_CHECKPOINTS_PCT),
        help="Arrived %% at which the search tries switches (0: the start).",
    )
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    openb = trace_dir(args.data_dir, "openb")
    seeds = parse_seeds(args.seeds)
    try:
        checkpoints = tuple(float(p) for p in args.checkpoints.split(",") if p.strip())
    except ValueError:
        parser.error(f"--checkpoints takes numbers separated by commas, got {args.checkpoints!r}")
    traces = openb_traces(openb, args.traces)
    tasks = [(trace, seed) for trace in traces for seed in seeds]
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    print(f"{len(tasks)} runs on {args.jobs} worker(s)...", file=sys.stderr, flush=True)
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(one_run, openb, trace, seed, args.node_limit, checkpoints)
            for trace, seed in tasks
        ]
        for done, future in enumerate(as_completed(futures), start=1):
            run = future.result()
            runs.append(run)
            print(
                f"[{done}/{len(tasks)}] {run['trace']} seed {run['seed']}: fgd {run['fgd']:.3f}, "
                f"hindsight {run['hindsight']:.3f}, online {run['online']:.3f}, "
                f"bound {run['upper_bound']:.3f} "
                f"({run['wall_s']:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    document = {
        trace: summarise(sorted((r for r in runs if r["trace"] == trace), key=lambda r: r["seed"]))
        for trace in traces
    }
    wall = round(time.perf_counter() - started, 1)
    if args.format == "json":
        print(json_line({"seeds": list(seeds), "traces": document, "wall_s": wall}))
        return 0
    print(
        f"GPU allocation (%) at 130 % arrived, mean over seeds {args.seeds}: FGD, the hindsight "
        "search (a feasible run: a lower bound on the optimum) and the relaxation's upper bound"
    )
    rows = [
        [
            trace,
            entry["fgd"],
            entry["hindsight"],
            entry["hindsight_minus_fgd"],
            entry["upper_bound"],
            entry["upper_bound"] - entry["fgd"],
            entry["ppo"],
            entry["headroom_captured"],
            entry["online"],
            entry["online_captured"],
        ]
        for trace, entry in document.items()
    ]
    print(
        format_table(
            [
                "trace",
                "FGD",
                "hindsight",
                "Δ hind",
                "upper bound",
                "Δ bound",
                "ppo",
                "ppo captured",
                "online",
                "online captured",
            ],
            rows,
        )
    )
    for trace, entry in document.items():
        changed = entry["what_changed"]
        print(f"\n{trace}: failed pods FGD {changed['failed_pods_fgd']}")
        print(f"{' ' * len(trace)}  hindsight  {changed['failed_pods_hindsight']}")
        print(f"{' ' * len(trace)}  free GPUs FGD {changed['free_gpus_fgd']}")
        print(f"{' ' * len(trace)}  hindsight     {changed['free_gpus_hindsight']}")
        first = next(iter(changed["switches"].values()))
        print(f"{' ' * len(trace)}  switches (first seed): {first}")
        online_first = next(iter(entry["online_policies"].values()))
        print(f"{' ' * len(trace)}  online, policy per checkpoint (first seed): {online_first}")
    print(f"\n({wall:.0f} s)")
    return 0


if __name__ == "__main__":
    run_main(main)
