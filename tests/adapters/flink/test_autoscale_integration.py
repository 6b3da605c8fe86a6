"""On a real Flink cluster: from parallelism 1, the slow operator reaches its ideal
parallelism (±1) in at most two rescales, and nothing is backpressured afterwards.

The sample job offers 40 rec/s to an operator that handles 20 rec/s per subtask, so the
ideal parallelism at the target utilisation of 0.8 is ceil(40 / (20 × 0.8)) = 3.
"""

from __future__ import annotations

import math
import time
import warnings

import pytest

from benchmarks.flink_support.cluster import LocalFlinkCluster
from kubesage.adapters.flink.autoscaler import Autoscaler, AutoscalerSettings
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.adapters.flink.rescale import rescale_in_place

from .conftest import submit_sample

RATE, CAPACITY = 40.0, 20.0
SOURCE = "Source: sequence -> pace"
SETTINGS = AutoscalerSettings(exclude=frozenset({SOURCE}))
TICK_S = 5.0
DEADLINE_S = 240.0


@pytest.mark.slow
def test_autoscaler_reaches_ideal_parallelism(
    flink_cluster: LocalFlinkCluster, flink_client: FlinkClient
) -> None:
    job_id = submit_sample(flink_cluster, flink_client, rate=RATE, capacity=CAPACITY)
    try:
        autoscaler = Autoscaler(SETTINGS)
        collector = ObservationCollector(flink_client, job_id, window_s=20.0)
        rescales: list[dict[str, int]] = []
        first_valid_s = first_rescale_s = None
        calm_windows = 0
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and calm_windows < 2:
            observation = collector.collect()
            decision = autoscaler.decide(observation)
            if decision.action != "skip" and first_valid_s is None:
                first_valid_s = observation.time_s
            if decision.action == "rescale":
                first_rescale_s = first_rescale_s or observation.time_s
                old = {v.vertex_id: v.current for v in decision.vertices}
                outcome = rescale_in_place(flink_client, job_id, decision.changes, timeout_s=60)
                if not outcome.succeeded and flink_cluster.ensure_taskmanager():
                    # PyFlink's thread mode can crash the TaskManager as a rescale stops
                    # the Python operator (LocalFlinkCluster.ensure_taskmanager): with a
                    # new one registered, the same rescale is asked once more
                    warnings.warn(
                        "the Flink TaskManager died during the rescale; a new one was started",
                        stacklevel=1,
                    )
                    outcome = rescale_in_place(
                        flink_client, job_id, decision.changes, timeout_s=120
                    )
                assert outcome.succeeded, outcome.message
                autoscaler.record_rescale(time.time(), old, decision.changes)
                rescales.append(decision.changes)
                calm_windows = 0
            elif rescales and observation.drained(SOURCE, max_pending_records=2 * RATE):
                calm_windows += 1
            time.sleep(TICK_S)
        slow = next(v for v in flink_client.job(job_id).vertices if v.name == "slow")
        ideal = math.ceil(RATE / (CAPACITY * SETTINGS.target_utilisation))
        assert 1 <= len(rescales) <= 2, rescales
        assert abs(slow.parallelism - ideal) <= 1, (slow.parallelism, ideal)
        assert first_valid_s is not None and first_rescale_s is not None
        assert first_rescale_s - first_valid_s <= 120.0
        assert calm_windows >= 2, "backpressure or backlog remained after the rescale"
    finally:
        flink_client.cancel(job_id)
