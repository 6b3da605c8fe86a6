"""The control loop drives a real Flink job: the registry lists the sample job (and one on
a JobManager that is down), and a real ``ControlLoop`` — an embedded cluster for its
cluster state, the ``flink`` collector, ``flink-autoscaler`` and the rescale actuator —
rescales the backpressured operator in place and audits it.

The sample job offers 40 rec/s to an operator that handles 20 rec/s per subtask: at
the target utilisation of 0.8 the ideal parallelism is ceil(40 / (20 × 0.8)) = 3.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from benchmarks.flink_support.cluster import LocalFlinkCluster, free_port
from kubesage.adapters.flink.autoscaler import AutoscalerSettings
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.loop_clients import ClientPool
from kubesage.adapters.flink.loop_observe import RegisteredJobsCollector
from kubesage.adapters.flink.loop_rescale import FlinkRescaleActuator
from kubesage.adapters.flink.loop_scaling import FlinkAutoscaler
from kubesage.adapters.flink.registry import JobRegistry, RunRecord
from kubesage.core.cli.loop import build_loop
from kubesage.core.cli.loop_sources import EmbeddedClusterCollector
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.loop.audit import AuditLog, AuditRecord
from kubesage.core.loop.settings import LoopSettings, ReconcilerContext

from .conftest import submit_sample, vertex_ids

RATE, CAPACITY = 40.0, 20.0
SOURCE = "Source: sequence -> pace"
# Shorter than the defaults so the test decides within seconds of the job's start.
SETTINGS = AutoscalerSettings(exclude=frozenset({SOURCE}), settle_s=5.0, stable_observations=2)
TICK_S = 2.0
DEADLINE_S = 75.0


@pytest.mark.slow
def test_the_loop_rescales_a_registered_job_and_audits_it(
    flink_cluster: LocalFlinkCluster, flink_client: FlinkClient, tmp_path: Path
) -> None:
    job_id = submit_sample(flink_cluster, flink_client, rate=RATE, capacity=CAPACITY)
    dead = f"http://127.0.0.1:{free_port()}"
    clients = ClientPool()
    try:
        registry = JobRegistry(tmp_path / "flink-jobs.yaml")
        registry.add(
            RunRecord(job_id="0" * 32, job_key="elsewhere", jobmanager=dead, submitted_at_ms=1)
        )
        registry.add(
            RunRecord(
                job_id=job_id,
                job_key="sample",
                jobmanager=flink_cluster.rest_url,
                submitted_at_ms=2,
                parallelism=1,
            )
        )
        audit_path = tmp_path / "audit.jsonl"
        control = build_loop(
            EmbeddedClusterCollector(EmbeddedCluster.synthetic(2)),
            [FlinkRescaleActuator(clients, timeout_s=60.0)],
            ReconcilerContext(settings=LoopSettings(tick_s=TICK_S, audit_log=audit_path)),
            reconcilers=[FlinkAutoscaler(SETTINGS)],
            collectors=[RegisteredJobsCollector(registry, clients, window_s=8.0)],
        )
        assert control.reconciler_names == ["flink-autoscaler"]
        done: list[AuditRecord] = []
        notes: list[str] = []
        deadline = time.monotonic() + DEADLINE_S
        while not done and time.monotonic() < deadline:
            report = control.tick()
            notes += [r.explanation for r in report.records if r.action == "note"]
            done = [r for r in report.records if r.action == "flink-rescale"]
            if not done:
                time.sleep(TICK_S)

        [record] = done
        assert (record.reconciler, record.target, record.outcome) == (
            "flink-autoscaler",
            f"flink/{job_id}",
            "done",
        ), record.detail
        assert record.explanation.startswith("rescale: ")
        slow = vertex_ids(flink_client, job_id)["slow"]
        parallelism = flink_client.job(job_id).vertex(slow).parallelism
        ideal = math.ceil(RATE / (CAPACITY * SETTINGS.target_utilisation))
        assert abs(parallelism - ideal) <= 1, (parallelism, ideal)
        assert f"{slow}={parallelism}" in record.detail
        # The JobManager that is down hid only its own job, and the notes said so.
        assert any(f"job elsewhere ({'0' * 32}) at {dead}" in note for note in notes), notes
        # Audited in the file: a new leader reading it back would not rescale again.
        lines = [json.loads(line) for line in audit_path.read_text().splitlines()]
        assert [line["outcome"] for line in lines if line["key"] == record.key] == ["done"]
        assert AuditLog(audit_path).is_done(record.key, record.time)
    finally:
        clients.close()
        flink_client.cancel(job_id)
