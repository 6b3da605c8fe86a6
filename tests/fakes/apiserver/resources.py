"""The fake API server's vocabulary: the kinds it stores (:class:`Resource`), the
``metav1.Status`` it answers with and the error that becomes one, and the records of
its watch history, injected faults and received requests."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubesage.core.dra import api as dra_api

Obj = dict[str, Any]

TOKEN = "fake-token"
"""Bearer token the fake's kubeconfig carries; other tokens get 401."""


def wait_until(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "") -> None:
    """Poll ``predicate`` until it is true; fail the test after ``timeout_s`` (a deadline
    for asynchronous watches, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or predicate}")
        time.sleep(0.02)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    """A ``metav1.Status`` as the API server sends it."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "code": code,
    }
    if code >= 400:
        body["message"] = message
        body["reason"] = reason
    if details:
        body["details"] = details
    return body


REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """Raised inside the fake's handlers; becomes a Status response."""

    def __init__(self, code: int, message: str, reason: str | None = None, **details: Any):
        super().__init__(message)
        self.code = code
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    @classmethod
    def throttled(cls, message: str, retry_after_s: int) -> ApiError:
        """A 429 as priority and fairness answers it: ``details.retryAfterSeconds``
        (and the ``Retry-After`` header, :attr:`headers`)."""
        return cls(429, message, retryAfterSeconds=retry_after_s)

    @property
    def headers(self) -> dict[str, str]:
        """Response headers beyond the content ones: ``Retry-After`` on a throttled 429."""
        seconds = self.details.get("retryAfterSeconds")
        return {"Retry-After": str(seconds)} if seconds is not None else {}

    def body(self) -> Obj:
        return status(self.code, self.reason, str(self), self.details or None)


@dataclass(frozen=True)
class Resource:
    """A kind the fake stores: where it lives in the URL space and how lists are named."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    builtin: bool = True
    """Built-in kinds' list items carry no ``kind``/``apiVersion`` (custom resources' do)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``pods`` or ``leases.coordination.k8s.io``, as error messages name a resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
SCHEDULING_POLICIES = Resource(
    "kubesage.io",
    "v1alpha1",
    "schedulingpolicies",
    "SchedulingPolicy",
    namespaced=False,
    builtin=False,
)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True)
JOBS = Resource("batch", "v1", "jobs", "Job", namespaced=True)
PYTORCH_JOBS = Resource(
    "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", namespaced=True, builtin=False
)
FLINK_DEPLOYMENTS = Resource(
    "flink.apache.org",
    "v1beta1",
    "flinkdeployments",
    "FlinkDeployment",
    namespaced=True,
    builtin=False,
)
RESOURCE_SLICES = Resource(
    dra_api.GROUP, dra_api.VERSION, dra_api.RESOURCE_SLICES, "ResourceSlice", namespaced=False
)
DEVICE_CLASSES = Resource(
    dra_api.GROUP, dra_api.VERSION, dra_api.DEVICE_CLASSES, "DeviceClass", namespaced=False
)
RESOURCE_CLAIMS = Resource(
    dra_api.GROUP, dra_api.VERSION, dra_api.RESOURCE_CLAIMS, "ResourceClaim", namespaced=True
)
RESOURCE_CLAIM_TEMPLATES = Resource(
    dra_api.GROUP,
    dra_api.VERSION,
    dra_api.RESOURCE_CLAIM_TEMPLATES,
    "ResourceClaimTemplate",
    namespaced=True,
)
DRA_RESOURCES = (RESOURCE_SLICES, DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES)
WITH_STATUS = (RESOURCE_CLAIMS, PODS)
"""Kinds with a ``/status`` subresource the fake serves."""
GENERATED_KINDS = (
    PDBS,
    JOBS,
    PYTORCH_JOBS,
    FLINK_DEPLOYMENTS,
    SCHEDULING_POLICIES,
    RESOURCE_SLICES,
    DEVICE_CLASSES,
)
"""Kinds whose ``metadata.generation`` counts changes of ``spec``."""
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


SELECTABLE_FIELDS: dict[Resource, tuple[str, ...]] = {
    PODS: (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    NODES: ("spec.unschedulable",),
    NAMESPACES: ("status.phase",),
    RESOURCE_SLICES: (dra_api.SLICE_DRIVER_FIELD, dra_api.SLICE_NODE_FIELD),
    EVENTS: (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
}
"""Fields each kind can be selected on besides ``metadata.name``/``metadata.namespace``
(the Kubernetes field-selector documentation's list)."""


@dataclass
class Change:
    """One entry of the watch history: what happened at which resourceVersion."""

    resource_version: int
    resource: Resource
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    old: Obj | None  # the object before a MODIFIED


@dataclass
class Fault:
    """An injected HTTP error for requests matching ``method`` and ``path`` (a regex)."""

    method: str
    path: re.Pattern[str]
    code: int
    times: int
    after_apply: bool
    message: str
    retry_after_s: int | None = None
    """With a 429: the ``Retry-After`` (and ``details.retryAfterSeconds``) it carries."""
    hits: int = 0
    on_hit: Callable[[], None] | None = None
    """Called each time the fault is taken, before the error is answered."""

    def error(self) -> ApiError:
        """The error this fault answers with."""
        if self.retry_after_s is not None:
            return ApiError.throttled(self.message, self.retry_after_s)
        return ApiError(self.code, self.message)


@dataclass
class Recorded:
    """A request the fake received (for tests that count calls)."""

    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
