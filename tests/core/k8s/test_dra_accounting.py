"""ClusterSync accounts pods that get GPUs through ResourceClaims on the devices their
claims hold (fake API server, real client): a pod kube-scheduler bound with an allocated
claim occupies exactly those GPU indices, the next placement avoids them, and a claim
allocated after the pod is seen moves it there; without resource.k8s.io nothing changes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from kubesage.core.dra import api as dra_api
from kubesage.core.k8s.apiclient import ApiClient, load_api_client
from kubesage.core.k8s.extender import Extender
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.k8s.secondary import SecondaryScheduler
from kubesage.core.policy import PolicyContext, make_policy
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes import dra_fixtures as fx
from tests.fakes.apiserver import FakeApiServer, wait_until

DGX = "dgx-h100-0"


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        # The DRA driver publishes the GPUs: no nvidia.com/gpu on the node.
        server.add_node(v1_node(DGX, gpus=0, rack="r1"))
        server.add_resource_slice(fx.dgx_h100_slice(DGX))
        for device_class in fx.device_classes():
            server.add_device_class(device_class)
        yield server


def client(fake: FakeApiServer) -> ApiClient:
    api = load_api_client(str(fake.kubeconfig))
    assert api is not None
    return api


def make_sync(api: ApiClient) -> ClusterSync:
    return ClusterSync(api, backoff_s=0.02, max_backoff_s=0.1, watch_timeout_s=1)


def claim_pod(
    fake: FakeApiServer, name: str, claim: str, *, node: str | None = None
) -> dict[str, Any]:
    pod = v1_pod(name, namespace="default", scheduler_name="kubesage")
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    if node is not None:
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
    return fake.add_pod(pod)


def allocate(fake: FakeApiServer, claim: str, pod: dict[str, Any], *gpus: int) -> None:
    """kube-scheduler's allocation of ``claim`` to ``gpus`` of the DGX, reserved for ``pod``."""
    results = [
        {"request": "gpus", "driver": dra_api.NVIDIA_GPU_DRIVER, "pool": DGX, "device": f"gpu-{g}"}
        for g in gpus
    ]
    selector = {"key": "metadata.name", "operator": "In", "values": [DGX]}
    meta = pod["metadata"]
    fake.set_claim_status(
        "default",
        claim,
        {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
            },
            "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
        },
    )


def scheduling(fake: FakeApiServer) -> tuple[ClusterSync, SecondaryScheduler]:
    """An informer and the secondary scheduler reading it (start the informer)."""
    api = client(fake)
    sync = make_sync(api)
    policy = make_policy("bestfit", PolicyContext())
    return sync, SecondaryScheduler(api, sync, policy, scheduler_name="kubesage")


def busy_gpus(sync: ClusterSync) -> list[int]:
    with sync.locked() as (state, names):
        node = names.index(DGX)
        return [g for g, free in enumerate(state.gpu_free_milli[node]) if int(free) < 1000]


def devices(claim: dict[str, Any]) -> list[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [r["device"] for r in allocation.get("devices", {}).get("results", [])]


def test_a_claim_allocated_pod_holds_exactly_its_devices_and_the_next_placement_avoids_them(
    fake: FakeApiServer,
) -> None:
    fake.add_claim(fx.gpu_claim("theirs", count=2))
    pod = claim_pod(fake, "bound-by-kube-scheduler", "theirs", node=DGX)
    allocate(fake, "theirs", pod, 5, 2)
    fake.add_claim(fx.gpu_claim("mine", count=6))
    claim_pod(fake, "next", "mine")
    sync, scheduler = scheduling(fake)
    with sync:
        assert sync.wait_until_ready(10)
        # Not the lowest indices a device-plugin pod would get: the claim's devices.
        assert busy_gpus(sync) == [2, 5]
        assert sync.unaccounted == {}
        wait_until(lambda: len(sync.pending_pods("kubesage")) == 1, what="the pending pod")
        report = scheduler.schedule_once()
        assert report.bound == {"default/next": DGX}, report
        assert sorted(devices(fake.claim("default", "mine"))) == [
            f"gpu-{g}" for g in (0, 1, 3, 4, 6, 7)
        ]
        wait_until(lambda: busy_gpus(sync) == list(range(8)), what="all eight GPUs held")
        assert sync.unaccounted == {}


def test_a_claim_allocated_after_the_pod_is_seen_moves_the_pod_to_its_devices(
    fake: FakeApiServer,
) -> None:
    fake.add_claim(fx.gpu_claim("theirs", count=2))
    pod = claim_pod(fake, "trainer", "theirs", node=DGX)
    with make_sync(client(fake)) as sync:
        assert sync.wait_until_ready(10)
        # Counted at once (the claim's spec asks for two GPUs), where it is not known yet.
        assert busy_gpus(sync) == [0, 1]
        allocate(fake, "theirs", pod, 7, 6)
        wait_until(lambda: busy_gpus(sync) == [6, 7], what="re-accounted on the claim's GPUs")
        fake.delete_pod("default", "trainer")
        wait_until(lambda: busy_gpus(sync) == [], what="released")


def test_a_pod_whose_claim_is_not_created_yet_waits_without_an_event(
    fake: FakeApiServer,
) -> None:
    claim_pod(fake, "early", "not-yet")
    sync, scheduler = scheduling(fake)
    with sync:
        assert sync.wait_until_ready(10)
        wait_until(lambda: len(sync.pending_pods("kubesage")) == 1, what="the pending pod")
        report = scheduler.schedule_once()
        assert "not created yet" in report.waiting["default/early"]
        assert not report.failed
        assert not fake.requests_to("POST", r"/events$")
        fake.add_claim(fx.gpu_claim("not-yet", count=1))
        wait_until(lambda: scheduler.schedule_once().bound != {}, what="bound once created")
    assert (
        devices(fake.claim("default", "not-yet"))
        and fake.pod("default", "early")["spec"]["nodeName"] == DGX
    )


def test_without_resource_k8s_io_device_plugin_pods_are_accounted_as_before() -> None:
    with FakeApiServer(dra=False) as fake:
        fake.add_node(v1_node("plugin-0", gpus=8))
        pod = v1_pod("trainer", containers=[v1_container(requests={"nvidia.com/gpu": "3"})])
        pod["spec"]["nodeName"] = "plugin-0"
        pod["status"]["phase"] = "Running"
        fake.add_pod(pod)
        with make_sync(client(fake)) as sync:
            assert sync.wait_until_ready(10)
            with sync.locked() as (state, _):
                assert [int(x) for x in state.gpu_free_milli[0]] == [0, 0, 0] + [1000] * 5
            assert sync.failures == 0 and sync.unaccounted == {}
            assert sync.request_of(pod).num_gpu == 3


def test_the_extender_filters_a_claim_pod_by_the_gpus_its_claim_asks_for(
    fake: FakeApiServer,
) -> None:
    fake.add_claim(fx.gpu_claim("theirs", count=6))
    allocate(fake, "theirs", claim_pod(fake, "running", "theirs", node=DGX), 0, 1, 2, 3, 4, 5)
    fake.add_claim(fx.gpu_claim("big", count=4))
    big = claim_pod(fake, "big", "big")
    fake.add_claim(fx.gpu_claim("small", count=2))
    small = claim_pod(fake, "small", "small")
    with make_sync(client(fake)) as sync:
        assert sync.wait_until_ready(10)
        wait_until(lambda: busy_gpus(sync) == list(range(6)), what="the running claim's GPUs")
        policy = make_policy("bestfit", PolicyContext())
        extender = Extender(sync, policy, claim_requests=sync.request_of)

        def passed(pod: dict[str, Any]) -> list[str]:
            status, body = extender.filter(orjson.dumps({"Pod": pod, "NodeNames": [DGX]}))
            assert status == 200
            names: list[str] = orjson.loads(body)["NodeNames"]
            return names

        # Four GPUs asked through the claim, two free: the node fails, as it would for
        # nvidia.com/gpu: 4 (the pod's own spec asks for no GPU at all).
        assert passed(big) == []
        assert passed(small) == [DGX]
        # A pod whose claim does not exist yet is left to kube-scheduler (passes, unscored).
        assert passed(claim_pod(fake, "early", "not-yet")) == [DGX]
