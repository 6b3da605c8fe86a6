"""Spark shuffle locality: expected cross-rack bytes of our executor placement beside the baselines.

Stage shapes come from a real event log: the TPC-H-like job
(``adapters/spark/tpch_job.py``) run on a local Spark (pyspark), unless
``--event-log`` names another; its shuffle bytes are scaled ×``--scale`` to a
production-sized job. On every example topology in ``configs/topologies`` with
three or more racks, with background load (each node 0–70 % of its CPU and 0–50 %
of its memory taken, seeds 0–4) and jobs of 16, 64, 128 and 256 executors (4 cores,
16 GiB): our placement, the Kubernetes default scheduler's spread, and random
placement. Printed: medians of expected cross-rack bytes (GB) and ours ÷ spread.

JSON: ``{"<topology>": {"cross_rack_bytes": {"ours", "spread", "random"},
"ours_over_spread_median", "ours_over_spread_worst"}}``. ``--tiny``: one seed, and
the local Spark job over 20,000 lineitem rows.

    python benchmarks/spark_locality.py [--event-log PATH] [--scale 10000] [--seeds 0-4]
                                        [--job-rows N] [--tiny] [--format table|json]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import format_table, json_line, parse_args, positive_float, run_main

from kubesage.adapters.spark import tpch_job
from kubesage.adapters.spark.cli import find_spark_submit
from kubesage.adapters.spark.eventlog import read_event_log
from kubesage.adapters.spark.placement import (
    ExecutorShape,
    place_executors,
    random_placement,
    spread_placement,
)
from kubesage.adapters.spark.shuffle_model import ShuffleProfile
from kubesage.core.sim.settings import parse_seeds
from kubesage.core.state import ClusterState
from kubesage.core.topology.examples import example_paths
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import PodRequest

EXECUTORS = (16, 64, 128, 256)
GB = 1e9
TINY = {"seeds": "0", "job_rows": 20_000}


def run_tpch_job(log_dir: Path, rows: int | None = None) -> Path:
    """Run the TPC-H-like job on local Spark (``rows`` lineitem rows, default the job's
    own); the path of its event log."""
    job_args = [] if rows is None else ["--scale", str(rows)]
    done = subprocess.run(
        [
            find_spark_submit(),
            "--master", "local[2]",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.eventLog.enabled=true",
            "--conf", f"spark.eventLog.dir={log_dir.resolve().as_uri()}",
            tpch_job.__file__,
            *job_args,
        ],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"error: the local Spark run failed:\n{done.stderr[-2000:]}")
    return next(log_dir.iterdir())


def background(drtg: DRTG, seed: int) -> ClusterState:
    state = ClusterState(drtg.node_specs())
    rng = np.random.default_rng(seed)
    for node in range(state.num_nodes):
        cpu = int(state.cpu_capacity_milli[node] * rng.uniform(0, 0.7)) // 1000 * 1000
        memory = int(state.memory_capacity_mib[node] * rng.uniform(0, 0.5))
        pod = PodRequest(name=f"background-{node}", cpu_milli=cpu, memory_mib=memory)
        state.allocate(pod, state.placement(node, [], pod))
    return state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--event-log", type=Path)
    parser.add_argument("--scale", type=positive_float, default=10_000.0)
    parser.add_argument("--seeds", default="0-4", help="Background-load seeds.")
    parser.add_argument("--job-rows", type=int, help="Lineitem rows of the local Spark job.")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    seeds = parse_seeds(args.seeds)
    with tempfile.TemporaryDirectory() as scratch:
        if args.event_log is None:
            print("running the TPC-H-like job on local Spark...", file=sys.stderr, flush=True)
        log = args.event_log or run_tpch_job(Path(scratch), args.job_rows)
        app = read_event_log(log)
    profile = ShuffleProfile.from_application(app, scale=args.scale)
    document: dict[str, dict[str, dict[str, float]]] = {}
    rows = []
    for name, path in example_paths().items():
        drtg = DRTG.from_yaml(path)
        if len(drtg.rack_names) < 3:
            print(f"{name}: skipped, fewer than 3 racks", file=sys.stderr)
            continue
        results: dict[str, list[float]] = {"ours": [], "spread": [], "random": []}
        for seed in seeds:
            state = background(drtg, seed)
            for executors in EXECUTORS:
                shape = ExecutorShape(executors, 4, 16_384)
                results["ours"].append(
                    place_executors(drtg, state, shape, profile).estimate.cross_rack_bytes
                )
                results["spread"].append(
                    spread_placement(drtg, state, shape, profile).estimate.cross_rack_bytes
                )
                results["random"].append(
                    random_placement(
                        drtg, state, shape, profile, seed=seed
                    ).estimate.cross_rack_bytes
                )
        medians = {k: round(statistics.median(v) / GB, 3) for k, v in results.items()}
        ratios = [o / s for o, s in zip(results["ours"], results["spread"], strict=True) if s]
        ratio, worst = statistics.median(ratios), max(ratios)
        document[name] = {
            "cross_rack_bytes": medians,
            "ours_over_spread_median": round(ratio, 3),
            "ours_over_spread_worst": round(worst, 3),
        }
        rows.append([name, medians["ours"], medians["spread"], medians["random"], ratio, worst])
    if args.format == "json":
        print(json_line(document))
        return 0
    print(
        f"Expected cross-rack bytes (GB), medians over seeds {args.seeds} and jobs of "
        f"{'/'.join(map(str, EXECUTORS))} executors; stage shapes from '{app.name}' "
        f"({app.total_shuffle_bytes:,} shuffle bytes) × {args.scale:,.0f}"
    )
    print(
        format_table(
            ["topology", "ours", "spread", "random", "ours/spread", "ours/spread (worst)"], rows
        )
    )
    return 0


if __name__ == "__main__":
    run_main(main)
