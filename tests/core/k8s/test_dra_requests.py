"""A pod's GPU demand read from its ResourceClaims and templates."""

from __future__ import annotations

import pytest

from kubesage.core.dra import api as dra_api
from kubesage.core.dra import claims as dra_claims
from kubesage.core.k8s.dra_requests import with_claims
from kubesage.core.k8s.translate import TranslateError
from tests.builders import pod as pod_request
from tests.fakes import dra_fixtures as fx

PROFILE = "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"


def test_whole_gpus_add_up_over_the_claims() -> None:
    template = dra_claims.claim_template("rank-0", 4, dra_api.GPU_DEVICE_CLASS)
    specs = [template["spec"]["spec"], fx.gpu_claim("shared", count=2)["spec"]]
    request = with_claims(pod_request("p"), specs)
    assert (request.num_gpu, request.gpu_milli, request.mig) == (6, 1000, None)


def test_a_mig_claim_is_one_instance_of_its_profile() -> None:
    template = dra_claims.claim_template("m", 1, dra_api.MIG_DEVICE_CLASS, [PROFILE])
    request = with_claims(pod_request("p"), [template["spec"]["spec"]])
    assert request.mig is not None and request.mig.profile == "3g.40gb"
    assert request.num_gpu == 1


@pytest.mark.parametrize(
    ("count", "device_class", "selectors", "gpus", "error"),
    [
        (1, dra_api.MIG_DEVICE_CLASS, [], 0, "without a profile"),
        (2, dra_api.MIG_DEVICE_CLASS, [PROFILE], 0, "one MIG instance"),
        (1, dra_api.GPU_DEVICE_CLASS, [], 1, "both as extended resources"),
        # Any profile but 3g.40gb, or one of two: no one profile to place.
        (1, dra_api.MIG_DEVICE_CLASS, [f"!({PROFILE})"], 0, "from one profile =="),
        (1, dra_api.MIG_DEVICE_CLASS, [f"{PROFILE} || {PROFILE[:-8]}'1g.10gb'"], 0, "one profile"),
    ],
)
def test_claims_kubesage_cannot_model(
    count: int, device_class: str, selectors: list[str], gpus: int, error: str
) -> None:
    template = dra_claims.claim_template("t", count, device_class, selectors)
    with pytest.raises(TranslateError, match=error):
        with_claims(pod_request("p", gpus=gpus), [template["spec"]["spec"]])


def test_other_device_classes_are_not_gpus() -> None:
    template = dra_claims.claim_template("nic", 2, "rdma.example.com")
    assert with_claims(pod_request("p"), [template["spec"]["spec"]]).num_gpu == 0
