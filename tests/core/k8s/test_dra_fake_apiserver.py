"""The fake API server's resource.k8s.io/v1, through the real kubernetes client: what
kubesage's DRA code relies on behaves as the API reference says."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kubesage.core.dra import api as dra
from kubesage.core.k8s.apiclient import (
    ApiClient,
    ApiException,
    ResourceV1Api,
    load_api_client,
    serves_api_version,
)
from tests.fakes import dra_fixtures as fx
from tests.fakes.apiserver import FakeApiServer

Obj = dict[str, Any]


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def client(fake: FakeApiServer) -> ApiClient:
    api = load_api_client(str(fake.kubeconfig))
    assert api is not None
    return api


def raw(response: Any) -> Obj:
    body: Obj = json.loads(response.data)
    return body


def allocated(claim: Obj, *devices: str, pod_uid: str = "uid-1") -> Obj:
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpus",
                        "driver": dra.NVIDIA_GPU_DRIVER,
                        "pool": "dgx-h100-0",
                        "device": device,
                    }
                    for device in devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["dgx-h100-0"]}
                        ]
                    }
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": pod_uid}],
    }
    return {**claim, "status": status}


def test_fixture_slices_pass_validation_and_list_by_node(fake: FakeApiServer) -> None:
    for obj in (fx.dgx_h100_slice(), fx.mig_node_slice(), fx.partitionable_slice()):
        fake.add_resource_slice(obj)
    for device_class in fx.device_classes():
        fake.add_device_class(device_class)
    resource = ResourceV1Api(client(fake))
    listed = raw(
        resource.list_resource_slice(
            field_selector=f"{dra.SLICE_NODE_FIELD}=a100-mig-0", _preload_content=False
        )
    )
    assert [item["spec"]["nodeName"] for item in listed["items"]] == ["a100-mig-0"]
    assert listed["items"][0]["metadata"]["generation"] == 1
    classes = raw(resource.list_device_class(_preload_content=False))["items"]
    assert sorted(c["metadata"]["name"] for c in classes) == ["gpu.nvidia.com", "mig.nvidia.com"]


def test_a_bad_slice_is_refused_naming_its_fields(fake: FakeApiServer) -> None:
    bad = fx.dgx_h100_slice()
    bad["spec"]["devices"][1]["name"] = "gpu-0"
    bad["spec"]["devices"][2]["attributes"]["index"] = {"int": 2, "string": "2"}
    bad["spec"]["allNodes"] = True
    with pytest.raises(ApiException) as caught:
        ResourceV1Api(client(fake)).create_resource_slice(bad)
    assert caught.value.status == 422
    message = json.loads(caught.value.body)["message"]
    assert 'spec.devices[1].name: Duplicate value: "gpu-0"' in message
    assert "spec.devices[2].attributes[index]" in message
    assert "exactly one of `nodeName`, `nodeSelector`, `allNodes`" in message


def test_claim_create_drops_the_status_and_defaults_the_request(fake: FakeApiServer) -> None:
    claim = fake.add_claim(allocated(fx.gpu_claim("train", count=2), "gpu-0", "gpu-1"))
    assert "status" not in claim
    assert claim["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "count": 2,
        "allocationMode": "ExactCount",
    }


def test_status_write_allocates_and_a_stale_version_conflicts(fake: FakeApiServer) -> None:
    created = fake.add_claim(fx.gpu_claim("train", count=2))
    resource = ResourceV1Api(client(fake))
    body = allocated(created, "gpu-0", "gpu-1")
    written = raw(
        resource.replace_namespaced_resource_claim_status(
            "train", "default", body, _preload_content=False
        )
    )
    assert written["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert fake.allocated_devices() == {
        ("gpu.nvidia.com", "dgx-h100-0", "gpu-0"): "default/train",
        ("gpu.nvidia.com", "dgx-h100-0", "gpu-1"): "default/train",
    }
    with pytest.raises(ApiException) as caught:  # the version read before the write
        resource.replace_namespaced_resource_claim_status("train", "default", body)
    assert caught.value.status == 409
    assert "the object has been modified" in json.loads(caught.value.body)["message"]


def test_allocation_is_immutable_and_cleared_only_without_consumers(
    fake: FakeApiServer,
) -> None:
    fake.add_claim(fx.gpu_claim("train"))
    current = fake.set_claim_status("default", "train", allocated({}, "gpu-0")["status"])
    resource = ResourceV1Api(client(fake))

    def put_status(status: Obj) -> ApiException:
        latest = fake.claim("default", "train")
        with pytest.raises(ApiException) as caught:
            resource.replace_namespaced_resource_claim_status(
                "train", "default", {**latest, "status": status}
            )
        return caught.value

    moved = put_status(allocated({}, "gpu-5")["status"])
    assert moved.status == 422
    assert "status.allocation: Invalid value" in json.loads(moved.body)["message"]
    still_reserved = put_status({"reservedFor": current["status"]["reservedFor"]})
    assert "status.reservedFor: Forbidden" in json.loads(still_reserved.body)["message"]
    # Unreserved first, then deallocated: both allowed.
    unreserved = {**current["status"], "reservedFor": []}
    fake.set_claim_status("default", "train", unreserved)
    cleared = fake.set_claim_status("default", "train", {})
    assert cleared["status"] == {}


def test_results_must_name_a_request_of_the_claim(fake: FakeApiServer) -> None:
    fake.add_claim(fx.gpu_claim("train"))
    status = allocated({}, "gpu-0")["status"]
    status["allocation"]["devices"]["results"][0]["request"] = "other"
    with pytest.raises(Exception, match="must be the name of a request"):
        fake.set_claim_status("default", "train", status)


def test_a_write_of_the_claim_keeps_its_status_and_its_spec_is_immutable(
    fake: FakeApiServer,
) -> None:
    fake.add_claim(fx.gpu_claim("train"))
    fake.set_claim_status("default", "train", allocated({}, "gpu-0")["status"])
    resource = ResourceV1Api(client(fake))
    claim = fake.claim("default", "train")
    claim["metadata"]["labels"] = {"team": "a"}
    claim["status"] = {}
    kept = raw(
        resource.replace_namespaced_resource_claim(
            "train", "default", claim, _preload_content=False
        )
    )
    assert kept["metadata"]["labels"] == {"team": "a"}
    assert kept["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    kept["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4
    with pytest.raises(ApiException) as caught:
        resource.replace_namespaced_resource_claim("train", "default", kept)
    assert "spec: Invalid value" in json.loads(caught.value.body)["message"]


def test_status_merge_patch_goes_through_the_same_rules(fake: FakeApiServer) -> None:
    fake.add_claim(fx.gpu_claim("train"))
    resource = ResourceV1Api(client(fake))
    patched = raw(
        resource.patch_namespaced_resource_claim_status(
            "train",
            "default",
            {"status": allocated({}, "gpu-3")["status"]},
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )
    )
    assert patched["status"]["reservedFor"][0]["name"] == "trainer-0"
    with pytest.raises(ApiException) as caught:
        resource.patch_namespaced_resource_claim_status(
            "train",
            "default",
            {"status": {"allocation": None}},
            _content_type="application/merge-patch+json",
        )
    assert caught.value.status == 422


def test_claim_templates_are_validated(fake: FakeApiServer) -> None:
    template = {
        "metadata": {"name": "rank-0", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 0},
                        }
                    ]
                }
            }
        },
    }
    with pytest.raises(ApiException) as caught:
        ResourceV1Api(client(fake)).create_namespaced_resource_claim_template("default", template)
    assert (
        "spec.spec.devices.requests[0].exactly.count: Invalid value: 0"
        in json.loads(caught.value.body)["message"]
    )


def test_discovery_and_a_cluster_without_dra() -> None:
    with FakeApiServer() as with_dra, FakeApiServer(dra=False) as without:
        assert serves_api_version(client(with_dra), dra.API_VERSION)
        assert not serves_api_version(client(without), dra.API_VERSION)
        with pytest.raises(ApiException) as caught:
            ResourceV1Api(client(without)).list_resource_slice()
        assert caught.value.status == 404
