"""Copies of the sample job on a local cluster, submitted the way ``kubesage flink submit`` does.

The checkpoint-staggering tests and benchmark run the same experiment: several
registered copies of the sample job (``sample_job.py`` beside this file) under backpressure,
with Flink's periodic checkpoints off, so that only kubesage's coordinator
checkpoints them. The sample job itself runs in the Flink venv (it imports pyflink),
so it is passed to ``flink run`` by path, never imported here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.registry import JobRegistry
from kubesage.adapters.flink.submit import SubmitRequest, run_flink, submit

from .cluster import LocalFlinkCluster

log = logging.getLogger(__name__)

SAMPLE_JOB = Path(__file__).with_name("sample_job.py")
BACKLOGGED_NO_PERIODIC = ("--rate", "1000", "--capacity", "4", "--checkpoint-interval-ms", "0")
"""A backlog behind a 0.25 s/record operator (unaligned checkpoints last ~100s of ms);
no periodic checkpoints from Flink: the job is checkpointed only on request."""


def submit_sample_copies(
    cluster: LocalFlinkCluster,
    registry: JobRegistry,
    count: int,
    *,
    sample_args: Sequence[str] = BACKLOGGED_NO_PERIODIC,
    prefix: str = "stagger",
    checkpoint_interval_ms: int = 10_000,
    script: Path = SAMPLE_JOB,
) -> list[str]:
    """Submit ``count`` copies at parallelism 1 through :func:`submit`; their job ids.

    Each is registered as ``<prefix>-<i>`` with ``checkpoint_interval_ms``, driven by the
    coordinator. On a failure the copies already running are cancelled. A TaskManager
    lost to an earlier job's crash is replaced first, so the copies get slots.
    """
    cluster.ensure_taskmanager()
    job_ids: list[str] = []
    try:
        for index in range(count):
            request = SubmitRequest(
                flink_args=(
                    *cluster.python_args(),
                    "-py",
                    str(script),
                    *sample_args,
                    "--name",
                    f"{prefix}-{index}",
                ),
                jobmanager=cluster.rest_url,
                name=f"{prefix}-{index}",
                parallelism=1,
                checkpoint_interval_ms=checkpoint_interval_ms,
                flink_home=cluster.flink_home,
            )
            outcome = submit(
                request,
                registry,
                runner=lambda command, env: run_flink(command, env | cluster.flink_env()),
            )
            job_ids.append(outcome.job_id)
            log.info("submitted %s-%d: %s", prefix, index, outcome.job_id)
    except BaseException:
        cancel_jobs(cluster.rest_url, job_ids)
        raise
    return job_ids


def cancel_jobs(rest_url: str, job_ids: Iterable[str]) -> None:
    """Cancel each job; a failure is logged, so every job gets its cancel."""
    with FlinkClient(rest_url) as client:
        for job_id in job_ids:
            try:
                client.cancel(job_id)
            except FlinkError as exc:
                log.warning("job %s: cancel failed: %s", job_id, exc)


@contextmanager
def sample_copies(
    cluster: LocalFlinkCluster,
    registry: JobRegistry,
    count: int,
    *,
    sample_args: Sequence[str] = BACKLOGGED_NO_PERIODIC,
    script: Path = SAMPLE_JOB,
) -> Iterator[list[str]]:
    """:func:`submit_sample_copies` for the duration of a ``with`` block, then cancelled.

    ``script`` (run with ``sample_args``) replaces the sample job, e.g. ``state_job.py``.
    """
    job_ids = submit_sample_copies(cluster, registry, count, sample_args=sample_args, script=script)
    try:
        yield job_ids
    finally:
        cancel_jobs(cluster.rest_url, job_ids)
