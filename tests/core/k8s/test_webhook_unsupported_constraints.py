"""The webhook does not redirect to kubesage a pod whose required constraints kubesage's
scheduler cannot honour, and says why in AdmissionReview warnings; the shared rule."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest

from kubesage.core.k8s.unsupported_constraints import unsupported_constraints
from kubesage.core.k8s.webhook import AdmissionWebhook, json_patch, mutate_pod
from tests.core.k8s.webhook_support import (
    StaticSource,
    call,
    pod_object,
    policy,
    review,
    webhook_for,
)

ANTI = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"
REQUIRED_ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"app": "inference"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
}


def spread(when: str) -> dict[str, Any]:
    return {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": "inference"}},
    }


def redirect(name: str = "to-kubesage", scheduler: str = "kubesage", **inject: Any) -> Any:
    return policy(
        name,
        {
            "podSelector": {"matchLabels": {"app": "inference"}},
            "inject": {"schedulerName": scheduler, **inject},
        },
    )


def inference_pod(**spec: Any) -> dict[str, Any]:
    pod = pod_object({"app": "inference"}, gpus="1")
    pod["spec"].update(spec)
    return pod


def admitted(webhook: AdmissionWebhook, pod: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The pod as stored after the patch and the answer's warnings."""
    response, patch = call(webhook, review(pod))
    return jsonpatch.apply_patch(pod, patch), list(response.get("warnings") or [])


def test_a_policy_adding_required_anti_affinity_does_not_redirect_and_warns() -> None:
    webhook = AdmissionWebhook(StaticSource(redirect(affinity=REQUIRED_ANTI)), budget_s=30.0)
    try:
        after, warnings = admitted(webhook, inference_pod())
    finally:
        webhook.close()
    assert after["spec"]["schedulerName"] == "default-scheduler"
    assert after["spec"]["affinity"] == REQUIRED_ANTI  # the rest of the policy applies
    assert any(w.startswith("kubesage: not redirected to kubesage") and ANTI in w for w in warnings)
    assert any("policy to-kubesage redirects no pod to kubesage" in w for w in warnings)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"topologySpreadConstraints": [spread("DoNotSchedule")]}, "topologySpreadConstraints[0]"),
        (
            {"affinity": {"podAffinity": REQUIRED_ANTI["podAntiAffinity"]}},
            "podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        ),
    ],
)
def test_a_pod_carrying_required_constraints_is_not_redirected(
    spec: dict[str, Any], field: str
) -> None:
    mutation = mutate_pod(inference_pod(**spec), [redirect()], {})
    assert mutation.pod["spec"]["schedulerName"] == "default-scheduler"
    (warning,) = mutation.warnings
    assert warning.startswith("not redirected to kubesage, as kubesage does not implement")
    assert field in warning


def test_preferred_terms_and_schedule_anyway_do_not_stop_a_redirect() -> None:
    term = REQUIRED_ANTI["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    preferred = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": term}
            ]
        }
    }
    pod = inference_pod(topologySpreadConstraints=[spread("ScheduleAnyway")], affinity=preferred)
    mutation = mutate_pod(pod, [redirect()], {})
    assert mutation.pod["spec"]["schedulerName"] == "kubesage"
    assert mutation.warnings == []
    pod["spec"]["topologySpreadConstraints"].append(spread("DoNotSchedule"))
    mutation = mutate_pod(pod, [redirect()], {})
    assert mutation.pod["spec"]["schedulerName"] == "default-scheduler"
    assert mutation.warnings == [
        "not redirected to kubesage, as kubesage does not implement:"
        " spec.topologySpreadConstraints[1] (whenUnsatisfiable: DoNotSchedule)"
    ]


def test_a_lower_priority_policy_may_redirect_elsewhere_and_the_result_is_a_fixed_point() -> None:
    first = redirect("first", affinity=REQUIRED_ANTI)
    second = policy(
        "second",
        {
            "priority": -5,
            "podSelector": {"matchLabels": {"app": "inference"}},
            "inject": {"schedulerName": "volcano"},
        },
    )
    pod = inference_pod()
    mutation = mutate_pod(pod, [first, second], {})
    assert mutation.pod["spec"]["schedulerName"] == "volcano"
    assert mutation.applied == ["first", "second"]
    again = mutate_pod(json.loads(json.dumps(mutation.pod)), [first, second], {})
    assert json_patch(mutation.pod, again.pod) == []


def test_a_pod_naming_kubesage_itself_keeps_it_with_a_warning() -> None:
    pod = inference_pod(schedulerName="kubesage", topologySpreadConstraints=[spread("Other")])
    mutation = mutate_pod(pod, [], {})
    assert mutation.pod["spec"]["schedulerName"] == "kubesage"
    (warning,) = mutation.warnings
    assert "leaves the pod pending" in warning and "whenUnsatisfiable: Other" in warning


def test_only_the_schedulers_named_as_kubesages_are_guarded() -> None:
    pod = inference_pod(topologySpreadConstraints=[spread("DoNotSchedule")])
    ours = redirect("ours", scheduler="gpu-batch")
    assert mutate_pod(pod, [ours], {}).pod["spec"]["schedulerName"] == "gpu-batch"
    webhook = AdmissionWebhook(StaticSource(ours), budget_s=30.0, schedulers=["gpu-batch"])
    try:
        after, warnings = admitted(webhook, pod)
    finally:
        webhook.close()
    assert after["spec"]["schedulerName"] == "default-scheduler"
    assert len(warnings) == 1 and "not redirected to gpu-batch" in warnings[0]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, ()),
        ({"affinity": REQUIRED_ANTI}, (ANTI,)),
        ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}}, ()),
        (
            {"topologySpreadConstraints": [spread("ScheduleAnyway"), spread("DoNotSchedule")]},
            ("spec.topologySpreadConstraints[1] (whenUnsatisfiable: DoNotSchedule)",),
        ),
        ({"affinity": "odd", "topologySpreadConstraints": "odd"}, ()),  # never raises
        (
            {"topologySpreadConstraints": [7, {"maxSkew": 1}]},
            ("spec.topologySpreadConstraints[1] (whenUnsatisfiable: DoNotSchedule)",),
        ),
    ],
)
def test_the_rule(spec: dict[str, Any], expected: tuple[str, ...]) -> None:
    assert unsupported_constraints({"spec": spec}) == expected


@pytest.mark.parametrize(
    "volume",
    [
        {"name": "data", "persistentVolumeClaim": {"claimName": "dataset"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
    ],
)
def test_a_pod_with_a_claimed_volume_is_not_redirected(volume: dict[str, Any]) -> None:
    """Only kube-scheduler's VolumeBinding writes the selected-node a WaitForFirstConsumer
    provisioner waits for: moved to kubesage, the claim would stay Pending."""
    webhook = webhook_for(StaticSource(redirect()))
    stored, warnings = admitted(webhook, inference_pod(volumes=[volume]))
    assert stored["spec"].get("schedulerName") != "kubesage"
    kind = next(k for k in volume if k != "name")
    assert any(f"spec.volumes[0].{kind} (volume binding)" in w for w in warnings)
    # A pod that names kubesage itself keeps it: it is bound, volume and all.
    own = inference_pod(volumes=[volume], schedulerName="kubesage")
    stored, _ = admitted(webhook, own)
    assert stored["spec"]["schedulerName"] == "kubesage"
    webhook.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("spec", {"nodeName": "node-a100-1"}),
        ("metadata", {"annotations": {"kubernetes.io/config.mirror": "abc"}}),
    ],
)
def test_a_pod_no_scheduler_places_is_left_as_it_is(field: str, value: dict[str, Any]) -> None:
    """A pod with spec.nodeName (kubectl debug node/…) or a mirror pod goes to the kubelet
    directly: affinity or a MIG resource added to it would only make the kubelet refuse it."""
    webhook = webhook_for(StaticSource(redirect(labels={"team": "ml"})))
    pod = inference_pod()
    pod[field].update(value)
    assert call(webhook, review(pod))[1] == []
    assert call(webhook, review(inference_pod()))[1] != []  # the same pod, scheduled
    webhook.close()


def test_metadata_of_the_wrong_type_is_allowed_unchanged_not_a_server_error() -> None:
    webhook = webhook_for(StaticSource(redirect()))
    pod = inference_pod()
    pod["metadata"] = ["not", "an", "object"]
    body = review(pod)
    body["request"].pop("namespace", None)
    response, patch = call(webhook, body)
    assert patch == [] and "object.metadata" in response["warnings"][0]
    webhook.close()
