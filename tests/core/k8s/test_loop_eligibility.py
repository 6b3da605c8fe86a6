"""The control loop's binds on a live cluster honour the pod's node constraints.

kube-scheduler's node filters that the resource model does not cover — cordons, taints
against tolerations, ``nodeSelector``, required node affinity — are the secondary
scheduler's (``node_eligibility``). The loop's bind actuator re-checks them against the
pod as the API server has it before posting the Binding, and refuses a node they rule
out, naming the filter; the live collector tells the reconcilers which nodes each
pending pod may use, so they plan feasible placements in the first place.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubesage.adapters.gpu_training.defrag_settings import allowed_nodes
from kubesage.core.cli.loop_sources import LiveClusterCollector
from kubesage.core.k8s.actuators import live_actuators
from kubesage.core.k8s.binding import node_refusal
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.k8s.namespaces import NamespaceCache
from kubesage.core.k8s.node_eligibility import node_fits_pod
from kubesage.core.k8s.translate import pod_request
from kubesage.core.loop.actions import Bind, PodRef
from kubesage.core.loop.reconciler import Actuator, Outcome
from kubesage.core.loop.world import ClusterObservation
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.types import Placement
from tests.core.k8s import running_sync, v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer, wait_until

WHY = {"reconciler": "test", "explanation": "a test asked"}
SCHEDULER = "kubesage"
MAINTENANCE = {"key": "maintenance", "value": "gpu", "effect": "NoSchedule"}


def cordoned(node: dict[str, Any]) -> dict[str, Any]:
    node["spec"]["unschedulable"] = True
    node["spec"]["taints"] = [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        MAINTENANCE,
    ]
    return node


def gpu_pod(name: str, **options: Any) -> dict[str, Any]:
    requests = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    return v1_pod(
        name, containers=[v1_container(requests=requests)], scheduler_name=SCHEDULER, **options
    )


def guard_on(
    node: str, selector: dict[str, Any], namespace_selector: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A pod running on ``node`` whose required anti-affinity repels, from that node, the
    pods ``selector`` matches (of the namespaces ``namespace_selector`` matches, if given)."""
    guard = gpu_pod("guard")
    guard["metadata"]["labels"] = {"app": "guard"}
    guard["spec"]["nodeName"] = node
    term: dict[str, Any] = {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
    if namespace_selector is not None:
        term["namespaceSelector"] = namespace_selector
    guard["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    return guard


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_node(cordoned(v1_node("gpu-a")))
        server.add_node(v1_node("gpu-b", extra_labels={"pool": "batch"}))
        yield server


@pytest.fixture
def sync(fake: FakeApiServer) -> Iterator[ClusterSync]:
    with running_sync(fake) as live:
        yield live


def bind_to(sync: ClusterSync, pod: dict[str, Any], node: str, gpu: int = 0) -> Bind:
    metadata = pod["metadata"]
    with sync.locked() as (state, _):
        index = state.node_index[node]
    return Bind(
        pod=PodRef(metadata["namespace"], metadata["name"], metadata["uid"]),
        request=pod_request(pod),
        placement=Placement(node=node, node_index=index, gpu_milli_by_index=((gpu, 1000),)),
        **WHY,
    )


def binder(fake: FakeApiServer, sync: ClusterSync) -> Actuator:
    return live_actuators(fake.client(), sync, make_policy("bestfit", PolicyContext()))[0]


def test_the_loop_never_binds_to_a_cordoned_tainted_node(
    fake: FakeApiServer, sync: ClusterSync
) -> None:
    pod = fake.add_pod(gpu_pod("w"))
    wait_until(lambda: len(sync.pending_pods(SCHEDULER)) == 1, what="the pod seen")
    assert not node_fits_pod(pod, fake.node("gpu-a"))  # the secondary scheduler's verdict
    with sync.locked() as (state, _):
        free_before = state.gpu_free_milli.copy()

    refused = binder(fake, sync).execute(bind_to(sync, pod, "gpu-a"))

    assert refused.outcome is Outcome.REFUSED, refused.detail
    assert "NodeUnschedulable: node gpu-a is cordoned" in refused.detail
    assert "nodeName" not in fake.pod("ml", "w")["spec"]
    with sync.locked() as (state, _):
        assert (state.gpu_free_milli == free_before).all()  # nothing assumed either
    done = binder(fake, sync).execute(bind_to(sync, pod, "gpu-b"))
    assert done.outcome is Outcome.DONE, done.detail
    assert fake.pod("ml", "w")["spec"]["nodeName"] == "gpu-b"

    # A pod that tolerates the cordon and the taint may go there.
    ops = gpu_pod("ops")
    ops["spec"]["tolerations"] = [{"operator": "Exists"}]  # tolerates every taint
    ops = fake.add_pod(ops)
    wait_until(lambda: len(sync.pending_pods(SCHEDULER)) == 1, what="the pod seen")
    tolerated = binder(fake, sync).execute(bind_to(sync, ops, "gpu-a"))
    assert tolerated.outcome is Outcome.DONE, tolerated.detail
    assert fake.pod("ml", "ops")["spec"]["nodeName"] == "gpu-a"


def test_a_bind_into_a_domain_a_running_pod_repels_is_refused_at_bind_time(
    fake: FakeApiServer, sync: ClusterSync
) -> None:
    """A plan is made ticks before its bind: a pod kube-scheduler placed meanwhile may
    repel the one to be bound. The bind re-checks and is refused."""
    pod = fake.add_pod(gpu_pod("w"))
    fake.add_pod(guard_on("gpu-b", {}))  # repels every pod
    wait_until(lambda: len(sync.bound_pods()) == 1, what="the guard seen")
    refused = binder(fake, sync).execute(bind_to(sync, pod, "gpu-b"))
    assert refused.outcome is Outcome.REFUSED, refused.detail
    assert "InterPodAffinity" in refused.detail and "gpu-b" in refused.detail
    assert "nodeName" not in fake.pod("ml", "w")["spec"]


def test_a_node_outside_the_pods_node_selector_is_refused(
    fake: FakeApiServer, sync: ClusterSync
) -> None:
    pod = fake.add_pod(gpu_pod("picky", node_selector={"pool": "interactive"}))
    wait_until(lambda: len(sync.pending_pods(SCHEDULER)) == 1, what="the pod seen")
    refused = binder(fake, sync).execute(bind_to(sync, pod, "gpu-b"))
    assert refused.outcome is Outcome.REFUSED
    assert "NodeAffinity: node gpu-b does not match the pod's nodeSelector pool=interactive" in (
        refused.detail
    )


def test_refusals_name_the_filter_that_rules_the_node_out() -> None:
    tainted = v1_node("n1")
    tainted["spec"]["taints"] = [MAINTENANCE]
    assert node_refusal(v1_pod("p"), tainted) == (
        "TaintToleration: node n1 has the taint maintenance=gpu:NoSchedule, which the pod "
        "does not tolerate"
    )
    affine = v1_pod("p")
    term = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}
    affine["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    assert node_refusal(affine, v1_node("n2")) == (
        "NodeAffinity: node n2 does not match the pod's required node affinity"
    )
    assert node_refusal(affine, v1_node("n3", extra_labels={"pool": "batch"})) is None
    # Only NoSchedule and NoExecute keep a pod off; PreferNoSchedule does not.
    soft = v1_node("n4")
    soft["spec"]["taints"] = [{"key": "busy", "effect": "PreferNoSchedule"}]
    assert node_refusal(v1_pod("p"), soft) is None
    # Required inter-pod anti-affinity: no node, as kubesage cannot check it.
    apart = v1_pod("p")
    apart["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}
            ]
        }
    }
    refusal = node_refusal(apart, v1_node("n5"))
    assert refusal is not None and "podAntiAffinity" in refusal and "kube-scheduler" in refusal
    # A GPU pod on a node without GPUs: the resource is named, not an affinity it lacks.
    assert node_refusal(gpu_pod("g"), v1_node("cpu", gpus=0)) == (
        "NodeResourcesFit: node cpu advertises no nvidia.com/gpu (Insufficient)"
    )


def test_the_live_collector_tells_which_nodes_each_pending_pod_may_use(
    fake: FakeApiServer, sync: ClusterSync
) -> None:
    fake.add_pod(gpu_pod("plain"))
    anywhere = gpu_pod("anywhere")
    anywhere["spec"]["tolerations"] = [{"operator": "Exists"}]
    fake.add_pod(anywhere)
    fake.add_pod(gpu_pod("picky", node_selector={"pool": "interactive"}))
    apart = gpu_pod("apart")
    apart["spec"]["tolerations"] = [{"operator": "Exists"}]
    apart["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}
            ]
        }
    }
    fake.add_pod(apart)
    wait_until(lambda: len(sync.pending_pods(SCHEDULER)) == 4, what="the pods seen")
    collector = LiveClusterCollector(sync, [SCHEDULER])
    observation = collector.collect().data
    assert isinstance(observation, ClusterObservation)
    pods = observation.pods
    assert pods["ml/plain"].eligible_nodes == frozenset({"gpu-b"})
    assert pods["ml/anywhere"].eligible_nodes is None  # no node is ruled out
    assert pods["ml/picky"].eligible_nodes == frozenset()
    assert pods["ml/apart"].eligible_nodes == frozenset()  # kube-scheduler's to place
    again = collector.collect().data
    assert isinstance(again, ClusterObservation)
    assert again.pods["ml/plain"] is pods["ml/plain"]  # unchanged: the same record

    fake.modify_node("gpu-a", lambda node: node["spec"].clear())  # uncordoned
    wait_until(lambda: not sync.nodes()["gpu-a"]["spec"], what="the node seen uncordoned")
    later = collector.collect().data
    assert isinstance(later, ClusterObservation)
    assert later.pods["ml/plain"].eligible_nodes is None


def test_the_live_collector_tells_where_a_running_gpu_pod_may_be_moved(
    fake: FakeApiServer, sync: ClusterSync
) -> None:
    picky = gpu_pod("picky", node_selector={"pool": "batch"})
    picky["spec"]["nodeName"] = "gpu-b"
    fake.add_pod(picky)
    requests = {"cpu": "1", "memory": "1Gi"}
    plain = v1_pod("cpu-only", containers=[v1_container(requests=requests)])
    plain["spec"]["nodeName"] = "gpu-b"
    fake.add_pod(plain)
    wait_until(lambda: len(sync.bound_pods()) == 2, what="the pods seen bound")
    collector = LiveClusterCollector(sync, [SCHEDULER])
    observation = collector.collect().data
    assert isinstance(observation, ClusterObservation)
    pods = observation.pods
    assert pods["ml/picky"].placement is not None
    assert pods["ml/picky"].eligible_nodes == frozenset({"gpu-b"})  # gpu-a is cordoned
    assert pods["ml/cpu-only"].eligible_nodes is None  # not gpu-defrag's to move: not asked
    assert allowed_nodes(pods) == {"ml/picky": frozenset({"gpu-b"})}
    again = collector.collect().data
    assert isinstance(again, ClusterObservation)
    assert again.pods["ml/picky"] is pods["ml/picky"]  # nothing changed: kept as it was

    def uncordoned_into_the_pool(node: dict[str, Any]) -> None:
        node["spec"].clear()
        node["metadata"]["labels"]["pool"] = "batch"

    fake.modify_node("gpu-a", uncordoned_into_the_pool)
    wait_until(lambda: not sync.nodes()["gpu-a"]["spec"], what="the node seen uncordoned")
    later = collector.collect().data
    assert isinstance(later, ClusterObservation)
    assert later.pods["ml/picky"].eligible_nodes is None  # every node may take it now


def test_a_pod_with_a_claimed_volume_is_neither_moved_nor_bound_by_the_loop(
    fake: FakeApiServer, sync: ClusterSync
) -> None:
    """Where its volume can be attached (a zonal disk, a local PersistentVolume) is not
    known to the loop: a StatefulSet's GPU pod moved, or a waiting pod bound, could land
    where the volume cannot follow. No node is eligible; kube-scheduler places them."""
    running = gpu_pod("db-0")
    running["spec"]["nodeName"] = "gpu-b"
    waiting = gpu_pod("db-1")
    for pod in (running, waiting):
        pod["spec"]["tolerations"] = [{"operator": "Exists"}]
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]
        fake.add_pod(pod)
    wait_until(lambda: len(sync.bound_pods()) == 1, what="the running pod seen")
    wait_until(lambda: len(sync.pending_pods(SCHEDULER)) == 1, what="the waiting pod seen")
    observation = LiveClusterCollector(sync, [SCHEDULER]).collect().data
    assert isinstance(observation, ClusterObservation)
    assert observation.pods["ml/db-0"].eligible_nodes == frozenset()
    assert observation.pods["ml/db-1"].eligible_nodes == frozenset()
    assert allowed_nodes(observation.pods)["ml/db-0"] == frozenset()


def test_a_running_pods_anti_affinity_narrows_where_a_pending_pod_may_go(
    fake: FakeApiServer, sync: ClusterSync
) -> None:
    fake.add_pod(guard_on("gpu-b", {"matchLabels": {"app": "trainer"}}))
    trainer = gpu_pod("trainer")
    trainer["metadata"]["labels"] = {"app": "trainer"}
    trainer["spec"]["tolerations"] = [{"operator": "Exists"}]  # gpu-a's cordon too
    fake.add_pod(trainer)
    other = gpu_pod("other")
    other["metadata"]["labels"] = {"app": "other"}
    other["spec"]["tolerations"] = [{"operator": "Exists"}]
    fake.add_pod(other)
    wait_until(lambda: len(sync.pending_pods(SCHEDULER)) == 2, what="the pods seen")
    wait_until(lambda: len(sync.bound_pods()) == 1, what="the guard seen")
    observation = LiveClusterCollector(sync, [SCHEDULER]).collect().data
    assert isinstance(observation, ClusterObservation)
    assert observation.pods["ml/trainer"].eligible_nodes == frozenset({"gpu-a"})
    assert observation.pods["ml/other"].eligible_nodes is None  # not selected by the guard


TEAM_ML = {"matchLabels": {"team": "ml"}}


def trainer_in(namespace: str) -> dict[str, Any]:
    """An app=trainer GPU pod of ``namespace`` that tolerates every taint (gpu-a's cordon)."""
    trainer = gpu_pod("trainer", namespace=namespace)
    trainer["metadata"]["labels"] = {"app": "trainer"}
    trainer["spec"]["tolerations"] = [{"operator": "Exists"}]
    return trainer


def test_a_running_pods_namespace_selector_is_read_from_the_namespaces_labels(
    fake: FakeApiServer, sync: ClusterSync
) -> None:
    """The guard repels app=trainer pods of the namespaces labelled team=ml: with the
    namespace cache (as ``kubesage serve`` runs it) only those; without it, every
    namespace's, the safe side."""
    fake.add_namespace("research", {"team": "ml"})
    fake.add_namespace("shop", {"team": "web"})
    fake.add_pod(guard_on("gpu-b", {"matchLabels": {"app": "trainer"}}, TEAM_ML))
    trainers = {space: fake.add_pod(trainer_in(space)) for space in ("research", "shop")}
    wait_until(lambda: len(sync.pending_pods(SCHEDULER)) == 2, what="the pods seen")
    wait_until(lambda: len(sync.bound_pods()) == 1, what="the guard seen")
    with NamespaceCache(fake.client(), backoff_s=0.02, max_backoff_s=0.1) as namespaces:
        assert namespaces.wait_until_synced(10)
        observation = LiveClusterCollector(sync, [SCHEDULER], namespaces).collect().data
        assert isinstance(observation, ClusterObservation)
        assert observation.pods["research/trainer"].eligible_nodes == frozenset({"gpu-a"})
        assert observation.pods["shop/trainer"].eligible_nodes is None
        unknown = LiveClusterCollector(sync, [SCHEDULER]).collect().data
        assert isinstance(unknown, ClusterObservation)
        assert unknown.pods["shop/trainer"].eligible_nodes == frozenset({"gpu-a"})
        # The check before a bind reads them too.
        policy = make_policy("bestfit", PolicyContext())
        refused = live_actuators(fake.client(), sync, policy)[0].execute(
            bind_to(sync, trainers["shop"], "gpu-b", gpu=1)
        )
        assert refused.outcome is Outcome.REFUSED, refused.detail
        assert "podAntiAffinity" in refused.detail
        checked = live_actuators(fake.client(), sync, policy, namespace_labels=namespaces)[0]
        done = checked.execute(bind_to(sync, trainers["shop"], "gpu-b", gpu=1))
        assert done.outcome is Outcome.DONE, done.detail
        refused = checked.execute(bind_to(sync, trainers["research"], "gpu-b", gpu=2))
        assert refused.outcome is Outcome.REFUSED, refused.detail


def test_a_namespace_relabelled_into_a_selector_moves_a_running_pods_nodes(
    fake: FakeApiServer, sync: ClusterSync
) -> None:
    """A running GPU pod's nodes are kept between collects until something they depend on
    changes: a namespace relabelled into the guard's namespaceSelector is such a change."""
    fake.add_namespace("shop", {"team": "web"})
    fake.add_pod(guard_on("gpu-b", {"matchLabels": {"app": "trainer"}}, TEAM_ML))
    trainer = trainer_in("shop")
    trainer["spec"]["nodeName"] = "gpu-a"
    fake.add_pod(trainer)
    wait_until(lambda: len(sync.bound_pods()) == 2, what="the pods seen")
    with NamespaceCache(fake.client(), backoff_s=0.02, max_backoff_s=0.1) as namespaces:
        assert namespaces.wait_until_synced(10)
        collector = LiveClusterCollector(sync, [SCHEDULER], namespaces)
        before = collector.collect().data
        assert isinstance(before, ClusterObservation)
        assert before.pods["shop/trainer"].eligible_nodes is None  # gpu-b too
        generation = namespaces.generation
        fake.label_namespace("shop", {"team": "ml"})
        wait_until(lambda: namespaces.generation > generation, what="the relabel")
        after = collector.collect().data
    assert isinstance(after, ClusterObservation)
    assert after.pods["shop/trainer"].eligible_nodes == frozenset({"gpu-a"})
