"""Checkpoint staggering on a real Flink cluster: peak concurrent checkpoints with and without.

Starts a local Flink session cluster (the Flink venv, ``make services``), submits
``--jobs`` copies of the sample job through ``kubesage flink submit``'s code path
(a Python operator under backpressure with unaligned checkpoints, so a checkpoint
lasts hundreds of ms), probes each job's checkpoint duration one job at a time, then
gives all jobs one interval and checkpoints them for ``--periods`` intervals

- *with* the plan: kubesage's coordinator triggers each job at its phase;
- *without*: every job at the same instants (what jobs started together on the same
  interval do; Flink coordinates nothing across jobs).

Two intervals: ``roomy`` (3 × the sum of the probed durations: the optimum is 1) and
``tight`` (0.75 × that sum: for the probed durations no schedule avoids overlaps,
``plan_optimum`` = ⌈Σd/T⌉ = 2). ``optimum`` is ``max(1, ⌈Σ d_i / T⌉)`` over the
longest duration each job showed while on the plan, which can differ from the probed
ones. Concurrency is measured from Flink's checkpoint history.

    python benchmarks/flink_stagger.py [--jobs 3] [--periods 4] [--format table|json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from _common import REPO, format_table

from kubesage.adapters.flink.checkpoint_coordinator import (
    StaggerComparison,
    compare_with_aligned,
    measure_profiles,
)
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.local_cluster import LocalFlinkCluster
from kubesage.adapters.flink.registry import JobRegistry
from kubesage.adapters.flink.stagger import CheckpointProfile
from kubesage.adapters.flink.submit import SubmitRequest, submit

SAMPLE_JOB = REPO / "adapters" / "flink" / "sample_job.py"
SAMPLE_ARGS = ("--rate", "1000", "--capacity", "4", "--checkpoint-interval-ms", "2000000000")
SCENARIOS = {"roomy": 3.0, "tight": 0.75}
"""Interval as a multiple of the sum of the probed checkpoint durations."""


def submit_jobs(cluster: LocalFlinkCluster, registry: JobRegistry, count: int) -> list[str]:
    os.environ["FLINK_CONF_DIR"] = str(cluster.conf_dir)
    python = str(cluster.python)
    job_ids = []
    for index in range(count):
        request = SubmitRequest(
            flink_args=(
                "-pyexec",
                python,
                "-pyclientexec",
                python,
                "-py",
                str(SAMPLE_JOB),
                *SAMPLE_ARGS,
                "--name",
                f"stagger-{index}",
            ),
            jobmanager=cluster.rest_url,
            name=f"stagger-{index}",
            parallelism=1,
            checkpoint_interval_ms=10_000,
            flink_home=cluster.flink_home,
        )
        job_ids.append(submit(request, registry).job_id)
        print(f"submitted stagger-{index}: {job_ids[-1]}", file=sys.stderr)
    return job_ids


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
    args = parser.parse_args()
    if args.jobs < 2 or args.periods < 2:
        parser.error("--jobs and --periods must be ≥ 2")
    results: dict[str, dict[str, Any]] = {}
    with (
        tempfile.TemporaryDirectory() as scratch,
        LocalFlinkCluster(task_slots=args.jobs + 1) as cluster,
        FlinkClient(cluster.rest_url) as client,
    ):
        registry = JobRegistry(Path(scratch) / "flink-jobs.yaml")
        job_ids = submit_jobs(cluster, registry, args.jobs)
        try:
            probed = measure_profiles(client, job_ids, 10_000, rounds=3)
            total_ms = sum(p.duration_ms for p in probed)
            for name, factor in SCENARIOS.items():
                interval = max(1_000, math.ceil(factor * total_ms / 100) * 100)
                profiles = [
                    CheckpointProfile(p.job_id, interval, p.duration_ms, p.size_bytes)
                    for p in probed
                ]
                print(f"scenario {name}: interval {interval} ms", file=sys.stderr)
                comparison = compare_with_aligned(client, profiles, periods=args.periods)
                results[name] = scenario(comparison)
        finally:
            for job_id in job_ids:
                httpx.patch(f"{cluster.rest_url}/jobs/{job_id}", params={"mode": "cancel"})
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
