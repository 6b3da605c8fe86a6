"""The local Flink session cluster replaces a TaskManager that died."""

from __future__ import annotations

import logging
import os
import signal

import pytest

from benchmarks.flink_support.cluster import LocalFlinkCluster
from kubesage.adapters.flink.client import FlinkClient

from .conftest import submit_sample, wait_until


def test_a_dead_taskmanager_is_replaced_before_the_next_submission(
    flink_cluster: LocalFlinkCluster, flink_client: FlinkClient, caplog: pytest.LogCaptureFixture
) -> None:
    assert flink_cluster.ensure_taskmanager() is False  # alive: nothing to do
    slots = flink_client.overview().slots_total
    for pid in flink_cluster.taskmanager_pids():
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not flink_cluster.taskmanager_pids(), timeout_s=10, what="TM exit")
    # What a module-scoped fixture does before any per-test check has run: submit.
    with caplog.at_level(logging.WARNING, logger="benchmarks.flink_support.cluster"):
        job_id = submit_sample(flink_cluster, flink_client, rate=5.0, capacity=50.0)
    try:
        assert "is gone; starting a new one" in caplog.text
        assert flink_cluster.taskmanager_pids()
        overview = flink_client.overview()
        assert overview.taskmanagers == 1  # the dead one is no longer listed
        assert overview.slots_total == slots
    finally:
        flink_client.cancel(job_id)  # a crash this causes is the next test's check to mend
