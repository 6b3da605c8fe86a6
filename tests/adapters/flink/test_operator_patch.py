"""FlinkDeployment parallelism-override patches: shape, validation, and the request the
kubernetes client sends (through a FAKE urllib3 pool: no API server runs here)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s

from kubesage.adapters.flink.operator_patch import (
    OVERRIDES_KEY,
    OperatorApplyError,
    OperatorPatchError,
    apply_patch,
    deployment_patch,
    format_overrides,
    parse_overrides,
    validate_patch,
)

SLOW = "59fa767824610e31f4a11d6125e09bf4"
SINK = "2e588ce1c86a9d46e2e85186773ce4fd"


def test_patch_sets_overrides_sorted() -> None:
    patch = deployment_patch({SLOW: 3, SINK: 1})
    assert patch == {"spec": {"flinkConfiguration": {OVERRIDES_KEY: f"{SINK}:1,{SLOW}:3"}}}
    assert validate_patch(patch) == {SLOW: 3, SINK: 1}


def test_existing_overrides_are_kept_unless_replaced() -> None:
    patch = deployment_patch({SLOW: 4}, existing=f"{SLOW}:2,{SINK}:2")
    assert parse_overrides(patch["spec"]["flinkConfiguration"][OVERRIDES_KEY]) == {SLOW: 4, SINK: 2}


@pytest.mark.parametrize(
    ("parallelism", "message"),
    [
        ({}, "no vertices"),
        ({"slow": 2}, "not 32 lowercase hex"),
        ({SLOW: 0}, "must be ≥ 1"),
        ({SLOW: True}, "must be ≥ 1"),
    ],
)
def test_bad_overrides_are_rejected(parallelism: dict[str, Any], message: str) -> None:
    with pytest.raises(OperatorPatchError, match=message):
        format_overrides(parallelism)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{SLOW}:2,{SLOW}:3", "twice"),
        (f"{SLOW}=2", "entry 0"),
        (f"{SLOW}:2,{SINK}:-1", "entry 1"),
    ],
)
def test_parse_names_the_bad_entry(text: str, message: str) -> None:
    with pytest.raises(OperatorPatchError, match=message):
        parse_overrides(text)


def test_validate_rejects_other_changes() -> None:
    patch = deployment_patch({SLOW: 2})
    patch["spec"]["job"] = {"parallelism": 9}
    with pytest.raises(OperatorPatchError, match="more than the overrides"):
        validate_patch(patch)


class FakePool:
    """FAKE urllib3 pool standing in for a Kubernetes API server: records requests and
    answers like the API server answers a merge patch of a custom object."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[dict[str, Any]] = []

    def request(self, method: str, url: str, **kwargs: Any) -> urllib3.HTTPResponse:
        body = json.loads(kwargs["body"]) if kwargs.get("body") else None
        self.requests.append(
            {"method": method, "url": url, "headers": kwargs.get("headers"), "body": body}
        )
        if self.status != 200:
            reply = {
                "kind": "Status",
                "status": "Failure",
                "reason": "NotFound",
                "code": self.status,
            }
        else:
            reply = {
                "apiVersion": "flink.apache.org/v1beta1",
                "kind": "FlinkDeployment",
                "metadata": {"name": "orders", "namespace": "streaming"},
                "spec": body["spec"],
            }
        return urllib3.HTTPResponse(
            body=json.dumps(reply).encode(),
            status=self.status,
            reason="OK" if self.status == 200 else "Not Found",
            headers={"Content-Type": "application/json"},
            preload_content=True,
        )


def custom_objects(pool: FakePool) -> k8s.CustomObjectsApi:
    api = k8s.ApiClient(k8s.Configuration(host="https://kubernetes.test"))
    api.rest_client.pool_manager = pool
    return k8s.CustomObjectsApi(api)


def test_apply_sends_a_merge_patch_to_the_flinkdeployment() -> None:
    pool = FakePool()
    result = apply_patch(
        custom_objects(pool), namespace="streaming", name="orders", parallelism={SLOW: 3}
    )
    (request,) = pool.requests
    assert request["method"] == "PATCH"
    assert request["url"].endswith(
        "/apis/flink.apache.org/v1beta1/namespaces/streaming/flinkdeployments/orders"
    )
    assert request["headers"]["Content-Type"] == "application/merge-patch+json"
    assert request["body"] == deployment_patch({SLOW: 3})
    assert result["spec"]["flinkConfiguration"][OVERRIDES_KEY] == f"{SLOW}:3"


def test_apply_failure_is_a_dependency_error() -> None:
    with pytest.raises(OperatorApplyError, match="HTTP 404"):
        apply_patch(
            custom_objects(FakePool(404)), namespace="streaming", name="gone", parallelism={SLOW: 3}
        )


def test_validate_rejects_other_flink_configuration_keys() -> None:
    patch = deployment_patch({SLOW: 2})
    patch["spec"]["flinkConfiguration"]["taskmanager.numberOfTaskSlots"] = "8"
    with pytest.raises(
        OperatorPatchError, match=r"spec\.flinkConfiguration\.taskmanager\.numberOfTaskSlots"
    ):
        validate_patch(patch)
