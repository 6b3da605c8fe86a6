"""v1 Pod/Node JSON → PodRequest/NodeSpec: quantities, requests, GPUs, MIG, labels."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from kubesage.core.errors import InputError
from kubesage.core.k8s.mig_names import mig_profile_of, mig_resource_name
from kubesage.core.k8s.translate import (
    TranslateError,
    UnfittablePodError,
    UnsupportedPodError,
    mig_shape,
    node_spec,
    parse_quantity,
    pod_request,
)
from kubesage.core.state import ClusterState
from tests.core.k8s import v1_container, v1_node, v1_pod


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("2Gi", Decimal(2 * 2**30)),
        ("786432Ki", Decimal(786432 * 1024)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("12e-3", Decimal("0.012")),
        ("1E", Decimal(10**18)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("100n", Decimal("1e-7")),
        ("+3k", Decimal(3000)),
        (".5", Decimal("0.5")),
        (4, Decimal(4)),
    ],
)
def test_parse_quantity_is_exact(text: str | int, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["1K", "abc", "1e", "", "--1", "1.2.3", "1 Gi", "Gi", "1e999"])
def test_parse_quantity_rejects_garbage_naming_the_path(text: str) -> None:
    with pytest.raises(TranslateError, match=r"spec\.x\.cpu"):
        parse_quantity(text, "spec.x.cpu")


def test_requests_not_limits_and_init_containers_take_the_max() -> None:
    pod = v1_pod(
        containers=[
            v1_container("a", requests={"cpu": "1500m", "memory": "1Gi"}, limits={"cpu": "8"}),
            v1_container("b", requests={"cpu": "500m", "memory": "512Mi"}),
        ],
        init_containers=[v1_container("init", requests={"cpu": "3", "memory": "256Mi"})],
        overhead={"cpu": "250m", "memory": "120Mi"},
    )
    request = pod_request(pod)
    assert request.name == "ml/trainer-0"
    assert request.cpu_milli == 3000 + 250  # the init container's 3 CPUs beat 2 in sum
    assert request.memory_mib == 1024 + 512 + 120
    assert request.num_gpu == 0 and request.gpu_milli == 0


def test_sidecar_init_containers_add_to_the_app_containers() -> None:
    pod = v1_pod(
        containers=[v1_container("app", requests={"cpu": "2", "memory": "1Gi"})],
        init_containers=[
            v1_container("proxy", requests={"cpu": "500m"}, restart_policy="Always"),
            v1_container("setup", requests={"cpu": "2"}),
        ],
    )
    # app + sidecar = 2.5; the plain init container runs beside the sidecar: 2 + 0.5.
    assert pod_request(pod).cpu_milli == 2500


def test_pod_level_resources_take_precedence_for_cpu_and_memory() -> None:
    """Kubernetes' pod-level resources (``spec.resources``): where set, the pod's CPU and
    memory are those, not the containers' sum; GPUs still come from the containers, and
    overhead is added on top. Limits alone request their limit, as for containers."""
    pod = v1_pod(
        containers=[v1_container(requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"})],
        overhead={"cpu": "250m"},
    )
    pod["spec"]["resources"] = {"requests": {"cpu": "8"}, "limits": {"memory": "64Gi"}}
    request = pod_request(pod)
    assert (request.cpu_milli, request.memory_mib, request.num_gpu) == (8250, 65536, 2)


def test_limit_only_resources_request_their_limit() -> None:
    pod = v1_pod(
        containers=[v1_container(limits={"cpu": "2", "memory": "3Gi", "nvidia.com/gpu": "4"})]
    )
    request = pod_request(pod)
    assert (request.cpu_milli, request.memory_mib, request.num_gpu, request.gpu_milli) == (
        2000,
        3072,
        4,
        1000,
    )


def test_requests_round_up() -> None:
    pod = v1_pod(containers=[v1_container(requests={"cpu": "1001u", "memory": "1500k"})])
    request = pod_request(pod)
    assert request.cpu_milli == 2  # 1.001 milli-cores
    assert request.memory_mib == 2  # 1.43 MiB


def test_gpu_sharing_annotation_and_model_selector() -> None:
    pod = v1_pod(
        containers=[v1_container(requests={"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"})],
        annotations={"kubesage.io/gpu-milli": "250"},
        node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    )
    request = pod_request(pod)
    assert request.is_gpu_sharing and request.gpu_milli == 250
    assert request.gpu_models == ("A100-80GB",)


@pytest.mark.parametrize(
    ("profile", "memory_slices", "compute_slices", "starts"),
    [
        ("1g.10gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        ("1g.10gb+me", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        ("1g.20gb", 2, 1, (0, 2, 4, 6)),
        ("2g.35gb", 2, 2, (0, 2, 4)),
        ("3g.40gb", 4, 3, (0, 4)),
        ("4g.71gb", 4, 4, (0,)),
        ("7g.141gb", 8, 7, (0,)),
        # GH200-144GB's and GB200's two-slice 1g profiles (at most 4 per GPU).
        ("1g.36gb", 2, 1, (0, 2, 4, 6)),
        ("1g.47gb", 2, 1, (0, 2, 4, 6)),
        ("1g.18gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        # A30: 4 memory slices, each two of the core's eight (at most 4 × 1g.6gb).
        ("1g.6gb", 2, 1, (0, 2, 4, 6)),
        ("1g.6gb+me", 2, 1, (0, 2, 4, 6)),
        ("2g.12gb", 4, 2, (0, 4)),
        ("4g.24gb", 8, 4, (0,)),
    ],
)
def test_mig_shape_from_profile_name(
    profile: str, memory_slices: int, compute_slices: int, starts: tuple[int, ...]
) -> None:
    shape = mig_shape(profile)
    assert (shape.memory_slices, shape.compute_slices, shape.starts) == (
        memory_slices,
        compute_slices,
        starts,
    )


def test_a_media_engine_profile_is_the_device_plugins_dot_me_resource() -> None:
    # A resource name is a DNS subdomain ("+" is not allowed): the device plugin writes
    # 1g.10gb+me as nvidia.com/mig-1g.10gb.me, and a pod asks for that.
    assert mig_resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert mig_resource_name("3g.40gb") == "nvidia.com/mig-3g.40gb"
    assert mig_profile_of("nvidia.com/mig-1g.10gb.me") == "1g.10gb+me"
    requests = {"cpu": "1", "memory": "1Gi", "nvidia.com/mig-1g.10gb.me": "1"}
    request = pod_request(v1_pod(containers=[v1_container(requests=requests)]))
    assert request.mig is not None and request.mig.profile == "1g.10gb+me"


def test_mig_geometry_from_names_matches_the_gpu_adapters_catalogues() -> None:
    # The core reads MIG names generically; the GPU adapter has the real catalogues.
    # The one known difference: A100-40GB's 1g.10gb is two slices, the name alone
    # reads as the one-slice 1g.10gb of 80 GB GPUs (documented in translate).
    from kubesage.adapters.gpu_training.mig import CATALOGUES
    from kubesage.adapters.gpu_training.mig import mig_shape as catalogue_shape

    checked = 0
    for model, catalogue in CATALOGUES.items():
        for profile in catalogue.profiles:
            if (model, profile.name) == ("A100-40GB", "1g.10gb"):
                continue
            assert mig_shape(profile.name) == catalogue_shape(model, profile.name), (model, profile)
            checked += 1
    assert checked == sum(len(c.profiles) for c in CATALOGUES.values()) - 1


def test_mig_pod_and_mig_node_fit_in_cluster_state() -> None:
    pod = v1_pod(containers=[v1_container(limits={"nvidia.com/mig-3g.40gb": "1"})])
    request = pod_request(pod)
    assert request.mig is not None and request.mig.profile == "3g.40gb"
    assert (request.num_gpu, request.gpu_milli) == (1, 500)
    mig_node = node_spec(
        v1_node("mig-a", product="NVIDIA-A100-SXM4-80GB", gpus=4, mig={"3g.40gb": 8})
    )
    plain = node_spec(v1_node("plain-b"))
    assert mig_node.mig_enabled and mig_node.gpu_count == 4 and mig_node.gpu_model == "A100-80GB"
    state = ClusterState([mig_node, plain])
    assert state.feasible(request).tolist() == [True, False]


@pytest.mark.parametrize(
    ("containers", "annotations", "error", "match"),
    [
        (
            [v1_container(limits={"nvidia.com/mig-1g.10gb": "2"})],
            {},
            UnsupportedPodError,
            "one MIG instance per pod",
        ),
        (
            [v1_container(limits={"nvidia.com/mig-1g.10gb": "1"})],
            {"kubesage.io/gpu-milli": "500"},
            UnsupportedPodError,
            r"got \{'nvidia.com/mig-1g.10gb': 1\}, nvidia.com/gpu=0, kubesage.io/gpu-milli='500'",
        ),
        (
            [v1_container(limits={"nvidia.com/gpu": "65"})],
            {},
            UnfittablePodError,
            r"requests.nvidia.com/gpu: 65 GPUs asked for, and no node has more than 64",
        ),
        (
            [v1_container(limits={"nvidia.com/mig-9g.10gb": "1"})],
            {},
            TranslateError,
            r"nvidia.com/mig-9g.10gb: '9g.10gb' is not a MIG profile",
        ),
        (
            [v1_container(limits={"nvidia.com/gpu": "1.5"})],
            {},
            TranslateError,
            r"requests.nvidia.com/gpu: extended resource count 1.5",
        ),
        (
            [v1_container(limits={"nvidia.com/gpu": "2"})],
            {"kubesage.io/gpu-milli": "300"},
            TranslateError,
            r"annotations.kubesage.io/gpu-milli: a GPU-sharing pod takes part of one GPU",
        ),
        (
            [v1_container()],
            {"kubesage.io/gpu-milli": "1200"},
            TranslateError,
            r"annotations.kubesage.io/gpu-milli: expected a whole number",
        ),
        (
            [v1_container(requests={"cpu": "-1"})],
            {},
            TranslateError,
            r"containers\[0\].resources.requests.cpu: negative quantity",
        ),
        (
            [v1_container(requests={"memory": "12 parsecs"})],
            {},
            TranslateError,
            r"containers\[0\].resources.requests.memory: cannot read quantity",
        ),
    ],
)
def test_bad_pods_raise_with_the_field_path(
    containers: list[dict[str, Any]],
    annotations: dict[str, str],
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match) as raised:
        pod_request(v1_pod(containers=containers, annotations=annotations))
    assert isinstance(raised.value, InputError)
    assert "pod 'ml/trainer-0'" in str(raised.value)


@pytest.mark.parametrize(
    ("pod", "match"),
    [
        ({"metadata": {}}, "pod.metadata.name: missing"),
        (
            {"metadata": {"name": "x"}, "spec": {"containers": {"a": 1}}},
            "spec.containers: expected a list",
        ),
        (
            {"metadata": {"name": "x"}, "spec": {"priority": "high"}},
            "spec.priority: expected an integer",
        ),
        ([], "expected a Pod object"),
    ],
)
def test_malformed_pod_shapes(pod: Any, match: str) -> None:
    with pytest.raises(TranslateError, match=match):
        pod_request(pod)


def test_node_allocatable_model_zone_and_rack() -> None:
    spec = node_spec(
        v1_node("gpu-17", cpu="95500m", memory="786432Ki", rack="rack-3", zone="us-east-1b")
    )
    assert (spec.cpu_milli, spec.memory_mib, spec.gpu_count) == (95_500, 768, 8)
    assert spec.gpu_model == "H100-80GB" and spec.gpu_memory_mib == 81_559
    assert (spec.zone, spec.rack) == ("us-east-1b", "rack-3")
    assert spec.labels["kubernetes.io/hostname"] == "gpu-17"


def test_gpu_node_without_product_label_gets_an_unknown_model() -> None:
    spec = node_spec(v1_node("bare", product=None))
    assert spec.gpu_count == 8 and spec.gpu_model == "unknown"


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"allocatable": {"cpu": "lots"}}, r"status.allocatable.cpu: cannot read quantity"),
        ({"allocatable": {"cpu": "1e30"}}, r"status.allocatable.cpu: quantity is larger"),
        ({"allocatable": {"nvidia.com/gpu": "65"}}, r"gpu_count"),
    ],
)
def test_bad_nodes_raise_with_the_field_path(change: dict[str, Any], match: str) -> None:
    node = v1_node("n1")
    node["status"].update(change)
    with pytest.raises(TranslateError, match=match):
        node_spec(node)


@pytest.mark.parametrize(
    ("mig", "gpus"),
    [
        ({"1g.10gb": 56}, 8),  # all-1g.10gb: 7 a GPU, 56 slices would say 7
        ({"2g.20gb": 24}, 8),  # all-2g.20gb: 3 a GPU, 48 slices would say 6
        ({"1g.10gb": 16, "2g.20gb": 8, "3g.40gb": 8}, 8),  # all-balanced: the slices
        ({"3g.40gb": 16}, 8),
        ({"1g.10gb+me": 3, "1g.10gb": 2}, 3),  # one media-engine instance a GPU
    ],
)
def test_without_gfds_gpu_count_a_mig_node_has_at_least_the_gpus_its_instances_need(
    mig: dict[str, int], gpus: int
) -> None:
    node = v1_node("mig-h100", gpus=8, product="NVIDIA-H100-80GB-HBM3", mig=mig)
    del node["metadata"]["labels"]["nvidia.com/gpu.count"]
    assert node_spec(node).gpu_count == gpus


def test_a_node_under_the_mig_single_strategy_is_refused_not_read_as_56_gpus() -> None:
    node = v1_node("mig-single", gpus=56, product="NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")
    with pytest.raises(TranslateError, match=r"is a MIG device.*'mixed' or DRA") as refused:
        node_spec(node)
    assert "metadata.labels.nvidia.com/gpu.product" in str(refused.value)
    # A node whose GPUs come from DRA ResourceSlices publishes no nvidia.com/gpu: kept.
    assert (
        node_spec(v1_node("dra", gpus=0, product="NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")).gpu_count == 0
    )
