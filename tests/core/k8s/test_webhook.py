"""The admission webhook against AdmissionReview v1 requests as the API server sends them.

Patches are applied with the ``jsonpatch`` package (an independent RFC 6902
implementation), so the tests check what the API server would really store.
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

import jsonpatch
import pytest

from kubesage.core.k8s.policy_source import (
    FilePolicySource,
    PolicySourceError,
    default_policy_dir,
)
from kubesage.core.k8s.scheduling_policy import SchedulingPolicy
from kubesage.core.k8s.webhook import (
    APPLIED_ANNOTATION,
    AdmissionWebhook,
    json_patch,
    pointer_token,
)
from tests.core.k8s.webhook_support import (
    StaticSource,
    admit,
    call,
    fallbacks,
    pod_object,
    policy,
    review,
    webhook_for,
)


@pytest.fixture
def examples() -> AdmissionWebhook:
    webhook = webhook_for(FilePolicySource(default_policy_dir()))
    yield webhook
    webhook.close()


# --- the example policies on realistic pods --------------------------------------------


def test_gpu_training_pod_gets_mig_scheduler_affinity_and_toleration(
    examples: AdmissionWebhook,
) -> None:
    before = pod_object({"kubesage.io/workload": "gpu-training"}, gpus="1")
    after = admit(examples, before)
    spec = after["spec"]
    assert spec["schedulerName"] == "kubesage"
    resources = spec["containers"][0]["resources"]
    assert resources["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert resources["requests"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/mig-3g.40gb": "1"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
    # The defaulted toleration stays; the policy's is added after it.
    assert spec["tolerations"][0]["key"] == "node.kubernetes.io/not-ready"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert after["metadata"]["labels"]["kubesage.io/managed"] == "true"
    assert after["metadata"]["annotations"][APPLIED_ANNOTATION] == "gpu-training"
    # Nothing the policy does not own changed.
    untouched = copy.deepcopy(after)
    for key in ("schedulerName", "affinity", "tolerations", "containers"):
        untouched["spec"].pop(key)
        before["spec"].pop(key, None)
    assert untouched["spec"] == before["spec"]


@pytest.mark.parametrize(
    ("gpus", "annotations", "why"),
    [
        ("4", {}, "the pod asks for 4 nvidia.com/gpu and a MIG instance stands for one"),
        ("1", {"kubesage.io/gpu-milli": "500"}, "the pod shares a GPU (kubesage.io/gpu-milli)"),
    ],
)
def test_only_a_pod_of_one_whole_gpu_is_moved_to_a_mig_instance(
    examples: AdmissionWebhook, gpus: str, annotations: dict[str, str], why: str
) -> None:
    # Four GPUs are not four 3g.40gb slices (a CUDA process uses one MIG device), and a
    # GPU share is not an instance: both keep nvidia.com/gpu, and the user is told why;
    # the rest of the policy still applies.
    before = pod_object(
        {"kubesage.io/workload": "gpu-training"}, annotations=annotations, gpus=gpus
    )
    response, _ = call(examples, review(before))
    after = admit(examples, before)
    resources = after["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"nvidia.com/gpu": gpus}
    assert after["spec"]["schedulerName"] == "kubesage"
    assert response["warnings"] == [
        f"kubesage: policy gpu-training: {why}; nvidia.com/gpu is left as it is"
    ]


def test_the_mig_opt_out_label_and_another_namespace_keep_the_pod_as_is(
    examples: AdmissionWebhook,
) -> None:
    opted_out = pod_object({"kubesage.io/workload": "gpu-training", "kubesage.io/mig": "disabled"})
    assert call(examples, review(opted_out))[1] == []
    body = review(pod_object({"kubesage.io/workload": "gpu-training"}))
    body["request"]["namespace"] = "kubesage"
    assert call(examples, body)[1] == []


def test_flink_taskmanager_gets_hints_and_zone_preference(examples: AdmissionWebhook) -> None:
    labels = {"type": "flink-native-kubernetes", "component": "taskmanager", "app": "ingest"}
    after = admit(examples, pod_object(labels))
    annotations = after["metadata"]["annotations"]
    assert annotations["kubesage.io/flink-initial-parallelism"] == "4"
    assert annotations["kubesage.io/flink-max-parallelism"] == "128"
    assert annotations["kubesage.io/flink-checkpoint-group"] == "streaming-ingest"
    preferred = after["spec"]["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred[0]["podAffinityTerm"]["topologyKey"] == "topology.kubernetes.io/zone"
    assert after["spec"]["schedulerName"] == "default-scheduler"


def test_spark_executor_prefers_the_rack_of_its_own_application(
    examples: AdmissionWebhook,
) -> None:
    labels = {"spark-role": "executor", "spark-app-selector": "spark-7f3a"}
    after = admit(examples, pod_object(labels))
    assert after["metadata"]["annotations"]["kubesage.io/spark-locality"] == "rack"
    affinity = after["spec"]["affinity"]
    term = affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term == {
        "weight": 80,
        "podAffinityTerm": {
            "labelSelector": {"matchLabels": {"spark-app-selector": "spark-7f3a"}},
            "topologyKey": "kubesage.io/rack",
        },
    }
    assert (
        affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"]
        == 20
    )


# --- merging rules -------------------------------------------------------------------------


def test_required_node_affinity_is_anded_with_the_pods_own_terms() -> None:
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    gpu = {"key": "gpu", "operator": "Exists"}
    fast = {"key": "disk", "operator": "In", "values": ["nvme"]}
    webhook = webhook_for(
        StaticSource(
            policy(
                "gpu",
                {
                    "podSelector": {},
                    "inject": {
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [{"matchExpressions": [gpu]}]
                                }
                            }
                        }
                    },
                },
            )
        )
    )
    obj = pod_object()
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchExpressions": [fast]}]
            }
        }
    }
    after = admit(webhook, obj)
    terms = after["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    # (zone OR fast) AND gpu == (zone AND gpu) OR (fast AND gpu)
    assert terms == [{"matchExpressions": [zone, gpu]}, {"matchExpressions": [fast, gpu]}]
    # an empty term matches no node: ANDed with the policy's it must not become the
    # policy's own term (which matches nodes)
    obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ] = [{}, {"matchExpressions": [fast]}]
    after = admit(webhook, obj)
    terms = after["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [fast, gpu]}]
    webhook.close()


def test_higher_priority_wins_and_the_pods_own_values_win_over_both() -> None:
    high = policy(
        "high",
        {
            "priority": 10,
            "podSelector": {},
            "inject": {"schedulerName": "kubesage", "annotations": {"team": "high"}},
        },
    )
    low = policy(
        "low",
        {
            "priority": 1,
            "podSelector": {},
            "inject": {
                "schedulerName": "other",
                "annotations": {"team": "low", "cost-center": "42"},
            },
        },
    )
    webhook = webhook_for(StaticSource(low, high))
    after = admit(webhook, pod_object(annotations={"cost-center": "7"}))
    assert after["spec"]["schedulerName"] == "kubesage"
    assert after["metadata"]["annotations"]["team"] == "high"
    assert after["metadata"]["annotations"]["cost-center"] == "7"
    assert after["metadata"]["annotations"][APPLIED_ANNOTATION] == "high,low"
    explicit = pod_object()
    explicit["spec"]["schedulerName"] = "volcano"
    assert admit(webhook, explicit)["spec"]["schedulerName"] == "volcano"
    webhook.close()


def test_mig_rename_covers_init_containers_and_leaves_an_ambiguous_container_alone() -> None:
    webhook = webhook_for(
        StaticSource(
            policy(
                "mig",
                {"podSelector": {}, "inject": {"migResources": [{"to": "nvidia.com/mig-1g.10gb"}]}},
            )
        )
    )
    obj = pod_object(gpus="1")  # init containers run one at a time: the pod holds one GPU
    obj["spec"]["initContainers"] = [
        {"name": "warmup", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {
            "name": "both",
            "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "1"}},
        },
    ]
    _, patch = call(webhook, review(obj))
    after = jsonpatch.apply_patch(obj, patch)
    spec = after["spec"]
    assert spec["initContainers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert spec["initContainers"][1]["resources"] == obj["spec"]["initContainers"][1]["resources"]
    response, again = call(webhook, review(after))
    assert again == []
    assert "has both nvidia.com/gpu and nvidia.com/mig-1g.10gb" in response["warnings"][0]
    webhook.close()


def test_labels_injected_by_one_policy_select_another_and_the_result_is_a_fixed_point() -> None:
    tag = policy(
        "tag", {"podSelector": {"matchLabels": {"app": "x"}}, "inject": {"labels": {"tier": "gpu"}}}
    )
    route = policy(
        "route",
        {"podSelector": {"matchLabels": {"tier": "gpu"}}, "inject": {"schedulerName": "kubesage"}},
    )
    webhook = webhook_for(StaticSource(tag, route))
    after = admit(webhook, pod_object({"app": "x"}))
    assert after["metadata"]["labels"] == {"app": "x", "tier": "gpu"}
    assert after["spec"]["schedulerName"] == "kubesage"
    assert after["metadata"]["annotations"][APPLIED_ANNOTATION] == "route,tag"
    webhook.close()


def test_annotation_keys_with_a_slash_are_escaped_in_the_patch() -> None:
    webhook = webhook_for(
        StaticSource(
            policy(
                "esc",
                {
                    "podSelector": {},
                    "inject": {"annotations": {"example.com/a.b": "1", "plain": "2"}},
                },
            )
        )
    )
    obj = pod_object(annotations={"existing": "yes"})
    _, patch = call(webhook, review(obj))
    paths = {op["path"] for op in patch}
    assert "/metadata/annotations/example.com~1a.b" in paths
    assert "/metadata/annotations/plain" in paths
    after = jsonpatch.apply_patch(obj, patch)
    assert after["metadata"]["annotations"]["example.com/a.b"] == "1"
    assert after["metadata"]["annotations"]["existing"] == "yes"
    webhook.close()


@pytest.mark.parametrize(
    ("key", "token"),
    [("a/b", "a~1b"), ("a~b", "a~0b"), ("~1", "~01"), ("/~", "~1~0"), ("", ""), (3, "3")],
)
def test_pointer_token_escapes_tilde_before_slash(key: str | int, token: str) -> None:
    assert pointer_token(key) == token


def test_json_patch_turns_before_into_after() -> None:
    before = {"a": {"x": 1, "y/z": [1, 2]}, "b": [1], "c": "keep", "gone": True, "t~": 1}
    after = {"a": {"x": 2, "y/z": [1, 2, 3]}, "b": [2, 3], "c": "keep", "new": {"k": None}}
    assert jsonpatch.apply_patch(before, json_patch(before, after)) == after
    assert json_patch(after, after) == []


# --- what is not mutated, and failures ----------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "resource", "sub_resource"),
    [
        ("UPDATE", "pods", None),
        ("DELETE", "pods", None),
        ("CREATE", "pods", "binding"),
        ("CREATE", "pods", "eviction"),
        ("CREATE", "deployments", None),
    ],
)
def test_only_pod_create_is_mutated(
    examples: AdmissionWebhook, operation: str, resource: str, sub_resource: str | None
) -> None:
    obj = pod_object({"kubesage.io/workload": "gpu-training"}, gpus="1")
    response, patch = call(
        examples, review(obj, operation=operation, resource=resource, sub_resource=sub_resource)
    )
    assert patch == []
    assert "warnings" not in response


class BrokenSource:
    def policies(self) -> list[SchedulingPolicy]:
        raise PolicySourceError("cannot list schedulingpolicies.kubesage.io: connection refused")


class StuckSource:
    """A source that blocks until released (an API server that never answers)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def policies(self) -> list[SchedulingPolicy]:
        self.release.wait(30)
        return []


def test_a_failing_source_allows_the_pod_unchanged_with_a_warning() -> None:
    webhook = webhook_for(BrokenSource())
    counted = fallbacks("webhook", "error")
    response, patch = call(webhook, review(pod_object()))
    assert patch == []
    assert "connection refused" in response["warnings"][0]
    assert fallbacks("webhook", "error") == counted + 1
    webhook.close()


def test_a_stuck_source_allows_the_pod_when_the_budget_runs_out() -> None:
    source = StuckSource()
    webhook = AdmissionWebhook(source, budget_s=0.05)
    try:
        response, patch = call(webhook, review(pod_object()))
        assert patch == []
        assert "budget" in response["warnings"][0]
    finally:
        source.release.set()
        webhook.close()


def test_a_pod_with_a_malformed_field_is_allowed_unchanged() -> None:
    webhook = webhook_for(
        StaticSource(policy("p", {"podSelector": {}, "inject": {"labels": {"a": "b"}}}))
    )
    obj = pod_object()
    obj["metadata"]["labels"] = ["not", "a", "map"]
    response, patch = call(webhook, review(obj))
    assert patch == []
    assert "object.metadata.labels" in response["warnings"][0]
    webhook.close()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"\xff\xfe\x00", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "apiVersion"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}', "kind must be"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request"),
    ],
)
def test_malformed_bodies_get_400_saying_what_is_wrong(
    examples: AdmissionWebhook, body: bytes, words: str
) -> None:
    status, answer = examples.handle(body)
    assert status == 400
    assert words in answer["error"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["request"].pop("uid"), "request.uid"),
        (lambda r: r["request"].update(uid=7), "request.uid"),
        (lambda r: r["request"].update(operation="PATCH"), "request.operation"),
        (lambda r: r["request"]["resource"].pop("resource"), "request.resource.resource"),
        (lambda r: r["request"].update(object="pod"), "request.object"),
        (lambda r: r["request"].update(object=None), "request.object"),
    ],
)
def test_a_broken_request_field_is_named_in_the_400(change: Any, field: str) -> None:
    webhook = webhook_for(StaticSource())
    body = review(pod_object())
    change(body)
    status, answer = webhook.handle(json.dumps(body).encode())
    assert status == 400
    assert answer["error"].startswith(field)
    webhook.close()


def test_a_pod_with_an_empty_required_term_list_takes_the_policys_terms(
    examples: AdmissionWebhook,
) -> None:
    before = pod_object({"kubesage.io/workload": "gpu-training"}, gpus="1")
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    before["spec"]["affinity"] = {"nodeAffinity": {required: {"nodeSelectorTerms": []}}}
    after = admit(examples, before)
    terms = after["spec"]["affinity"]["nodeAffinity"][required]["nodeSelectorTerms"]
    assert [e["key"] for e in terms[0]["matchExpressions"]] == [
        "nvidia.com/gpu.product",
        "nvidia.com/mig.strategy",
    ]
