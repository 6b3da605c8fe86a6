"""Checkpoint staggering on a real Flink cluster: peak concurrent checkpoints with and without.

Starts a local Flink session cluster (the Flink venv, ``make services``), submits
``--jobs`` copies of the sample job through ``kubesage flink submit``'s code path
(a Python operator under backpressure with unaligned checkpoints, so a checkpoint
lasts hundreds of ms; Flink's periodic checkpoints off, ``--checkpoint-interval-ms 0``,
so only the coordinator checkpoints them), probes each job's checkpoint duration one
job at a time, then gives all jobs one interval and checkpoints them for ``--periods`` intervals

- *with* the plan: kubesage's coordinator triggers each job at its phase;
- *without*: every job at the same instants (what jobs started together on the same
  interval do; Flink coordinates nothing across jobs).

Two intervals: ``roomy`` (3 × the sum of the probed durations: the optimum is 1) and
``tight`` (0.75 × that sum: for the probed durations no schedule avoids overlaps,
``plan_optimum`` = ⌈Σd/T⌉ = 2), both at least 500 ms. ``optimum`` is
``max(1, ⌈Σ d_i / T⌉)`` over the longest duration each job showed while on the plan,
which can differ from the probed ones. Concurrency is measured from Flink's checkpoint history.

``--tiny``: two jobs, two intervals per run.

    python benchmarks/flink_stagger.py [--jobs 3] [--periods 4] [--tiny] [--format table|json]
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from _common import format_table, parse_args
from flink_support.cluster import LocalFlinkCluster
from flink_support.samples import sample_copies
from flink_support.stagger_harness import StaggerComparison, compare_with_aligned, equal_interval

from kubesage.adapters.flink.checkpoint_history import measure_profiles
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.registry import JobRegistry

log = logging.getLogger("flink_stagger")

SCENARIOS = {"roomy": 3.0, "tight": 0.75}
"""Interval as a multiple of the sum of the probed checkpoint durations."""
MIN_INTERVAL_MS = 500
"""Checkpoints requested over REST last 100–300 ms here: a higher floor would make the
tight interval roomy."""


def scenario(result: StaggerComparison) -> dict[str, Any]:
    plan = result.plan
    interval = next(iter(plan.intervals_ms.values()))
    return {
        "interval_ms": interval,
        "durations_ms": dict(sorted(plan.durations_ms.items())),
        "phases_ms": dict(sorted(plan.phases_ms.items())),
        "peak_concurrent_with": result.staggered.peak_concurrent(),
        "peak_concurrent_without": result.aligned.peak_concurrent(),
        "optimum": result.optimum,
        "plan_optimum": plan.optimum_concurrent,
        "completed_with": result.staggered.count("completed"),
        "completed_without": result.aligned.count("completed"),
        "failed": result.staggered.count("failed") + result.aligned.count("failed"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--periods", type=int, default=4)
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, {"jobs": 2, "periods": 2})  # tiny: the smallest allowed
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.jobs < 2 or args.periods < 2:
        parser.error("--jobs and --periods must be ≥ 2")
    results: dict[str, dict[str, Any]] = {}
    with (
        tempfile.TemporaryDirectory() as scratch,
        LocalFlinkCluster(task_slots=args.jobs + 1) as cluster,
        FlinkClient(cluster.rest_url) as client,
    ):
        registry = JobRegistry(Path(scratch) / "flink-jobs.yaml")
        with sample_copies(cluster, registry, args.jobs) as job_ids:
            probed = measure_profiles(client, job_ids, 10_000, rounds=3)
            for name, factor in SCENARIOS.items():
                profiles = equal_interval(probed, factor, minimum_ms=MIN_INTERVAL_MS, step_ms=100)
                log.info("scenario %s: interval %d ms", name, profiles[0].interval_ms)
                comparison = compare_with_aligned(client, profiles, periods=args.periods)
                results[name] = scenario(comparison)
    main_result = results["roomy"]
    document = {
        "jobs": args.jobs,
        "periods": args.periods,
        "interval_ms": main_result["interval_ms"],
        "peak_concurrent_with": main_result["peak_concurrent_with"],
        "peak_concurrent_without": main_result["peak_concurrent_without"],
        "optimum": main_result["optimum"],
        "scenarios": results,
    }
    if args.format == "json":
        print(json.dumps(document))
        return 0
    print(
        f"{args.jobs} jobs, equal intervals, {args.periods} intervals each run; "
        "concurrency from Flink's checkpoint history"
    )
    rows = [
        [
            name,
            r["interval_ms"],
            max(r["durations_ms"].values()),
            r["peak_concurrent_with"],
            r["peak_concurrent_without"],
            r["optimum"],
            r["plan_optimum"],
            r["failed"],
        ]
        for name, r in results.items()
    ]
    print(
        format_table(
            [
                "scenario",
                "interval_ms",
                "max duration_ms",
                "with",
                "without",
                "optimum",
                "plan optimum",
                "failed",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
