"""Checkpoint staggering on a real Flink session cluster.

Three copies of the sample job (a slow Python operator under backpressure, unaligned
checkpoints: each checkpoint waits for a Python bundle to flush, so it lasts hundreds
of ms) are submitted through ``kubesage flink submit``'s code path. Their checkpoint
durations are probed one job at a time; the interval is then chosen so the plan has
room, and the jobs are checkpointed by the coordinator on the plan and, for
comparison, all at the same instants. Concurrency is measured from Flink's own
checkpoint history (trigger time and end-to-end duration), not from our schedule.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from kubesage.adapters.flink import cli
from kubesage.adapters.flink.checkpoint_coordinator import (
    compare_with_aligned,
    measure_profiles,
)
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.local_cluster import REPO_ROOT, LocalFlinkCluster
from kubesage.adapters.flink.registry import JobRegistry
from kubesage.adapters.flink.stagger import CheckpointProfile
from kubesage.adapters.flink.submit import SubmitRequest, submit

pytestmark = pytest.mark.timeout(420)

SAMPLE_JOB = REPO_ROOT / "adapters" / "flink" / "sample_job.py"
"""Runs in the Flink venv (imports pyflink), so it is passed by path, not imported."""
JOBS = 3
PERIODS = 3
SAMPLE_ARGS = ["--rate", "1000", "--capacity", "4", "--checkpoint-interval-ms", "2000000000"]
"""A backlog behind a 0.25 s/record operator; Flink's own periodic checkpoints never come."""


def submit_sample_jobs(
    cluster: LocalFlinkCluster, registry: JobRegistry, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    monkeypatch.setenv("FLINK_CONF_DIR", str(cluster.conf_dir))
    python = str(cluster.python)
    job_ids = []
    for index in range(JOBS):
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
    return job_ids


@pytest.fixture(scope="module")
def sample_jobs(
    flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[str], JobRegistry]]:
    """Three running sample jobs, submitted once for this module's tests, then cancelled."""
    registry = JobRegistry(tmp_path_factory.mktemp("registry") / "flink-jobs.yaml")
    job_ids: list[str] = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        try:
            job_ids = submit_sample_jobs(flink_cluster, registry, monkeypatch)
            yield job_ids, registry
        finally:
            for job_id in job_ids:
                httpx.patch(f"{flink_cluster.rest_url}/jobs/{job_id}", params={"mode": "cancel"})


def test_staggered_checkpoints_reach_the_optimum_and_aligned_ones_collide(
    flink_client: FlinkClient, sample_jobs: tuple[list[str], JobRegistry]
) -> None:
    job_ids, registry = sample_jobs
    runs = [registry.find(job_id) for job_id in job_ids]
    assert all(run is not None and run.running_since_ms for run in runs), runs
    assert all(run is not None and run.parallelism == 1 for run in runs)

    probed = measure_profiles(flink_client, job_ids, 10_000, rounds=3)
    assert all(p.duration_ms > 0 for p in probed), probed
    # Room for three times the longest probes, so a slow checkpoint stays in its slot.
    interval = max(4_000, math.ceil(3 * sum(p.duration_ms for p in probed) / 1000) * 1000)
    profiles = [CheckpointProfile(p.job_id, interval, p.duration_ms, p.size_bytes) for p in probed]

    result = compare_with_aligned(flink_client, profiles, periods=PERIODS)

    for report in (result.staggered, result.aligned):
        assert report.count("completed") >= JOBS * (PERIODS - 1), report.records
        assert report.count("failed") == 0, report.records
    assert result.plan.peak_concurrent == result.plan.optimum_concurrent
    assert result.staggered.peak_concurrent() == result.optimum
    assert result.aligned.peak_concurrent() == JOBS


def test_state_advice_for_running_jobs(
    flink_cluster: LocalFlinkCluster, sample_jobs: tuple[list[str], JobRegistry]
) -> None:
    job_ids, _ = sample_jobs
    # The jobs' first checkpoint comes on their own soon after they start.
    done = CliRunner().invoke(
        cli.flink_app, ["state", "--jobmanager", flink_cluster.rest_url, *_jobs(job_ids)]
    )
    assert done.exit_code == 0, done.output
    for job_id in job_ids:
        # Kilobytes of unaligned channel state: the heap backend.
        assert f"# job {job_id}: heap state" in done.output


def _jobs(job_ids: list[str]) -> list[str]:
    return [arg for job_id in job_ids for arg in ("--job", job_id)]
