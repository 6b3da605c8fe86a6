"""AdmissionReview v1 requests as kube-apiserver sends them, and a webhook to send them
to, for the webhook's tests and the policy sources'."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch

from kubesage.core.k8s.policy_source import (
    PolicySource,
)
from kubesage.core.k8s.scheduling_policy import SchedulingPolicy, parse_policy
from kubesage.core.k8s.webhook import (
    AdmissionWebhook,
)
from kubesage.core.observability import metrics


def pod_object(
    labels: dict[str, str] | None = None,
    *,
    annotations: dict[str, str] | None = None,
    gpus: str | None = None,
) -> dict[str, Any]:
    """A pod as the API server has it at mutating admission: decoded and defaulted."""
    resources: dict[str, Any] = {"requests": {"cpu": "4", "memory": "16Gi"}}
    if gpus is not None:
        resources["limits"] = {"nvidia.com/gpu": gpus}
        resources["requests"]["nvidia.com/gpu"] = gpus
    metadata: dict[str, Any] = {
        "generateName": "trainer-",
        "namespace": "ml",
        "labels": labels or {},
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "trainer",
                "uid": "0c4b2f31-7d0a-4e53-9f0e-3e1c2a6f9a10",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "trainer:1.0",
                    "resources": resources,
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {},
    }


def review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    resource: str = "pods",
    sub_resource: str | None = None,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
) -> dict[str, Any]:
    """An AdmissionReview v1 request in the shape kube-apiserver sends."""
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": resource},
        "namespace": "ml",
        "operation": operation,
        "userInfo": {
            "username": "system:serviceaccount:kube-system:job-controller",
            "uid": "b3d5b1f4-3c2e-4f57-9a1c-0a3a6e1b2c3d",
            "groups": ["system:serviceaccounts", "system:authenticated"],
        },
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def policy(name: str, spec: dict[str, Any]) -> SchedulingPolicy:
    return parse_policy(
        {
            "apiVersion": "kubesage.io/v1alpha1",
            "kind": "SchedulingPolicy",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


class StaticSource:
    """A PolicySource holding a fixed list (the webhook's unit under test is not the source)."""

    def __init__(self, *policies: SchedulingPolicy) -> None:
        self._policies = list(policies)

    def policies(self) -> list[SchedulingPolicy]:
        return list(self._policies)


def webhook_for(source: PolicySource) -> AdmissionWebhook:
    """A webhook whose budget a loaded test machine cannot exhaust (one test checks the budget)."""
    return AdmissionWebhook(source, budget_s=30.0)


def call(
    webhook: AdmissionWebhook, body: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """POST ``body``; the response object and its decoded patch ([] when none)."""
    status, answer = webhook.handle(json.dumps(body).encode())
    assert status == 200, answer
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is True
    if "patch" not in response:
        assert "patchType" not in response
        return response, []
    assert response["patchType"] == "JSONPatch"
    return response, json.loads(base64.b64decode(response["patch"]))


def admit(webhook: AdmissionWebhook, obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as stored after the webhook's patch; asserts a second pass changes nothing."""
    _, patch = call(webhook, review(obj))
    after = jsonpatch.apply_patch(obj, patch)
    _, again = call(webhook, review(after))
    assert again == [], f"not idempotent: {again}"
    return after


def fallbacks(component: str, reason: str) -> float:
    labels = {"component": component, "reason": reason}
    return metrics.REGISTRY.get_sample_value("kubesage_fallbacks_total", labels) or 0.0
