"""The control loop's faults end to end on a live cluster path (issue 14's tests, 4).

The cluster path is :mod:`tests.e2e.live_cluster`'s (the FAKE API server under the
real client, ClusterSync, the live actuators and ``live_loop``): Prometheus going away
mid-run (a real Prometheus, stopped), an API error in the middle of a plan, and a
leader that dies in the middle of a tick.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kubesage.core.cli.loop_options import loop_settings
from kubesage.core.loop.audit import AuditLog, AuditRecord
from kubesage.core.observability import metrics
from tests.core.conftest import start_prometheus
from tests.e2e.live_cluster import (
    LiveCluster,
    ReplicaSetController,
    assert_no_pod_lost,
    audit,
    pytorch_job,
    run_until_bound,
    scatter,
)

MAX_AGE_S = 1.5
"""The loop acts on no data older than this in the Prometheus test."""


def stale_ticks() -> float:
    return metrics.REGISTRY.get_sample_value("kubesage_loop_stale_ticks_total") or 0.0


def test_prometheus_down_mid_run_leaves_the_data_stale_and_nothing_executed(
    two_nodes: LiveCluster, tmp_path: Path
) -> None:
    """On the wall clock ``kubesage serve`` uses: Prometheus answers the first tick, then
    stops; once its last answer is older than ``max_data_age_s``, what is decided from it
    is not executed. ``gpu-elastic`` decides from every source (the utilisation it reads
    comes through them), so its scale of PyTorchJob ml/llama, asked for once the job is
    marked in validation, is ``stale``; the Kubernetes data itself is fresh."""
    live = two_nodes
    operator = pytorch_job(live)
    prometheus = start_prometheus(tmp_path / "prometheus", None, [])
    try:
        log = tmp_path / "audit.jsonl"
        settings = loop_settings(audit_log=log, prometheus=prometheus.url, max_data_age_s=MAX_AGE_S)
        control = live.loop(settings, wall_clock=True)
        first = live.tick(control)
        sources = {status.name: status for status in first.collectors}
        assert not first.stale
        assert sources["prometheus"].ok and not sources["prometheus"].stale
        assert not [r for r in first.records if r.plan]
    finally:
        prometheus.stop()
    for index in range(2):
        live.fake.modify_pod(
            "ml",
            f"llama-worker-{index}",
            lambda pod: pod["metadata"]["annotations"].update(
                {"kubesage.io/training-phase": "validation"}
            ),
        )
    live.settle()
    time.sleep(MAX_AGE_S + 0.2)
    before = stale_ticks()
    report = live.tick(control)
    assert report.stale and stale_ticks() == before + 1
    sources = {status.name: status for status in report.collectors}
    assert sources["prometheus"].stale and "unreachable" in sources["prometheus"].detail
    assert not sources["kubernetes"].stale
    (plan,) = [r for r in report.records if r.action == "plan"]
    assert (plan.reconciler, plan.outcome) == ("gpu-elastic", "stale")
    assert f"over the {MAX_AGE_S:g} s allowed" in plan.detail and "prometheus" in plan.detail
    assert [r["outcome"] for r in audit(log) if r["action"] == "plan"] == ["stale"]
    assert live.fake.requests_to("PATCH", r"/pytorchjobs/llama$") == []
    assert operator.replicas == 2


def test_an_api_error_mid_plan_rolls_it_back_and_no_pod_is_lost(
    fragmented: LiveCluster, tmp_path: Path
) -> None:
    live = fragmented
    scatter(live)
    ReplicaSetController(live.fake)
    # Every attempt of the plan's first bind (the Binder tries three times) fails.
    live.fake.fail("POST", r"/binding$", 500, times=3)
    log = tmp_path / "audit.jsonl"
    control = live.loop(loop_settings(audit_log=log))
    secondary = live.secondary(control)
    live.tick(control)
    steps = [r for r in audit(log) if r["plan"]]
    assert [(r["action"], r["outcome"]) for r in steps] == [
        ("evict", "done"),
        ("bind", "failed"),
        ("plan", "rolled-back"),
    ]
    assert "HTTP 500" in steps[1]["detail"]
    assert steps[2]["detail"].startswith("step 2/3 (bind ml/share-a-0) failed")
    assert steps[2]["detail"].endswith("done before it: evict ml/share-a-0; reservations released")
    # Nothing lost: the evicted pod's replacement waits; every other pod is where it was.
    (replacement,) = live.owned_by("share-a")
    assert not replacement["spec"].get("nodeName")
    assert live.node_of("train-0") is None
    # Later ticks (and the secondary scheduler) finish what the plan started.
    live.settle()
    secondary.schedule_once()
    assert live.node_of("train-0") or run_until_bound(live, control, secondary, 2) <= 2
    assert (live.node_of("train-0"), live.gpus_of("train-0")) == ("n1", "0")
    assert_no_pod_lost(live)
    assert live.evicted() == ["share-a-0"]


class Died(BaseException):
    """The leader's process ended (nothing the loop catches)."""


class DyingAudit(AuditLog):
    """The first leader's audit log: the process dies right after a scale is recorded
    done, before the rest of its plan is recorded."""

    def append(self, record: AuditRecord) -> None:
        super().append(record)
        if (record.action, record.outcome) == ("scale", "done"):
            raise Died(record.target)


def test_a_new_leader_does_not_repeat_what_the_old_one_finished(
    two_nodes: LiveCluster, tmp_path: Path
) -> None:
    """PyTorchJob ml/llama is annotated in validation (the override): ``gpu-elastic``
    asks for its minimum. The first leader scales it and dies mid-plan; the second,
    on the same audit file, asks for the same plan and finds its step done."""
    live = two_nodes
    operator = pytorch_job(live, annotations={"kubesage.io/training-phase": "validation"})
    log = tmp_path / "audit.jsonl"
    settings = loop_settings(audit_log=log)
    first = live.loop(settings)
    first.audit.close()
    first.audit = DyingAudit(log)
    with pytest.raises(Died):
        live.tick(first)
    first.audit.close()
    patches = live.fake.requests_to("PATCH", r"/pytorchjobs/llama$")
    assert len(patches) == 1 and operator.replicas == 1
    (scaled,) = [r for r in audit(log) if r["plan"]]  # no record of the plan's end
    assert (scaled["action"], scaled["outcome"]) == ("scale", "done")
    # The new leader starts before the operator removed a worker: the job still has two.
    second = live.loop(settings)
    assert scaled["key"] in second.audit.done_keys()
    report = live.tick(second)
    outcomes = [(r.action, r.outcome, r.plan) for r in report.records if r.plan]
    assert outcomes == [
        ("scale", "already-done", scaled["plan"]),
        ("plan", "done", scaled["plan"]),
    ]
    assert len(live.fake.requests_to("PATCH", r"/pytorchjobs/llama$")) == 1
