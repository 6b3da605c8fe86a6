"""Pods translated once per template give exactly what translating each pod gives."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.extender import Extender
from kubesage.core.k8s.pod_templates import PodTemplates
from kubesage.core.k8s.translate import (
    GANG_ANNOTATION,
    GPU_MILLI_ANNOTATION,
    TranslateError,
    pod_request,
)
from kubesage.core.policy import PolicyContext, make_policy
from tests.core.k8s import v1_container, v1_pod


def template_pod(name: str, namespace: str = "team-a", **changes: Any) -> dict[str, Any]:
    pod = v1_pod(
        name,
        namespace=namespace,
        containers=[
            v1_container(
                requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                limits={"nvidia.com/gpu": "1"},
            )
        ],
    )
    pod["metadata"]["annotations"] = {GPU_MILLI_ANNOTATION: "500", GANG_ANNOTATION: "g1"}
    for path, value in changes.items():
        where = pod
        *parents, last = path.split(".")
        for part in parents:
            where = where.setdefault(part, {})
        where[last] = value
    return pod


VARIANTS = {
    "same template, another name": template_pod("p-2"),
    "another namespace (name and gang)": template_pod("p-1", namespace="team-b"),
    "no namespace": template_pod("p-3", namespace=""),
    "another share": template_pod("p-4", **{"metadata.annotations": {GPU_MILLI_ANNOTATION: "300"}}),
    "a priority": template_pod("p-5", **{"spec.priority": 7}),
    "a QoS class": template_pod("p-6", **{"status.qosClass": "Burstable"}),
    "a node selector": template_pod(
        "p-7", **{"spec.nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}
    ),
}


@pytest.mark.parametrize("label", list(VARIANTS))
def test_a_template_hit_is_the_pods_own_translation(label: str) -> None:
    templates = PodTemplates()
    first = template_pod("p-1")
    assert templates.request(first) == pod_request(first)
    pod = VARIANTS[label]
    assert templates.request(pod) == pod_request(pod)
    assert templates.request(first) == pod_request(first)  # the first is still right


def test_a_pod_that_cannot_be_translated_raises_every_time() -> None:
    templates = PodTemplates()
    good = template_pod("p-1")
    templates.request(good)
    bad = copy.deepcopy(good)
    bad["metadata"]["name"] = ""
    for _ in range(2):
        with pytest.raises(TranslateError, match="name"):
            templates.request(bad)
    broken = template_pod("p-9", **{"metadata.annotations": {GPU_MILLI_ANNOTATION: "5000"}})
    for _ in range(2):
        with pytest.raises(TranslateError, match="p-9"):
            templates.request(broken)


def test_the_cache_is_bounded() -> None:
    templates = PodTemplates(size=2)
    pods = [template_pod(f"p-{n}", **{"spec.priority": n}) for n in range(5)]
    for pod in pods + pods:
        assert templates.request(pod) == pod_request(pod)


def test_bind_gets_each_pods_own_request() -> None:
    cluster = EmbeddedCluster.synthetic(20)
    policy = make_policy("fgd", PolicyContext(seed=0, workload=tuple(cluster.workload)))
    seen = []
    extender = Extender(cluster, policy, seen.append)
    with cluster.locked() as (_, names):
        candidates = list(names)
    for name, namespace in (("a", "x"), ("b", "x"), ("a", "y")):
        pod = template_pod(name, namespace=namespace)
        pod["metadata"]["uid"] = f"uid-{namespace}-{name}"
        extender.filter(orjson.dumps({"Pod": pod, "NodeNames": candidates}))
        binding = {"PodName": name, "PodNamespace": namespace, "PodUID": f"uid-{namespace}-{name}"}
        extender.bind(orjson.dumps({**binding, "Node": candidates[0]}))
        assert seen[-1].request == pod_request(pod)
    assert [target.request.name for target in seen] == ["x/a", "x/b", "y/a"]
    assert [target.request.gang_id for target in seen] == ["x/g1", "x/g1", "y/g1"]
