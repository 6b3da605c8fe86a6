"""The bind path with DRA against the fake API server (real client): a pod's ResourceClaim
gets kubesage's devices and its reservation before the Binding, conflicts are re-decided,
a failed bind rolls the allocation back, pods without claims bind as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubesage.core.annotations import GPU_INDICES_ANNOTATION
from kubesage.core.dra import api as dra_api
from kubesage.core.k8s.actuators import MIG_CONFIG_LABEL, LiveNodeLabeler
from kubesage.core.k8s.apiclient import ApiClient, load_api_client
from kubesage.core.k8s.binder import Binder
from kubesage.core.k8s.binding import BindActuator, assume_and_bind
from kubesage.core.k8s.dra_allocation import DELETE_PROTECTION_FINALIZER, DRA_DEVICES_ANNOTATION
from kubesage.core.k8s.dra_binding import ClaimAllocator
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.k8s.secondary import SecondaryScheduler
from kubesage.core.k8s.translate import mig_shape
from kubesage.core.loop.actions import Bind, LabelNode, PodRef
from kubesage.core.loop.reconciler import Outcome
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.types import NodeSpec, Placement, PodRequest
from tests.builders import node
from tests.builders import pod as pod_request
from tests.core.k8s import v1_node, v1_pod
from tests.fakes import dra_fixtures as fx
from tests.fakes.apiserver import RESOURCE_CLAIMS, FakeApiServer, wait_until

DGX = "dgx-h100-0"
PART = "h100-part-0"
WHY = {"reconciler": "gpu-gang", "explanation": "a test asked"}


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        for name in (DGX, PART):
            server.add_node(v1_node(name, gpus=8))
        server.add_resource_slice(fx.dgx_h100_slice(DGX))
        server.add_resource_slice(fx.partitionable_slice(PART))
        for device_class in fx.device_classes():
            server.add_device_class(device_class)
        yield server


@pytest.fixture
def api(fake: FakeApiServer) -> ApiClient:
    return fake.client()


class Cluster:
    """The one bind path of the control loop's Bind actions, on an embedded state."""

    def __init__(self, api: ApiClient, binder: Binder | None = None) -> None:
        nodes = [
            node(DGX, gpus=8, model="H100-80GB"),
            NodeSpec(
                name=PART,
                cpu_milli=96_000,
                memory_mib=393_216,
                gpu_count=2,
                gpu_model="H100-80GB",
                mig_enabled=True,
            ),
        ]
        self.view = EmbeddedCluster(nodes, [], "dra")
        self.claims = ClaimAllocator(api)
        policy = make_policy("bestfit", PolicyContext())
        bind = assume_and_bind(self.view, binder or Binder(api, attempts=1), policy, self.claims)
        self.actuator = BindActuator(bind)

    def bind(self, pod: dict[str, Any], request: PodRequest, placement: Placement) -> Any:
        meta = pod["metadata"]
        action = Bind(
            pod=PodRef(meta["namespace"], meta["name"], meta["uid"]),
            request=request,
            placement=placement,
            **WHY,
        )
        return self.actuator.execute(action)


def claim_pod(fake: FakeApiServer, name: str, claim: str) -> dict[str, Any]:
    pod = v1_pod(name, namespace="default", scheduler_name="kubesage")
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return fake.add_pod(pod)


def ring(*gpus: int) -> Placement:
    return Placement(node=DGX, node_index=0, gpu_milli_by_index=tuple((g, 1000) for g in gpus))


def devices(claim: dict[str, Any]) -> list[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [r["device"] for r in allocation.get("devices", {}).get("results", [])]


def other_holds(fake: FakeApiServer, device: str) -> None:
    """Another scheduler allocates ``device`` of the DGX to its own claim."""
    fake.add_claim(fx.gpu_claim("theirs"))
    fake.set_claim_status(
        "default",
        "theirs",
        {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpus",
                            "driver": dra_api.NVIDIA_GPU_DRIVER,
                            "pool": DGX,
                            "device": device,
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [DGX]}
                            ]
                        }
                    ]
                },
            }
        },
    )


def test_a_gang_member_gets_its_ring_in_results_order_reserved_before_the_bind(
    fake: FakeApiServer, api: ApiClient
) -> None:
    fake.add_claim(fx.gpu_claim("rank-0", count=4))
    pod = claim_pod(fake, "rank-0", "rank-0")
    result = Cluster(api).bind(pod, pod_request("default/rank-0", gpus=4), ring(6, 7, 5, 4))
    assert result.outcome is Outcome.DONE, result.detail

    claim = fake.claim("default", "rank-0")
    assert devices(claim) == ["gpu-6", "gpu-7", "gpu-5", "gpu-4"]  # the ring, in order
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "rank-0", "uid": pod["metadata"]["uid"]}
    ]
    assert DELETE_PROTECTION_FINALIZER in claim["metadata"]["finalizers"]
    bound = fake.pod("default", "rank-0")
    assert bound["spec"]["nodeName"] == DGX
    annotations = bound["metadata"]["annotations"]
    assert annotations[GPU_INDICES_ANNOTATION] == "6,7,5,4"
    assert annotations[DRA_DEVICES_ANNOTATION] == ",".join(f"{DGX}/gpu-{g}" for g in (6, 7, 5, 4))
    # The claim was reserved before the Binding was posted (PreBind order).
    order = [(r.method, r.path) for r in fake.requests if r.method in ("PUT", "POST")]
    status_put = order.index(
        ("PUT", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/rank-0/status")
    )
    binding = order.index(("POST", "/api/v1/namespaces/default/pods/rank-0/binding"))
    assert status_put < binding


def test_a_mig_slot_on_a_partitionable_node_allocates_its_partition(
    fake: FakeApiServer, api: ApiClient
) -> None:
    claim = fx.gpu_claim("mig")
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    exactly["deviceClassName"] = dra_api.MIG_DEVICE_CLASS
    exactly["selectors"] = [
        {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"}}
    ]
    fake.add_claim(claim)
    pod = claim_pod(fake, "mig-0", "mig")
    shape = mig_shape("3g.40gb")
    request = PodRequest(
        name="default/mig-0",
        cpu_milli=1000,
        memory_mib=1024,
        num_gpu=1,
        gpu_milli=shape.gpu_milli,
        mig=shape,
    )
    placement = Placement(
        node=PART, node_index=1, gpu_milli_by_index=((1, shape.gpu_milli),), mig_start=4
    )
    result = Cluster(api).bind(pod, request, placement)
    assert result.outcome is Outcome.DONE, result.detail
    assert devices(fake.claim("default", "mig")) == [fx.mig_device_name(1, "3g.40gb", 4)]
    assert fake.node(PART)["metadata"].get("labels", {}).get("nvidia.com/mig.config") is None


def test_a_device_another_scheduler_allocated_first_defers_the_pod(
    fake: FakeApiServer, api: ApiClient
) -> None:
    fake.add_claim(fx.gpu_claim("rank-0", count=2))
    pod = claim_pod(fake, "rank-0", "rank-0")
    other_holds(fake, "gpu-1")
    cluster = Cluster(api)
    result = cluster.bind(pod, pod_request("default/rank-0", gpus=2), ring(0, 1))
    assert result.outcome is Outcome.REFUSED
    assert f"{DGX}/gpu-1 is allocated to another claim" in result.detail
    assert "allocation" not in fake.claim("default", "rank-0").get("status", {})
    assert not fake.pod("default", "rank-0")["spec"].get("nodeName")
    with cluster.view.locked() as (state, _):  # the assumption is undone
        assert int(state.gpu_free_milli[0].sum()) == 8000
    # Re-decided on other GPUs, it goes through.
    assert cluster.bind(pod, pod_request("default/rank-0", gpus=2), ring(2, 3)).outcome is (
        Outcome.DONE
    )
    assert fake.allocated_devices()[(dra_api.NVIDIA_GPU_DRIVER, DGX, "gpu-1")] == "default/theirs"


def test_a_race_on_the_claim_is_re_read_and_re_decided_never_both(
    fake: FakeApiServer, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.add_claim(fx.gpu_claim("rank-0", count=2))
    pod = claim_pod(fake, "rank-0", "rank-0")
    write = fake.replace_status
    raced: list[bool] = []

    def racing(resource: Any, namespace: str, name: str, obj: dict[str, Any]) -> Any:
        if resource is RESOURCE_CLAIMS and name == "rank-0" and not raced:
            raced.append(True)  # between kubesage's read and write: another scheduler ...
            other_holds(fake, "gpu-1")  # ... takes gpu-1, and the claim changes
            fake.modify(
                RESOURCE_CLAIMS,
                namespace,
                name,
                lambda c: c["metadata"].update(labels={"touched": "yes"}),
            )
        return write(resource, namespace, name, obj)

    monkeypatch.setattr(fake, "replace_status", racing)
    cluster = Cluster(api)
    result = cluster.bind(pod, pod_request("default/rank-0", gpus=2), ring(0, 1))
    assert raced and cluster.claims.conflicts == 1
    assert result.outcome is Outcome.REFUSED and "gpu-1 is allocated" in result.detail
    holders = fake.allocated_devices()
    assert holders == {(dra_api.NVIDIA_GPU_DRIVER, DGX, "gpu-1"): "default/theirs"}
    assert DELETE_PROTECTION_FINALIZER not in (
        fake.claim("default", "rank-0")["metadata"].get("finalizers") or []
    )


def test_a_benign_conflict_is_retried(fake: FakeApiServer, api: ApiClient) -> None:
    fake.add_claim(fx.gpu_claim("solo"))
    pod = claim_pod(fake, "solo", "solo")
    fake.fail("PUT", r"/resourceclaims/solo/status$", 409, message="the object has been modified")
    cluster = Cluster(api)
    result = cluster.bind(pod, pod_request("default/solo", gpus=1), ring(3))
    assert result.outcome is Outcome.DONE, result.detail
    assert cluster.claims.conflicts == 1
    assert devices(fake.claim("default", "solo")) == ["gpu-3"]


def test_a_failed_bind_rolls_the_allocation_back(fake: FakeApiServer, api: ApiClient) -> None:
    fake.add_claim(fx.gpu_claim("rank-0", count=2))
    pod = claim_pod(fake, "rank-0", "rank-0")
    fake.fail("POST", r"/pods/rank-0/binding$", 500, times=5)
    cluster = Cluster(api, Binder(api, attempts=2, backoff_s=0.001, max_backoff_s=0.002))
    result = cluster.bind(pod, pod_request("default/rank-0", gpus=2), ring(0, 1))
    assert result.outcome is Outcome.FAILED
    claim = fake.claim("default", "rank-0")
    assert claim.get("status", {}) == {}  # no allocation, no reservation left
    assert DELETE_PROTECTION_FINALIZER not in (claim["metadata"].get("finalizers") or [])
    assert fake.allocated_devices() == {}
    with cluster.view.locked() as (state, _):
        assert int(state.gpu_free_milli[0].sum()) == 8000


def test_a_pod_without_claims_binds_through_the_device_plugin_path(
    fake: FakeApiServer, api: ApiClient
) -> None:
    pod = fake.add_pod(v1_pod("plain", namespace="default", scheduler_name="kubesage"))
    result = Cluster(api).bind(pod, pod_request("default/plain", gpus=2), ring(5, 2))
    assert result.outcome is Outcome.DONE, result.detail
    annotations = fake.pod("default", "plain")["metadata"]["annotations"]
    assert annotations[GPU_INDICES_ANNOTATION] == "5,2"
    assert DRA_DEVICES_ANNOTATION not in annotations
    assert not [r for r in fake.requests if "resource.k8s.io" in r.path]


def relayout(node_name: str) -> LabelNode:
    return LabelNode(node=node_name, labels={MIG_CONFIG_LABEL: "kubesage-0123abcd"}, **WHY)


def test_a_mig_relayout_of_a_partitionable_node_is_not_labelled(
    fake: FakeApiServer, api: ApiClient
) -> None:
    labeler = LiveNodeLabeler(api)
    result = labeler.execute(relayout(PART))
    assert result.outcome is Outcome.DONE and "allocated through DRA" in result.detail
    assert MIG_CONFIG_LABEL not in (fake.node(PART)["metadata"].get("labels") or {})
    # A node without partitionable devices keeps the mig-parted label path.
    assert labeler.execute(relayout(DGX)).outcome is Outcome.DONE
    assert fake.node(DGX)["metadata"]["labels"][MIG_CONFIG_LABEL] == "kubesage-0123abcd"


def test_without_dra_a_mig_relayout_is_labelled() -> None:
    with FakeApiServer(dra=False) as fake:
        fake.add_node(v1_node(PART, gpus=2))
        api = load_api_client(str(fake.kubeconfig))
        assert api is not None
        assert LiveNodeLabeler(api).execute(relayout(PART)).outcome is Outcome.DONE
        assert fake.node(PART)["metadata"]["labels"][MIG_CONFIG_LABEL] == "kubesage-0123abcd"


def test_the_secondary_scheduler_allocates_the_devices_it_chose(
    fake: FakeApiServer, api: ApiClient
) -> None:
    fake.add_claim(fx.gpu_claim("solo", count=2))
    claim_pod(fake, "solo", "solo")
    sync = ClusterSync(api, backoff_s=0.02, max_backoff_s=0.1)
    scheduler = SecondaryScheduler(
        api, sync, make_policy("bestfit", PolicyContext()), scheduler_name="kubesage"
    )
    sync.start()
    try:
        assert sync.wait_until_ready(10)
        wait_until(lambda: len(sync.pending_pods("kubesage")) == 1, what="the pod seen")
        report = scheduler.schedule_once()
    finally:
        sync.stop()
    bound = fake.pod("default", "solo")
    chosen = bound["metadata"]["annotations"][GPU_INDICES_ANNOTATION].split(",")
    claim = fake.claim("default", "solo")
    assert devices(claim) == [f"gpu-{g}" for g in chosen] and len(chosen) == 2
    assert claim["status"]["reservedFor"][0]["uid"] == bound["metadata"]["uid"]
    assert report.bound == {"default/solo": bound["spec"]["nodeName"]}, report
    assert bound["spec"]["nodeName"] in (DGX, PART)


def test_a_whole_gang_on_one_dgx_holds_eight_distinct_devices_in_each_ring(
    fake: FakeApiServer, api: ApiClient
) -> None:
    cluster = Cluster(api)
    rings = {"rank-0": (6, 7, 5, 4), "rank-1": (0, 1, 3, 2)}
    for name, gpus in rings.items():
        fake.add_claim(fx.gpu_claim(name, count=4))
        pod = claim_pod(fake, name, name)
        result = cluster.bind(pod, pod_request(f"default/{name}", gpus=4), ring(*gpus))
        assert result.outcome is Outcome.DONE, result.detail
    for name, gpus in rings.items():
        assert devices(fake.claim("default", name)) == [f"gpu-{g}" for g in gpus]
    holders = fake.allocated_devices()
    assert sorted(device for _, _, device in holders) == [f"gpu-{g}" for g in range(8)]
