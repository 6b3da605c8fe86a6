"""The local Flink session cluster replaces a TaskManager that died."""

from __future__ import annotations

import os
import signal

from benchmarks.flink_support.cluster import LocalFlinkCluster
from kubesage.adapters.flink.client import FlinkClient

from .conftest import wait_until


def test_a_dead_taskmanager_is_replaced(
    flink_cluster: LocalFlinkCluster, flink_client: FlinkClient
) -> None:
    assert flink_cluster.ensure_taskmanager() is False  # alive: nothing to do
    slots = flink_client.overview().slots_total
    for pid in flink_cluster.taskmanager_pids():
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not flink_cluster.taskmanager_pids(), timeout_s=10, what="TM exit")
    assert flink_cluster.ensure_taskmanager() is True
    assert flink_cluster.taskmanager_pids()
    assert flink_client.overview().taskmanagers == 1  # the dead one is no longer listed
    wait_until(
        lambda: flink_client.overview().slots_available >= slots,
        timeout_s=90,
        what=f"{slots} free slots on the new TaskManager",
    )
