"""The control loop end to end on a live cluster path (issue 14's tests).

Everything but the cluster is what ``kubesage serve`` runs: the real ``kubernetes``
client, ClusterSync, the live actuators, the loop built by ``live_loop`` with the
installed reconcilers (``gpu-defrag``, ``gpu-elastic``, ``gpu-gang``,
``forecast-placement``) and the secondary scheduler beside it. The cluster is the FAKE
API server (:mod:`tests.fakes.apiserver`) with PodDisruptionBudgets, PyTorchJobs and
merge patches; the tests play the controllers it lacks
(:mod:`tests.e2e.live_cluster`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kubesage.adapters.gpu_training.gang_reconciler import (
    GANG_RANK_ANNOTATION,
    GANG_SIZE_ANNOTATION,
)
from kubesage.core.annotations import GPU_INDICES_ANNOTATION
from kubesage.core.cli.loop_options import loop_settings
from kubesage.core.perception import Snapshot
from kubesage.core.telemetry.features import NodeMetrics
from kubesage.core.topology.examples import topology_file
from kubesage.core.topology.graph import DRTG
from tests.e2e.live_cluster import (
    LiveCluster,
    ReplicaSetController,
    assert_no_pod_lost,
    audit,
    cluster,
    dgx_node,
    gpu_pod,
    owner_reference,
    pytorch_job,
    run_until_bound,
    scatter,
    sharing_budget,
)

Obj = dict[str, Any]

# -- 1. fragmentation (the cluster: tests.e2e.live_cluster.scatter) ---------------------------


@pytest.mark.parametrize("controller", ["prompt", "late"])
def test_fragmentation_migrates_the_cheapest_pod_and_the_waiting_pod_binds(
    fragmented: LiveCluster, tmp_path: Path, controller: str
) -> None:
    """prompt: the ReplicaSet controller replaces the evicted pod before the plan's next
    step, which binds the replacement; late: the replacement comes after the tick, the
    plan is rolled back at that step, and the next steps happen on later ticks."""
    live = fragmented
    scatter(live)
    if controller == "prompt":
        ReplicaSetController(live.fake)
    # A budget over the sharing pods allows one disruption: honoured, not in the way.
    sharing_budget(live, {"tier": "sharing"}, maxUnavailable=1)
    log = tmp_path / "audit.jsonl"
    control = live.loop(loop_settings(audit_log=log))
    secondary = live.secondary(control)
    live.tick(control)
    if controller == "late":
        steps = {r["action"]: r for r in audit(log) if r["plan"] and r["action"] != "plan"}
        assert steps["evict"]["outcome"] == "done"
        assert steps["bind"]["outcome"] == "refused"
        assert "no pending replacement with the same request yet" in steps["bind"]["detail"]
        (plan,) = [r for r in audit(log) if r["action"] == "plan"]
        assert plan["outcome"] == "rolled-back"
        late = gpu_pod("share-a-late", milli=500, qos="BestEffort", labels={"tier": "sharing"})
        late["metadata"]["ownerReferences"] = [owner_reference("ReplicaSet", "share-a", "apps/v1")]
        live.fake.add_pod(late)
    live.settle()
    secondary.schedule_once()
    took = 1 if live.node_of("train-0") else 1 + run_until_bound(live, control, secondary, 2)
    assert took <= 3, audit(log)
    assert (live.node_of("train-0"), live.gpus_of("train-0")) == ("n1", "0")
    # The cheapest pod moved (best-effort first); no Guaranteed pod, nothing else.
    assert live.evicted() == ["share-a-0"]
    assert_no_pod_lost(live)
    (replacement,) = live.owned_by("share-a")
    assert replacement["metadata"]["name"] != "share-a-0"
    if controller == "prompt":  # the plan's step bound the replacement where it planned
        name = replacement["metadata"]["name"]
        binds = [r for r in audit(log) if r["action"] == "bind" and r["outcome"] == "done"]
        assert [r["target"] for r in binds if f"its replacement ml/{name} " in r["detail"]] == [
            "ml/share-a-0"
        ]
        assert (live.node_of(name), live.gpus_of(name)) == ("n1", "1")


def test_a_budget_that_forbids_the_eviction_stops_the_plan_and_the_next_goes_around_it(
    fragmented: LiveCluster, tmp_path: Path
) -> None:
    """The PodDisruptionBudget refuses share-a's eviction: that plan stops and rolls back,
    and the next tick, told of the refusal, moves share-b instead of asking again."""
    live = fragmented
    scatter(live)
    ReplicaSetController(live.fake)
    sharing_budget(live, {"app": "share-a"}, minAvailable=1)  # share-a's one pod must stay
    log = tmp_path / "audit.jsonl"
    control = live.loop(loop_settings(audit_log=log))
    assert run_until_bound(live, control, live.secondary(control), 3) == 2
    records = audit(log)
    evictions = [r for r in records if r["action"] == "evict"]
    assert [(r["target"], r["outcome"]) for r in evictions] == [
        ("ml/share-a-0", "refused"),
        ("ml/share-b-0", "done"),
    ]
    assert "would violate the pod's disruption budget" in evictions[0]["detail"]
    plans = [r for r in records if r["action"] == "plan"]
    assert [r["outcome"] for r in plans] == ["rolled-back", "done"]
    assert "share-a-0" in {p["metadata"]["name"] for p in live.fake.pods()}
    assert_no_pod_lost(live)


def test_with_no_eviction_budget_nothing_is_evicted_and_the_audit_says_why(
    fragmented: LiveCluster, tmp_path: Path
) -> None:
    live = fragmented
    scatter(live)
    log = tmp_path / "audit.jsonl"
    control = live.loop(loop_settings(audit_log=log, max_evictions_per_tick=0))
    report = live.tick(control)
    assert live.evicted() == [] and live.node_of("train-0") is None
    assert report.notes["gpu-defrag"] == (
        "ml/train-0 is pending only for fragmentation; the eviction budget is 0, so no "
        "migration is planned",
    )
    notes = [r for r in audit(log) if r["reconciler"] == "gpu-defrag"]
    assert [(r["action"], r["explanation"]) for r in notes] == [
        ("note", report.notes["gpu-defrag"][0])
    ]


# -- 2. elastic training -----------------------------------------------------------------------
#
# PyTorchJob ml/llama runs two 4-GPU workers (elastic 1..2), one on each 4-GPU node; an
# evaluation pod of four GPUs waits for room. The DCGM utilisation of its GPUs is
# replayed through a collector (a metric-map table, as the Prometheus collector's):
# training (95 %), then a validation phase (30 %), then training again.


class DcgmReplay:
    """dcgm-exporter's per-GPU utilisation of every node, replayed: the value the test
    sets now, stamped with the loop's clock (a Collector of NodeMetrics)."""

    name = "dcgm-replay"
    failures = 0

    def __init__(self, live: LiveCluster, nodes: tuple[str, ...], gpus: int) -> None:
        self.live = live
        self.nodes = nodes
        self.columns = tuple(f"dcgm.gpu_util_percent.gpu{gpu}" for gpu in range(gpus))
        self.utilisation = 95.0

    def collect(self) -> Snapshot[NodeMetrics]:
        now = self.live.clock.now()
        values = np.full((len(self.nodes), len(self.columns)), self.utilisation)
        return Snapshot(NodeMetrics(self.nodes, self.columns, values, now), now)


def test_elastic_job_shrinks_through_validation_and_grows_back(
    two_nodes: LiveCluster, tmp_path: Path
) -> None:
    live = two_nodes
    operator = pytorch_job(live)
    live.fake.add_pod(gpu_pod("eval-0", gpus=4, qos="Guaranteed"))
    log = tmp_path / "audit.jsonl"
    # The simulated clock runs ahead of the ClusterSync's wall-clock stamps: an hour of
    # data age is allowed so the ~4 simulated minutes of this test act on fresh data.
    replay = DcgmReplay(live, ("n1", "n2"), 4)  # beside the cluster, as --prometheus adds one
    control = live.loop(loop_settings(audit_log=log, max_data_age_s=3600.0), collectors=[replay])
    secondary = live.secondary(control)
    replicas: list[int] = []
    held: tuple[str | None, str] | None = None
    for tick in range(1, 91):
        live.tick(control)
        operator.reconcile()
        live.settle()
        secondary.schedule_once()
        replicas.append(operator.replicas)
        if tick == 14:
            replay.utilisation = 30.0  # the validation phase starts
        if held is None and live.node_of("eval-0"):
            held = (live.node_of("eval-0"), live.gpus_of("eval-0"))
            live.fake.delete_pod("ml", "eval-0")  # evaluated
            replay.utilisation = 95.0  # training resumes
        if (
            held
            and operator.replicas == 2
            and all(w["spec"].get("nodeName") for w in operator.workers())
        ):
            break
    records = [r for r in audit(log) if r["action"] == "scale"]
    assert [(r["outcome"], r["detail"]) for r in records] == [
        ("done", "PyTorchJob/ml/llama: scale to 1 applied"),
        ("done", "PyTorchJob/ml/llama: scale to 2 applied"),
    ], records
    assert "validation phase" in records[0]["explanation"]
    assert "train phase" in records[1]["explanation"]
    # Shrunk once, held at the minimum, grown back: never flapping.
    assert [r for i, r in enumerate(replicas) if i == 0 or replicas[i - 1] != r] == [2, 1, 2]
    # While it was at the minimum its released GPUs held the evaluation pod.
    assert held == ("n2", "0,1,2,3")
    assert [w["spec"]["nodeName"] for w in operator.workers()] == ["n1", "n2"]
    assert len(live.fake.requests_to("PATCH", r"/pytorchjobs/llama$")) == 2


# -- 3. gang placement -------------------------------------------------------------------------
#
# The DGX H100 example topology (16 nodes, four racks) as the fake's nodes. One GPU of
# every node is taken except rack-a1-node-00, rack-a2-node-01 and rack-a2-node-02: the
# ring for two 8-GPU members is the rack-a2 pair (one rack switch, no uplink). Members:
# a master and a worker of 8 whole GPUs each (PodGroup annotations, min-available 2).

DGX_FREE = ("rack-a1-node-00", "rack-a2-node-01", "rack-a2-node-02")


def gang_member(gang: str, role: str) -> Obj:
    labels = {
        "training.kubeflow.org/replica-type": role,
        "training.kubeflow.org/replica-index": "0",
    }
    annotations = {"kubesage.io/gang": gang, "kubesage.io/gang-min-available": "2"}
    return gpu_pod(
        f"{gang}-{role}-0",
        gpus=8,
        qos="Guaranteed",
        cpu="64",
        memory="512Gi",
        labels=labels,
        annotations=annotations,
    )


@pytest.fixture
def dgx_pod() -> Iterator[LiveCluster]:
    names = DRTG.from_yaml(topology_file("dgx-h100-pod")).node_names
    busy = [
        gpu_pod(f"busy-{name}", node=name, gpu_indices="7", scheduler="default-scheduler")
        for name in names
        if name not in DGX_FREE
    ]
    yield from cluster([dgx_node(name) for name in names], busy)


def test_gang_is_placed_on_the_ring_all_members_or_none(
    dgx_pod: LiveCluster, tmp_path: Path
) -> None:
    live = dgx_pod
    log = tmp_path / "audit.jsonl"
    control = live.loop(loop_settings(audit_log=log, topology="dgx-h100-pod"))
    secondary = live.secondary(control)
    for role in ("worker", "master"):
        live.fake.add_pod(gang_member("llama", role))
    live.settle()
    # The secondary scheduler leaves the gang to the loop (gpu-gang claims it).
    cycle = secondary.schedule_once()
    assert cycle.bound == {}
    assert cycle.waiting == {"ml/llama": "gang ml/llama: placed by the control loop"}
    live.tick(control)
    master, worker = live.pod("llama-master-0"), live.pod("llama-worker-0")
    assert {master["spec"]["nodeName"], worker["spec"]["nodeName"]} == set(DGX_FREE[1:])
    for rank, pod in enumerate((master, worker)):  # the master first in rank order
        annotations = pod["metadata"]["annotations"]
        assert annotations[GANG_RANK_ANNOTATION] == str(rank)
        assert annotations[GANG_SIZE_ANNOTATION] == "2"
        gpus = sorted(int(g) for g in annotations[GPU_INDICES_ANNOTATION].split(","))
        assert gpus == list(range(8))
    (plan,) = [r for r in audit(log) if r["action"] == "plan"]
    assert (plan["reconciler"], plan["outcome"]) == ("gpu-gang", "done")
    assert "rank 0: ml/llama-master-0" in plan["explanation"]
    binds = [r for r in audit(log) if r["action"] == "bind"]
    assert [r["target"] for r in binds] == ["ml/llama-master-0", "ml/llama-worker-0"]
    # A second 16-GPU gang: one member would fit (rack-a1-node-00), both do not: none bound.
    for role in ("worker", "master"):
        live.fake.add_pod(gang_member("big", role))
    report = live.tick(control)
    live.settle()
    cycle = secondary.schedule_once()
    assert cycle.bound == {}
    assert cycle.waiting == {"ml/big": "gang ml/big: placed by the control loop"}
    assert live.node_of("big-master-0") is None and live.node_of("big-worker-0") is None
    (note,) = report.notes["gpu-gang"]
    assert note.startswith("gang ml/big: 2 member(s) × 8 GPU(s) do not fit")
    assert note.endswith("none bound")


def test_a_gang_with_a_claimed_volume_is_left_to_the_secondary_scheduler(
    dgx_pod: LiveCluster, tmp_path: Path
) -> None:
    """The loop gives a pod with a PersistentVolumeClaim no node (where the volume can
    follow is not known to it), so it must not claim its gang either: claimed, the gang
    would be placed by nobody. The secondary scheduler keeps it and binds it."""
    live = dgx_pod
    control = live.loop(loop_settings(audit_log=tmp_path / "audit.jsonl", topology="dgx-h100-pod"))
    secondary = live.secondary(control)
    for role in ("worker", "master"):
        member = gang_member("db", role)
        member["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]
        live.fake.add_pod(member)
    live.settle()
    cycle = secondary.schedule_once()
    assert "ml/db" not in cycle.waiting
    assert sorted(cycle.bound) == ["ml/db-master-0", "ml/db-worker-0"]
