"""Checkpoint staggering on a real Flink session cluster.

Three copies of the sample job (a slow Python operator under backpressure, unaligned
checkpoints: each checkpoint waits for a Python bundle to flush, so it lasts hundreds
of ms; Flink's periodic checkpoints off, ``--checkpoint-interval-ms 0``) are submitted
through ``kubesage flink submit``'s code path. Their checkpoint durations are probed
one job at a time; the interval is then chosen so the plan has room, and the jobs are
checkpointed by the coordinator on the plan and, for comparison, all at the same
instants. Concurrency is measured from Flink's own checkpoint history (trigger time
and end-to-end duration), not from our schedule.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from benchmarks.flink_support.cluster import LocalFlinkCluster
from benchmarks.flink_support.samples import sample_copies
from benchmarks.flink_support.stagger_harness import compare_with_aligned, equal_interval
from kubesage.adapters.flink import cli
from kubesage.adapters.flink.checkpoint_history import history_peak_concurrent, measure_profiles
from kubesage.adapters.flink.checkpoint_settings import periodic_interval_ms
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.registry import JobRegistry

pytestmark = pytest.mark.timeout(420)

JOBS = 3
PERIODS = 3
REGISTERED_INTERVAL_MS = 10_000


@pytest.fixture(scope="module")
def sample_jobs(
    flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[str], JobRegistry]]:
    """Three running sample jobs, submitted once for this module's tests, then cancelled."""
    registry = JobRegistry(tmp_path_factory.mktemp("registry") / "flink-jobs.yaml")
    with sample_copies(flink_cluster, registry, JOBS) as job_ids:
        yield job_ids, registry


def test_jobs_run_without_periodic_checkpoints(
    flink_client: FlinkClient, sample_jobs: tuple[list[str], JobRegistry]
) -> None:
    job_ids, registry = sample_jobs
    for job_id in job_ids:
        run = registry.find(job_id)
        assert run is not None and run.running_since_ms and run.parallelism == 1, run
        assert run.driven and run.checkpoint_interval_ms == REGISTERED_INTERVAL_MS, run
        assert periodic_interval_ms(flink_client, job_id) is None
        config = flink_client.checkpoint_config(job_id)
        # Checkpointing stays enabled, so a requested checkpoint is exactly-once, unaligned.
        assert (config.mode, config.unaligned) == ("exactly_once", True), config


@pytest.mark.slow
def test_staggered_checkpoints_reach_the_optimum_and_aligned_ones_collide(
    flink_client: FlinkClient, sample_jobs: tuple[list[str], JobRegistry]
) -> None:
    job_ids, _ = sample_jobs
    probed = measure_profiles(flink_client, job_ids, REGISTERED_INTERVAL_MS, rounds=3)
    assert all(p.duration_ms > 0 for p in probed), probed
    # Room for three times the longest probes, so a slow checkpoint stays in its slot.
    profiles = equal_interval(probed, 3.0, minimum_ms=4_000, step_ms=1_000)

    started_ms = int(time.time() * 1000)
    result = compare_with_aligned(flink_client, profiles, periods=PERIODS)

    for report in (result.staggered, result.aligned):
        assert report.count("completed") >= JOBS * (PERIODS - 1), report.records
        assert report.count("failed") == 0, report.records
    assert result.plan.peak_concurrent == result.plan.optimum_concurrent
    assert result.staggered.peak_concurrent() == result.optimum
    assert result.aligned.peak_concurrent() == JOBS
    # Flink's history over both runs agrees: at worst the aligned run's collisions.
    assert history_peak_concurrent(flink_client, job_ids, since_ms=started_ms) == JOBS


def test_stagger_command_drives_the_registered_jobs(
    flink_cluster: LocalFlinkCluster, sample_jobs: tuple[list[str], JobRegistry]
) -> None:
    job_ids, registry = sample_jobs
    done = CliRunner().invoke(
        cli.flink_app,
        [
            "stagger",
            "--jobmanager",
            flink_cluster.rest_url,
            "--registry",
            str(registry.path),
            *_jobs(job_ids),
            "--duration-s",
            str(2.5 * REGISTERED_INTERVAL_MS / 1000),  # two slots each, at least
        ],
    )
    assert done.exit_code == 0, done.output
    plan = re.search(r"plan \([\w-]+\): peak (\d+) concurrent", done.output)
    measured = re.search(r"measured peak concurrent checkpoints: (\d+)", done.output)
    history = re.search(r"in Flink's checkpoint history: (\d+)", done.output)
    completed = re.search(r"completed (\d+), failed (\d+)", done.output)
    assert plan and measured and history and completed, done.output
    assert int(plan.group(1)) == 1, done.output
    assert int(measured.group(1)) == int(history.group(1)) == 1, done.output
    assert int(completed.group(1)) >= JOBS and int(completed.group(2)) == 0, done.output
    for job_id in job_ids:
        run = registry.find(job_id)
        assert run is not None and run.phase_ms is not None and run.checkpoint_duration_ms
        assert f"{job_id} completed #" in done.output


def test_state_advice_for_running_jobs(
    flink_cluster: LocalFlinkCluster,
    flink_client: FlinkClient,
    sample_jobs: tuple[list[str], JobRegistry],
) -> None:
    job_ids, _ = sample_jobs
    # No periodic checkpoints: one requested checkpoint each gives the advice its data.
    measure_profiles(flink_client, job_ids, REGISTERED_INTERVAL_MS, rounds=1)
    done = CliRunner().invoke(
        cli.flink_app, ["state", "--jobmanager", flink_cluster.rest_url, *_jobs(job_ids)]
    )
    assert done.exit_code == 0, done.output
    for job_id in job_ids:
        # Kilobytes of unaligned channel state: the heap backend.
        assert f"# job {job_id}: heap state" in done.output


def _jobs(job_ids: list[str]) -> list[str]:
    return [arg for job_id in job_ids for arg in ("--job", job_id)]
