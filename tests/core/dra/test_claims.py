"""DRA claim builders: ResourceClaimTemplates and the pod side, valid at Kubernetes 1.34."""

from __future__ import annotations

from typing import Any

import pytest

from kubesage.core.dra.api import GPU_DEVICE_CLASS, MIG_DEVICE_CLASS
from kubesage.core.dra.claims import (
    claim_pod_spec,
    claim_template,
    gpu_selectors,
    mig_selectors,
)
from kubesage.core.errors import InputError
from kubesage.core.k8s.validation import DRA_KUBERNETES_VERSION, validate_manifests

INDEX = 'device.attributes["gpu.nvidia.com"].index'


@pytest.mark.parametrize(
    ("indices", "uuids", "expected"),
    [
        ((3,), (), [f"{INDEX} == 3"]),
        ((0, 5), (), [f"{INDEX} == 0 || {INDEX} == 5"]),
        (
            (0, 5),
            ("GPU-a", "GPU-b"),
            [
                'device.attributes["gpu.nvidia.com"].uuid == "GPU-a" || '
                'device.attributes["gpu.nvidia.com"].uuid == "GPU-b"'
            ],
        ),
        ((), (), []),
    ],
)
def test_gpu_selectors_prefer_uuids_to_indices(
    indices: tuple[int, ...], uuids: tuple[str, ...], expected: list[str]
) -> None:
    assert gpu_selectors(indices, uuids) == expected


def test_mig_selectors_name_the_profile_and_the_parent_when_known() -> None:
    profile = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'
    assert mig_selectors("3g.40gb") == [profile]
    assert mig_selectors("3g.40gb", parent_index=2) == [
        profile,
        'device.attributes["gpu.nvidia.com"].parentIndex == 2',
    ]
    assert mig_selectors("3g.40gb", parent_uuid="GPU-x", parent_index=2) == [
        profile,
        'device.attributes["gpu.nvidia.com"].parentUUID == "GPU-x"',
    ]


def test_claim_template_asks_for_exactly_count_devices_and_validates() -> None:
    template = claim_template(
        "job-0-gpus", 2, GPU_DEVICE_CLASS, gpu_selectors((1, 4)), namespace="ml", labels={"a": "b"}
    )
    assert template["apiVersion"] == "resource.k8s.io/v1"
    assert template["kind"] == "ResourceClaimTemplate"
    assert template["metadata"] == {"name": "job-0-gpus", "namespace": "ml", "labels": {"a": "b"}}
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "gpus"
    assert request["exactly"] == {
        "deviceClassName": GPU_DEVICE_CLASS,
        "allocationMode": "ExactCount",
        "count": 2,
        "selectors": [{"cel": {"expression": f"{INDEX} == 1 || {INDEX} == 4"}}],
    }
    mig = claim_template("m", 1, MIG_DEVICE_CLASS, mig_selectors("1g.10gb"))
    assert (
        "selectors"
        not in claim_template("any", 1, GPU_DEVICE_CLASS)["spec"]["spec"]["devices"]["requests"][0][
            "exactly"
        ]
    )
    validate_manifests([template, mig], DRA_KUBERNETES_VERSION)


def test_claim_template_needs_a_device() -> None:
    with pytest.raises(InputError, match="at least one device"):
        claim_template("none", 0, GPU_DEVICE_CLASS)


def test_claim_pod_spec_hands_the_claim_to_every_container() -> None:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "a", "image": "i", "resources": {"requests": {"cpu": "1"}}},
            {"name": "b", "image": "i"},
        ]
    }
    claimed = claim_pod_spec(spec, "job-0-gpus")
    assert claimed["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": "job-0-gpus"}
    ]
    assert [c["resources"]["claims"] for c in claimed["containers"]] == [[{"name": "gpus"}]] * 2
    assert claimed["containers"][0]["resources"]["requests"] == {"cpu": "1"}
    assert "resourceClaims" not in spec  # the input is left alone
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": claimed}
    validate_manifests([pod], DRA_KUBERNETES_VERSION)
