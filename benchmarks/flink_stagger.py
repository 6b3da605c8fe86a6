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

What the storms cost (each scenario, ``_with`` on the plan, ``_without`` all at once;
the top level repeats the roomy scenario's):

- ``peak_write_bytes_per_s_*``: peak checkpoint bytes written per second across jobs,
  from Flink's checkpoint history: each completed checkpoint's ``checkpointed_size``
  spread evenly over ``[trigger_timestamp, latest_ack_timestamp]``, summed across jobs
  on a 10 ms grid (:mod:`kubesage.adapters.flink.checkpoint_io`): the fastest the jobs
  wrote together;
- ``peak_write_bytes_per_s_1s_*``: the same timeline's highest mean over any 1 s: what a
  storage throughput metric counted per second sees (the module says why both);
- ``p95_duration_ms_*``: nearest-rank p95 of those checkpoints' durations (with fewer
  than 20 checkpoints per run: the longest);
- ``written_bytes_*``: their ``checkpointed_size``, summed;
- ``fs_peak_write_bytes_per_s_*``, ``fs_written_bytes_*``: per second and in all, from
  the file system: bytes by which files under the cluster's checkpoint directory
  (``execution.checkpointing.dir``, a scratch directory) appeared or grew, sampled
  every 50 ms, peak over 1 s windows (``flink_support/io_sampler.py`` says why the
  directory and not the TaskManager's ``/proc/<pid>/io``; that one is logged as a
  cross-check). ``fs_counter`` names the counter.

``--state-mb`` (default 0: the sample job) runs copies of ``flink_support/state_job.py``
instead: keyed state of about that many MB per job, which every checkpoint writes in full,
so a storm loads the storage. ``state_mb`` in the JSON says which job ran.

``--tiny``: two jobs, two intervals per run.

    python benchmarks/flink_stagger.py [--jobs 3] [--periods 4] [--state-mb 0] [--tiny]
        [--format table|json]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from _common import format_table, json_line, parse_args, run_main
from flink_support.cluster import LocalFlinkCluster
from flink_support.io_sampler import IoTimeline, sample_io
from flink_support.samples import BACKLOGGED_NO_PERIODIC, SAMPLE_JOB, sample_copies
from flink_support.stagger_harness import (
    Sampler,
    StaggerComparison,
    compare_with_aligned,
    equal_interval,
)

from kubesage.adapters.flink.checkpoint_history import measure_profiles
from kubesage.adapters.flink.checkpoint_io import (
    CheckpointWrite,
    duration_quantile,
    write_rate,
)
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.registry import JobRegistry
from kubesage.adapters.flink.stagger import CheckpointProfile

log = logging.getLogger("flink_stagger")

SCENARIOS = {"roomy": 3.0, "tight": 0.75}
"""Interval as a multiple of the sum of the probed checkpoint durations."""
MIN_INTERVAL_MS = 500
"""Checkpoints requested over REST last 100–300 ms here: a higher floor would make the
tight interval roomy."""
STATE_JOB = SAMPLE_JOB.with_name("state_job.py")
VALUE_BYTES = 1000
"""State per key of the state job; ``--state-mb`` sets the number of keys."""
STATE_RATE = 2000
"""Rows/s of each state job: every key seen (the state at its size) within seconds."""
RUNS = ("with", "without")
FS_COUNTER = "checkpoint-dir"
"""The file-system counter reported (``flink_support/io_sampler.py``)."""
IO_KEYS = (
    "peak_write_bytes_per_s",
    "peak_write_bytes_per_s_1s",
    "p95_duration_ms",
    "written_bytes",
    "fs_peak_write_bytes_per_s",
    "fs_written_bytes",
)
"""Each scenario has ``<key>_with`` and ``<key>_without``."""
TOP_IO_KEYS = (
    "peak_write_bytes_per_s",
    "peak_write_bytes_per_s_1s",
    "p95_duration_ms",
    "fs_peak_write_bytes_per_s",
)
"""Repeated at the top level from the roomy scenario."""


def io_figures(writes: list[CheckpointWrite], io: IoTimeline | None) -> dict[str, Any]:
    """One run's figures, keyed as :data:`IO_KEYS`."""
    timeline = write_rate(writes)
    return {
        "peak_write_bytes_per_s": round(timeline.peak_bytes_per_s),
        "peak_write_bytes_per_s_1s": round(timeline.peak_over(1_000)),
        "p95_duration_ms": duration_quantile(w.duration_ms for w in writes),
        "written_bytes": sum(w.size_bytes for w in writes),
        "fs_peak_write_bytes_per_s": round(io.peak_rate(io.dir_bytes)) if io else None,
        "fs_written_bytes": io.dir_total if io else None,
    }


def log_cross_check(name: str, run: str, io: IoTimeline | None) -> None:
    """The TaskManagers' own write counter beside the directory's (logged, not reported)."""
    if io is None or io.proc_bytes is None:
        return
    log.info(
        "%s %s: checkpoint dir %d B (peak %.0f B/s), TaskManager write_bytes %d B (peak %.0f B/s)",
        name,
        run,
        io.dir_total,
        io.peak_rate(io.dir_bytes),
        io.proc_total or 0,
        io.peak_rate(io.proc_bytes),
    )


def scenario(result: StaggerComparison) -> dict[str, Any]:
    plan = result.plan
    interval = next(iter(plan.intervals_ms.values()))
    with_plan = io_figures(result.staggered_writes, result.staggered_io)
    without = io_figures(result.aligned_writes, result.aligned_io)
    costs = {f"{key}_with": with_plan[key] for key in IO_KEYS}
    costs |= {f"{key}_without": without[key] for key in IO_KEYS}
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
        **costs,
    }


def run_scenario(
    client: FlinkClient,
    probed: list[CheckpointProfile],
    name: str,
    factor: float,
    periods: int,
    sampler: Sampler,
) -> dict[str, Any]:
    profiles = equal_interval(probed, factor, minimum_ms=MIN_INTERVAL_MS, step_ms=100)
    log.info("scenario %s: interval %d ms", name, profiles[0].interval_ms)
    comparison = compare_with_aligned(client, profiles, periods=periods, sampler=sampler)
    log_cross_check(name, "with", comparison.staggered_io)
    log_cross_check(name, "without", comparison.aligned_io)
    return scenario(comparison)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--periods", type=int, default=4)
    parser.add_argument(
        "--state-mb",
        type=float,
        default=0.0,
        help="run the state job with about this much keyed state per job (0: the sample job)",
    )
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, {"jobs": 2, "periods": 2})  # tiny: the smallest allowed
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.jobs < 2 or args.periods < 2:
        parser.error("--jobs and --periods must be ≥ 2")
    if args.state_mb < 0:
        parser.error("--state-mb must be ≥ 0")
    script, fill_s = SAMPLE_JOB, 0.0
    job_args: tuple[str, ...] = BACKLOGGED_NO_PERIODIC
    if args.state_mb:
        keys = max(1, round(args.state_mb * 1e6 / VALUE_BYTES))
        script = STATE_JOB
        job_args = ("--keys", str(keys), "--value-bytes", str(VALUE_BYTES))
        job_args += ("--rate", str(STATE_RATE))
        # Keys are drawn at random: 95 % of them are seen after 3 × keys rows.
        fill_s = 3 * keys / STATE_RATE
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        checkpoints = Path(scratch) / "checkpoints"
        checkpoints.mkdir()
        conf: dict[str, str | int] = {
            # File storage, so the file system sees the bytes (the default keeps them in
            # the JobManager's heap); a longer history, read after each run.
            "execution.checkpointing.dir": checkpoints.as_uri(),
            "web.checkpoints.history": 100,
        }
        with (
            LocalFlinkCluster(task_slots=args.jobs + 1, extra_conf=conf) as cluster,
            FlinkClient(cluster.rest_url) as client,
        ):
            registry = JobRegistry(Path(scratch) / "flink-jobs.yaml")
            with sample_copies(
                cluster, registry, args.jobs, sample_args=job_args, script=script
            ) as job_ids:
                if fill_s:
                    log.info("state job: %.0f s for the state to fill", fill_s)
                    time.sleep(fill_s)
                probed = measure_profiles(client, job_ids, 10_000, rounds=3)

                def sampler() -> AbstractContextManager[IoTimeline]:
                    return sample_io(checkpoints, cluster.taskmanager_pids())

                for name, factor in SCENARIOS.items():
                    results[name] = run_scenario(
                        client, probed, name, factor, args.periods, sampler
                    )
    main_result = results["roomy"]
    document = {
        "jobs": args.jobs,
        "periods": args.periods,
        "interval_ms": main_result["interval_ms"],
        "peak_concurrent_with": main_result["peak_concurrent_with"],
        "peak_concurrent_without": main_result["peak_concurrent_without"],
        "optimum": main_result["optimum"],
        "state_mb": args.state_mb,
        "fs_counter": FS_COUNTER,
        **{f"{key}_{run}": main_result[f"{key}_{run}"] for key in TOP_IO_KEYS for run in RUNS},
        "scenarios": results,
    }
    if args.format == "json":
        print(json_line(document))
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
    print(
        "\nwhat the checkpoints cost: peak write rate across jobs in kB/s (history on a "
        "10 ms grid, history per 1 s, file system per 1 s), p95 duration, kB written"
    )
    cost_rows = [
        [
            f"{name} {run}",
            _kilo(r[f"peak_write_bytes_per_s_{run}"]),
            _kilo(r[f"peak_write_bytes_per_s_1s_{run}"]),
            _kilo(r[f"fs_peak_write_bytes_per_s_{run}"]),
            r[f"p95_duration_ms_{run}"],
            _kilo(r[f"written_bytes_{run}"]),
            _kilo(r[f"fs_written_bytes_{run}"]),
        ]
        for name, r in results.items()
        for run in RUNS
    ]
    headers = ["run", "peak 10ms", "peak 1s", "fs peak 1s", "p95 ms", "written", "fs written"]
    print(format_table(headers, cost_rows))
    return 0


def _kilo(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:.0f}"


if __name__ == "__main__":
    run_main(main)
