"""Fuzzing AdmissionWebhook.handle: no exception escapes, malformed input is a 400 with a
message, every 200 is an allowed AdmissionReview whose patch applies, and mutation is
idempotent on arbitrary pods."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubesage.core.k8s.policy_source import FilePolicySource, default_policy_dir
from kubesage.core.k8s.webhook import AdmissionWebhook

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)

# Label keys and values the example policies look at, so generated pods do get mutated.
label_keys = st.sampled_from(
    [
        "kubesage.io/workload",
        "kubesage.io/mig",
        "type",
        "component",
        "spark-role",
        "spark-app-selector",
        "app",
    ]
)
label_values = st.sampled_from(
    [
        "gpu-training",
        "disabled",
        "flink-native-kubernetes",
        "taskmanager",
        "jobmanager",
        "executor",
        "app-1",
        "",
    ]
)
node_requirements = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["zone", "nvidia.com/gpu.product", "disk"]),
        "operator": st.just("In"),
        "values": st.lists(st.sampled_from(["a", "b", "NVIDIA-H100-80GB-HBM3"]), min_size=1),
    }
)
quantities = st.sampled_from(["1", "2", "8"])
PROFILES = [
    {"kubesage.io/workload": "gpu-training"},
    {"type": "flink-native-kubernetes", "component": "taskmanager"},
    {"spark-role": "executor", "spark-app-selector": "app-1"},
    {},
]
"""Label sets the example policies select, which the fuzzer then perturbs."""


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    """Plausible v1 Pods: labels the policies select on, and fields they merge into."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": f"c{i}",
                "image": "x",
                "resources": {
                    kind: draw(
                        st.dictionaries(st.sampled_from(["cpu", "nvidia.com/gpu"]), quantities)
                    )
                    for kind in draw(st.lists(st.sampled_from(["requests", "limits"]), unique=True))
                },
            }
            for i in range(draw(st.integers(1, 2)))
        ]
    }
    if draw(st.booleans()):
        spec["schedulerName"] = draw(st.sampled_from(["default-scheduler", "volcano"]))
    if draw(st.booleans()):
        spec["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    if draw(st.booleans()):
        terms = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"matchExpressions": st.lists(node_requirements, min_size=1, max_size=2)}
                ),
                min_size=1,
                max_size=2,
            )
        )
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    profile = draw(st.sampled_from(PROFILES))
    extra = draw(st.dictionaries(label_keys, label_values, max_size=2))
    metadata: dict[str, Any] = {"labels": {**profile, **extra}}
    if draw(st.booleans()):
        metadata["annotations"] = draw(
            st.dictionaries(
                st.sampled_from(["a", "example.com/b", "kubesage.io/flink-max-parallelism"]),
                st.text(max_size=4),
                max_size=2,
            )
        )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def review(obj: Any, uid: Any = "u-1", **request: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": "CREATE",
            "object": obj,
            **request,
        },
    }


@pytest.fixture(scope="module")
def webhook() -> Iterator[AdmissionWebhook]:
    hook = AdmissionWebhook(FilePolicySource(default_policy_dir()), budget_s=30.0)
    yield hook
    hook.close()


def check_answer(status: int, answer: dict[str, Any], body: Any) -> list[dict[str, Any]]:
    """The invariants of every answer; the decoded patch of a 200 ([] when none)."""
    assert status in (200, 400)
    if status == 400:
        assert isinstance(answer["error"], str) and answer["error"]
        return []
    response = answer["response"]
    assert response["allowed"] is True
    assert response["uid"] == body["request"]["uid"]
    json.dumps(answer)  # serialisable as the server will send it
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return patch


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_escape_as_an_exception(
    webhook: AdmissionWebhook, body: bytes
) -> None:
    status, answer = webhook.handle(body)
    assert status == 400
    assert answer["error"]


@FUZZ
@given(
    field=st.sampled_from(
        ["uid", "operation", "resource", "kind", "namespace", "object", "subResource"]
    ),
    value=json_values,
    top=st.sampled_from([None, "apiVersion", "kind", "request"]),
    top_value=json_values,
)
def test_mangled_reviews_get_an_allowed_200_or_a_400(
    webhook: AdmissionWebhook, field: str, value: Any, top: str | None, top_value: Any
) -> None:
    body = review({"metadata": {"labels": {"kubesage.io/workload": "gpu-training"}}, "spec": {}})
    body["request"][field] = value
    if top is not None:
        body[top] = top_value
    status, answer = webhook.handle(json.dumps(body).encode())
    patch = check_answer(status, answer, body)
    if patch:
        jsonpatch.apply_patch(body["request"]["object"], patch)


@FUZZ
@given(pod=pods())
def test_any_pod_gets_a_patch_that_applies_and_a_second_pass_changes_nothing(
    webhook: AdmissionWebhook, pod: dict[str, Any]
) -> None:
    body = review(pod)
    status, answer = webhook.handle(json.dumps(body).encode())
    assert status == 200
    patch = check_answer(status, answer, body)
    # The only warnings a well-formed pod gets are the policies' own notes: a Spark pod
    # without its app label, a GPU request a MIG rename leaves as it is.
    assert all(
        "spark-app-selector" in w or w.endswith("nvidia.com/gpu is left as it is")
        for w in answer["response"].get("warnings", [])
    )
    after = jsonpatch.apply_patch(pod, patch)
    again = review(after)
    status, answer = webhook.handle(json.dumps(again).encode())
    assert check_answer(status, answer, again) == []


@FUZZ
@given(obj=json_values)
def test_any_json_as_the_pod_is_allowed(webhook: AdmissionWebhook, obj: Any) -> None:
    body = review(obj)
    status, answer = webhook.handle(json.dumps(body).encode())
    patch = check_answer(status, answer, body)
    if patch:
        jsonpatch.apply_patch(obj, patch)
