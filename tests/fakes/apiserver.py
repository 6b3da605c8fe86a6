"""A FAKE Kubernetes API server for tests: real HTTP, the REST shapes kubesage uses.

No API server can run on a test machine, so this module serves the small part of the
Kubernetes REST API that kubesage calls, over real HTTP on 127.0.0.1 and a free port,
so the tests drive the REAL ``kubernetes`` python client through a kubeconfig that the
fake writes. What it serves, with the shapes of the real API:

- ``GET /api/v1/nodes``, ``/api/v1/namespaces``, ``/api/v1/pods``,
  ``/api/v1/namespaces/{ns}/pods`` (lists with
  ``metadata.resourceVersion``; ``fieldSelector`` ``a.b=v``, ``a.b==v``, ``a.b!=v``;
  ``labelSelector`` ``k=v``, ``k!=v``, ``k``), single objects by name;
  ``?watch=true``: a chunked stream of ``{"type", "object"}`` JSON lines
  (``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK``), resuming after ``resourceVersion``;
  an object that leaves or enters a field selection becomes ``DELETED``/``ADDED`` as in
  the real watch cache; a ``resourceVersion`` older than the compacted history gets the
  real answer: HTTP 200 and one ``ERROR`` event holding a ``Status`` with code 410,
  reason ``Expired``. Namespaces get what the real API server sets on them: the
  immutable label ``kubernetes.io/metadata.name`` (re-set on every update) and
  ``status.phase: Active``.
- ``POST /api/v1/namespaces/{ns}/pods/{name}/binding`` and ``.../{ns}/bindings``: 201
  and a ``Status`` of ``Success``; the binding's annotations are copied onto the pod
  (as the real registry does); 409 ``Conflict`` when the pod is already assigned or the
  UID precondition fails; 404 for a missing pod.
- ``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]``: GET, POST (409
  ``AlreadyExists``), PUT with ``metadata.resourceVersion`` optimistic concurrency
  (409 ``Conflict``).
- Custom resources ``/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}]``
  (GET list/get, POST) for kinds registered with :meth:`FakeApiServer.register_custom`;
  ``kubesage.io/v1alpha1`` ``schedulingpolicies`` is registered by default.
- Discovery: ``GET /apis`` (an APIGroupList of the groups the fake stores),
  ``/apis/{group}`` and ``/apis/{group}/{version}`` (an APIResourceList).
- ``POST /api/v1/namespaces/{ns}/events`` (stored; :meth:`FakeApiServer.events` reads
  them back).
- ``POST /api/v1/namespaces/{ns}/pods/{name}/eviction`` (a policy/v1 ``Eviction``):
  the eviction subresource with PodDisruptionBudget semantics
  (:mod:`tests.fakes.disruption`): 201 and a ``Success`` Status, the pod deleted (the
  real one is deleted gracefully: here at once); 429 ``TooManyRequests`` with the real
  message and a ``DisruptionBudget`` cause when the budget allows no disruption (the
  pod stays); 500 for a pod under two budgets; 404 for a missing pod; 409 when the
  ``deleteOptions.preconditions.uid`` is not the pod's; 400 when the Eviction names
  another pod.
- ``/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets``: GET, POST; ``status`` is
  kept as the disruption controller computes it, rewritten (a new resourceVersion and
  a ``MODIFIED`` event) whenever a pod or budget of the namespace changes.
- ``PATCH`` of any stored object with ``application/merge-patch+json`` (RFC 7386;
  ``null`` removes a key); built-in kinds also take
  ``application/strategic-merge-patch+json``, applied as a merge patch (no list merge
  keys: kubesage patches no lists); other patch types get 415. A
  ``metadata.resourceVersion`` in the patch is a precondition (409 ``Conflict``), a
  change of ``spec`` bumps ``metadata.generation``, a Job's negative
  ``spec.parallelism`` is 422 ``Invalid``. Kinds stored for it: batch/v1 ``jobs``, and
  the custom resources kubeflow.org/v1 ``pytorchjobs`` and flink.apache.org/v1beta1
  ``flinkdeployments`` (registered by default, as ``schedulingpolicies``).
- ``resource.k8s.io/v1`` (Dynamic Resource Allocation; ``FakeApiServer(dra=False)``
  leaves the group out, so its URLs answer 404 as on a cluster without it):
  cluster-scoped ``resourceslices`` (field selectors ``spec.driver``,
  ``spec.nodeName``) and ``deviceclasses``, namespaced ``resourceclaims`` with the
  ``/status`` subresource (GET, PUT, PATCH) and ``resourceclaimtemplates``; every
  write is defaulted and validated as the real registry does (:mod:`tests.fakes.dra`:
  422 ``Invalid`` naming the fields), a PUT with a stale ``metadata.resourceVersion``
  is 409 ``Conflict``, a claim's ``status.allocation`` cannot change once set (only be
  cleared, with ``reservedFor`` empty).

Test-side helpers add, modify and delete objects (each change gets a new
resourceVersion and a watch event), stand in for the controllers a real cluster runs
(:meth:`FakeApiServer.on_pod_deleted`: called with every deleted pod, e.g. to create a
ReplicaSet's replacement of an evicted pod — the real controller does it a moment
later, this fake at once), and inject faults: an HTTP error for the next
matching requests (:meth:`FakeApiServer.fail`, optionally after the change was applied,
as when a response is lost), dropped watch connections
(:meth:`FakeApiServer.drop_watches`), and compacted history
(:meth:`FakeApiServer.compact`).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from kubesage.core.dra import api as dra_api
from tests.fakes import dra
from tests.fakes.disruption import budget_status, covers, eviction_refusal

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
_WITH_STATUS = (RESOURCE_CLAIMS,)
"""Kinds with a ``/status`` subresource the fake serves."""
_GENERATED = (
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
    hits: int = 0


@dataclass
class Recorded:
    """A request the fake received (for tests that count calls)."""

    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)


class FakeApiServer:
    """A FAKE Kubernetes API server (see the module docstring) for the real client."""

    def __init__(self, *, bookmark_interval_s: float | None = None, dra: bool = True) -> None:
        """``dra``: serve ``resource.k8s.io/v1`` (False: a cluster without DRA, 404)."""
        self._lock = threading.Condition(threading.RLock())
        self._rv = itertools.count(100)
        self._current_rv = 99
        self._objects: dict[Resource, dict[tuple[str, str], Obj]] = {
            NODES: {},
            NAMESPACES: {},
            PODS: {},
            EVENTS: {},
            LEASES: {},
            SCHEDULING_POLICIES: {},
            PDBS: {},
            JOBS: {},
            PYTORCH_JOBS: {},
            FLINK_DEPLOYMENTS: {},
        }
        if dra:
            for resource in DRA_RESOURCES:
                self._objects[resource] = {}
        self._history: list[Change] = []
        self._awaiting_replacement: dict[tuple[str, str], int] = {}
        """(namespace, budget) → pods it selected that were evicted and not re-created."""
        self._compacted_rv = 0
        self._faults: list[Fault] = []
        self._watch_generation = 0
        self._stopping = False
        self.bookmark_interval_s = bookmark_interval_s
        self.requests: list[Recorded] = []
        self._pod_deleted: list[Callable[[Obj], None]] = []
        self.open_watches = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="fake-apiserver-")
        self.kubeconfig = Path(self._tmp.name) / "kubeconfig"

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self.kubeconfig.write_text(yaml.safe_dump(self.kubeconfig_dict()))
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._tmp.cleanup()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def kubeconfig_dict(self, context: str = "fake") -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake-cluster", "cluster": {"server": self.url}}],
            "users": [{"name": "fake-user", "user": {"token": TOKEN}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": "fake-cluster", "user": "fake-user"},
                }
            ],
            "current-context": context,
        }

    # -- test-side object helpers --------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion handed out."""
        return self._current_rv

    def add_node(self, node: Obj) -> Obj:
        return self.create(NODES, node)

    def add_pod(self, pod: Obj) -> Obj:
        return self.create(PODS, pod)

    def add_namespace(self, name: str, labels: dict[str, str] | None = None) -> Obj:
        """Create namespace ``name`` with ``labels`` (plus the name label the API sets)."""
        return self.create(NAMESPACES, {"metadata": {"name": name, "labels": dict(labels or {})}})

    def label_namespace(self, name: str, labels: dict[str, str | None]) -> Obj:
        """``kubectl label namespace``: set each label, remove those mapped to None."""

        def relabel(namespace: Obj) -> None:
            current = namespace["metadata"].setdefault("labels", {})
            for key, value in labels.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value

        return self.modify(NAMESPACES, "", name, relabel)

    def delete_namespace(self, name: str) -> Obj:
        return self.delete(NAMESPACES, "", name)

    def namespace(self, name: str) -> Obj:
        return self.get(NAMESPACES, "", name)

    def modify_node(self, name: str, change: Callable[[Obj], None]) -> Obj:
        return self.modify(NODES, "", name, change)

    def modify_pod(self, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj:
        return self.modify(PODS, namespace, name, change)

    def delete_node(self, name: str) -> Obj:
        return self.delete(NODES, "", name)

    def delete_pod(self, namespace: str, name: str) -> Obj:
        return self.delete(PODS, namespace, name)

    def node(self, name: str) -> Obj:
        return self.get(NODES, "", name)

    def pod(self, namespace: str, name: str) -> Obj:
        return self.get(PODS, namespace, name)

    def pods(self) -> list[Obj]:
        with self._lock:
            return [copy.deepcopy(pod) for pod in self._objects[PODS].values()]

    def lease(self, namespace: str, name: str) -> Obj:
        return self.get(LEASES, namespace, name)

    def events(self, namespace: str | None = None) -> list[Obj]:
        with self._lock:
            return [
                copy.deepcopy(event)
                for (ns, _), event in self._objects[EVENTS].items()
                if namespace is None or ns == namespace
            ]

    def register_custom(self, resource: Resource) -> None:
        with self._lock:
            self._objects.setdefault(resource, {})

    def add_custom(self, resource: Resource, obj: Obj) -> Obj:
        return self.create(resource, obj)

    def add_pdb(self, pdb: Obj) -> Obj:
        """Create a policy/v1 PodDisruptionBudget (its status is computed at once)."""
        self.create(PDBS, pdb)
        meta = pdb["metadata"]
        return self.pdb(meta.get("namespace") or "default", meta["name"])

    def pdb(self, namespace: str, name: str) -> Obj:
        return self.get(PDBS, namespace, name)

    def add_job(self, job: Obj) -> Obj:
        return self.create(JOBS, job)

    def job(self, namespace: str, name: str) -> Obj:
        return self.get(JOBS, namespace, name)

    # resource.k8s.io/v1 (validated as through the API: a bad object raises ApiError 422)

    def add_resource_slice(self, resource_slice: Obj) -> Obj:
        return self.create(RESOURCE_SLICES, resource_slice)

    def add_device_class(self, device_class: Obj) -> Obj:
        return self.create(DEVICE_CLASSES, device_class)

    def add_claim(self, claim: Obj) -> Obj:
        """Create a ResourceClaim (its status dropped and its spec defaulted, as the API
        does; set a status afterwards with :meth:`set_claim_status`)."""
        return self.create(RESOURCE_CLAIMS, claim)

    def add_claim_template(self, template: Obj) -> Obj:
        return self.create(RESOURCE_CLAIM_TEMPLATES, template)

    def claim(self, namespace: str, name: str) -> Obj:
        return self.get(RESOURCE_CLAIMS, namespace, name)

    def claims(self, namespace: str | None = None) -> list[Obj]:
        with self._lock:
            return [
                copy.deepcopy(claim)
                for (ns, _), claim in sorted(self._objects[RESOURCE_CLAIMS].items())
                if namespace is None or ns == namespace
            ]

    def set_claim_status(self, namespace: str, name: str, claim_status: Obj) -> Obj:
        """Write a claim's status through the ``/status`` rules (another scheduler
        allocating it, say): 422 when the API would refuse it."""
        current = self.claim(namespace, name)
        return self.replace_status(
            RESOURCE_CLAIMS, namespace, name, {**current, "status": claim_status}
        )

    def allocated_devices(self) -> dict[tuple[str, str, str], str]:
        """``(driver, pool, device)`` → ``namespace/name`` of the claim holding it."""
        return dra.allocated_devices(self.claims())

    def requests_to(self, method: str, pattern: str) -> list[Recorded]:
        regex = re.compile(pattern)
        with self._lock:
            return [r for r in self.requests if r.method == method and regex.search(r.path)]

    def on_pod_deleted(self, controller: Callable[[Obj], None]) -> None:
        """Call ``controller`` with every pod deleted from now on (evicted or deleted), as
        the pod's controller sees it; it may create a replacement (:meth:`add_pod`)."""
        with self._lock:
            self._pod_deleted.append(controller)

    # -- faults --------------------------------------------------------------------------

    def fail(
        self,
        method: str,
        path: str,
        code: int = 500,
        *,
        times: int = 1,
        after_apply: bool = False,
        message: str = "injected fault",
    ) -> Fault:
        """Answer the next ``times`` requests matching ``method`` and the ``path`` regex
        with ``code``; with ``after_apply`` the change is made first (a lost response)."""
        fault = Fault(method, re.compile(path), code, times, after_apply, message)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        """Stop injecting every fault."""
        with self._lock:
            self._faults.clear()

    def drop_watches(self) -> None:
        """Cut every open watch connection (no terminating chunk: a broken stream)."""
        with self._lock:
            self._watch_generation += 1
            self._lock.notify_all()

    def compact(self) -> None:
        """Forget the watch history (etcd compaction): open watches go on, but resuming from
        any resourceVersion seen so far gets 410 Expired."""
        with self._lock:
            self._compacted_rv = self._current_rv
            self._history.clear()

    def wait_for_watches(self, count: int, timeout_s: float = 10.0) -> None:
        """Block until at least ``count`` watch streams are open (tests synchronise on it)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self.open_watches < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.open_watches} watches open, wanted {count}")
                self._lock.wait(left)

    # -- store -----------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self._current_rv = next(self._rv)
        return self._current_rv

    def _record(self, resource: Resource, kind: str, obj: Obj, old: Obj | None = None) -> None:
        self._history.append(
            Change(int(obj["metadata"]["resourceVersion"]), resource, kind, obj, old)
        )
        self._lock.notify_all()

    def create(self, resource: Resource, obj: Obj, namespace: str | None = None) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        with self._lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name")
            if not name:
                raise ApiError(422, f"{resource.kind} is invalid: metadata.name: Required value")
            key = (meta.get("namespace", ""), name)
            if resource in DRA_RESOURCES and resource not in self._objects:
                raise ApiError(
                    404, f"the server could not find the requested resource ({resource.qualified})"
                )
            store = self._objects.setdefault(resource, {})
            if key in store:
                raise ApiError(
                    409,
                    f'{resource.qualified} "{name}" already exists',
                    "AlreadyExists",
                    name=name,
                    group=resource.group,
                    kind=resource.plural,
                )
            obj["apiVersion"] = resource.api_version
            obj["kind"] = resource.kind
            meta["uid"] = meta.get("uid") or str(uuid.uuid4())
            meta["creationTimestamp"] = meta.get("creationTimestamp") or now_rfc3339()
            meta["resourceVersion"] = str(self._next_rv())
            if resource is PODS:
                obj.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
                obj.setdefault("status", {}).setdefault("phase", "Pending")
            if resource is NAMESPACES:
                _namespace_defaults(obj)
            if resource in _GENERATED:
                meta["generation"] = 1
            self._admit(resource, obj, None)
            store[key] = obj
            self._record(resource, "ADDED", copy.deepcopy(obj))
            if resource is PODS:  # a controller's replacement of an evicted pod
                for pdb_key, pdb in self._objects[PDBS].items():
                    if self._awaiting_replacement.get(pdb_key) and covers(pdb, obj):
                        self._awaiting_replacement[pdb_key] -= 1
            self._sync_budgets(resource, meta.get("namespace", ""))
            return copy.deepcopy(obj)

    def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        with self._lock:
            obj = self._objects.get(resource, {}).get((namespace, name))
            if obj is None:
                raise ApiError(
                    404,
                    f'{resource.qualified} "{name}" not found',
                    name=name,
                    group=resource.group,
                    kind=resource.plural,
                )
            return copy.deepcopy(obj)

    def modify(
        self, resource: Resource, namespace: str, name: str, change: Callable[[Obj], None]
    ) -> Obj:
        with self._lock:
            old = self.get(resource, namespace, name)
            new = copy.deepcopy(old)
            change(new)
            if resource is NAMESPACES:
                _namespace_defaults(new)
            if resource in _GENERATED:  # only the server sets it: a spec change counts
                generation = old["metadata"].get("generation", 1)
                changed = new.get("spec") != old.get("spec")
                new["metadata"]["generation"] = generation + 1 if changed else generation
            new["metadata"]["resourceVersion"] = str(self._next_rv())
            self._objects[resource][(namespace, name)] = new
            self._record(resource, "MODIFIED", copy.deepcopy(new), old)
            self._sync_budgets(resource, namespace)
            return copy.deepcopy(self._objects[resource][(namespace, name)])

    def replace(self, resource: Resource, namespace: str, name: str, obj: Obj) -> Obj:
        """PUT semantics: the body's resourceVersion must match the stored one."""
        with self._lock:
            current = self.get(resource, namespace, name)
            sent = (obj.get("metadata") or {}).get("resourceVersion")
            if sent and sent != current["metadata"]["resourceVersion"]:
                raise _modified(resource, name)
            kept = {
                k: current["metadata"].get(k) for k in ("uid", "creationTimestamp", "namespace")
            }
            new = copy.deepcopy(obj)
            new["apiVersion"] = resource.api_version
            new["kind"] = resource.kind
            new.setdefault("metadata", {}).update({k: v for k, v in kept.items() if v is not None})
            self._admit(resource, new, current)

            def put(target: Obj) -> None:
                target.clear()
                target.update(new)

            return self.modify(resource, namespace, name, put)

    def replace_status(self, resource: Resource, namespace: str, name: str, obj: Obj) -> Obj:
        """PUT of the ``/status`` subresource: only the status changes; the body's
        resourceVersion must match the stored one."""
        with self._lock:
            current = self.get(resource, namespace, name)
            sent = (obj.get("metadata") or {}).get("resourceVersion")
            if sent and sent != current["metadata"]["resourceVersion"]:
                raise _modified(resource, name)
            new = copy.deepcopy(obj)
            self._admit(resource, new, current, subresource="status")

            def put(target: Obj) -> None:
                target["status"] = copy.deepcopy(new.get("status") or {})

            return self.modify(resource, namespace, name, put)

    def _admit(
        self, resource: Resource, new: Obj, old: Obj | None, subresource: str | None = None
    ) -> None:
        """The registry's defaulting and validation of ``resource.k8s.io`` writes (in
        place); 422 ``Invalid`` with the problems."""
        if resource is RESOURCE_SLICES:
            problems = dra.slice_problems(new, old)
        elif resource is DEVICE_CLASSES:
            problems = dra.device_class_problems(new, old)
        elif resource is RESOURCE_CLAIMS and subresource == "status":
            assert old is not None
            problems = dra.prepare_claim_status(new, old)
        elif resource is RESOURCE_CLAIMS:
            problems = dra.prepare_claim(new, old)
        elif resource is RESOURCE_CLAIM_TEMPLATES:
            problems = dra.prepare_template(new, old)
        else:
            return
        if not problems:
            return
        name = (new.get("metadata") or {}).get("name", "")
        listed = "; ".join(str(p) for p in problems)
        raise ApiError(
            422,
            f'{resource.kind}.{resource.group} "{name}" is invalid: '
            + (f"[{listed}]" if len(problems) > 1 else listed),
            "Invalid",
            name=name,
            group=resource.group,
            kind=resource.kind,
            causes=[{"reason": p.reason, "message": p.detail, "field": p.field} for p in problems],
        )

    def delete(self, resource: Resource, namespace: str, name: str) -> Obj:
        with self._lock:
            obj = self.get(resource, namespace, name)
            del self._objects[resource][(namespace, name)]
            obj["metadata"]["resourceVersion"] = str(self._next_rv())
            self._record(resource, "DELETED", copy.deepcopy(obj))
            self._sync_budgets(resource, namespace)
            if resource is PODS:
                for controller in self._pod_deleted:
                    controller(copy.deepcopy(obj))
            return obj

    def _sync_budgets(self, changed: Resource, namespace: str) -> None:
        """The disruption controller: rewrite the namespace's budget statuses after a pod
        or budget changed (only those whose status differs)."""
        if changed not in (PODS, PDBS):
            return
        with self._lock:
            pods = [pod for (ns, _), pod in self._objects[PODS].items() if ns == namespace]
            for key, pdb in list(self._objects[PDBS].items()):
                if key[0] != namespace:
                    continue
                fresh = budget_status(
                    pdb,
                    pods,
                    pdb.get("status"),
                    now_rfc3339(),
                    self._awaiting_replacement.get(key, 0),
                )
                if fresh == pdb.get("status"):
                    continue
                old = copy.deepcopy(pdb)
                pdb["status"] = fresh
                pdb["metadata"]["resourceVersion"] = str(self._next_rv())
                self._record(PDBS, "MODIFIED", copy.deepcopy(pdb), old)

    def evict(self, namespace: str, name: str, eviction: Obj) -> Obj:
        """The pods/eviction subresource (see the module docstring)."""
        meta = eviction.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise ApiError(400, "name in URL does not match name in Eviction object")
        with self._lock:
            pod = self.get(PODS, namespace, name)
            uid = ((eviction.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                raise ApiError(
                    409,
                    f'Operation cannot be fulfilled on pods "{name}": Precondition failed: '
                    f"UID in precondition: {uid}, UID in object meta: {pod['metadata']['uid']}",
                    name=name,
                    kind="pods",
                )
            budgets = [pdb for (ns, _), pdb in self._objects[PDBS].items() if ns == namespace]
            refusal = eviction_refusal(pod, budgets)
            if refusal is not None:
                code, reason, message, details = refusal
                raise ApiError(code, message, reason, **(details or {}))
            for key, pdb in self._objects[PDBS].items():
                if covers(pdb, pod):
                    self._awaiting_replacement[key] = self._awaiting_replacement.get(key, 0) + 1
            self.delete(PODS, namespace, name)
            return status(201, "", "")

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Obj,
        content_type: str,
        subresource: str | None = None,
    ) -> Obj:
        """PATCH with a merge patch (see the module docstring); ``subresource``
        ``status``: only the status changes."""
        media = content_type.split(";")[0].strip()
        accepted = [MERGE_PATCH] + ([STRATEGIC_MERGE_PATCH] if resource.builtin else [])
        if media not in accepted:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(accepted)}",
                "UnsupportedMediaType",
            )
        with self._lock:
            current = self.get(resource, namespace, name)
            sent = (patch.get("metadata") or {}).get("resourceVersion")
            if sent and sent != current["metadata"]["resourceVersion"]:
                raise _modified(resource, name)
            patched = _merge_patch(current, patch)
            for key in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion"):
                if key in current["metadata"]:
                    patched.setdefault("metadata", {})[key] = current["metadata"][key]
            if resource is JOBS:
                parallelism = (patched.get("spec") or {}).get("parallelism")
                if isinstance(parallelism, int) and parallelism < 0:
                    raise ApiError(
                        422,
                        f'Job.batch "{name}" is invalid: spec.parallelism: Invalid value: '
                        f"{parallelism}: must be greater than or equal to 0",
                        "Invalid",
                        name=name,
                        group="batch",
                        kind="Job",
                    )
            self._admit(resource, patched, current, subresource)
            if subresource == "status":
                patched = {**current, "status": patched.get("status") or {}}

            def put(target: Obj) -> None:
                target.clear()
                target.update(patched)

            return self.modify(resource, namespace, name, put)

    def _items(self, resource: Resource, namespace: str | None, selector: Selector) -> list[Obj]:
        with self._lock:
            return [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(self._objects.get(resource, {}).items())
                if (namespace is None or ns == namespace) and selector.matches(obj)
            ]

    def list(self, resource: Resource, namespace: str | None, selector: Selector) -> Obj:
        with self._lock:
            items = self._items(resource, namespace, selector)
            if resource.builtin:  # as the real API server encodes typed lists
                for item in items:
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
            return {
                "kind": f"{resource.kind}List",
                "apiVersion": resource.api_version,
                "metadata": {"resourceVersion": str(self._current_rv)},
                "items": items,
            }

    def bind(self, namespace: str, name: str, binding: Obj) -> Obj:
        """The pods/binding subresource, with the real registry's checks."""
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise ApiError(422, "Binding is invalid: target.name: Required value")
        meta = binding.get("metadata") or {}
        with self._lock:
            pod = self.get(PODS, namespace, name)
            conflict = f'Operation cannot be fulfilled on pods/binding "{name}": '
            uid = meta.get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                raise ApiError(
                    409,
                    conflict + f"Precondition failed: UID in precondition: {uid}, "
                    f"UID in object meta: {pod['metadata']['uid']}",
                    name=name,
                    kind="pods/binding",
                )
            if pod["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    409,
                    conflict + f"pod {name} is being deleted, cannot be assigned to a host",
                    name=name,
                    kind="pods/binding",
                )
            assigned = pod.get("spec", {}).get("nodeName")
            if assigned:
                raise ApiError(
                    409,
                    conflict + f'pod {name} is already assigned to node "{assigned}"',
                    name=name,
                    kind="pods/binding",
                )

            def assign(obj: Obj) -> None:
                obj["spec"]["nodeName"] = target
                annotations = meta.get("annotations") or {}
                if annotations:
                    obj["metadata"].setdefault("annotations", {}).update(annotations)
                conditions = obj.setdefault("status", {}).setdefault("conditions", [])
                conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
                conditions.append(
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}
                )

            self.modify(PODS, namespace, name, assign)
            return status(201, "", "")

    # -- discovery ---------------------------------------------------------------------------

    def discovery(self, path: str) -> Obj:
        """``GET /apis`` (an APIGroupList of the groups stored), ``/apis/{group}`` (an
        APIGroup) and ``/apis/{group}/{version}`` (an APIResourceList); 404 otherwise."""
        with self._lock:
            resources = [r for r in self._objects if r.group]
        versions: dict[str, list[str]] = {}
        for resource in resources:
            known = versions.setdefault(resource.group, [])
            if resource.version not in known:
                known.append(resource.version)

        def group(name: str) -> Obj:
            listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions[name]]
            return {"name": name, "versions": listed, "preferredVersion": listed[0]}

        parts = [part for part in path.split("/") if part][1:]
        if not parts:
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [group(name) for name in sorted(versions)],
            }
        if parts[0] in versions and len(parts) == 1:
            return {"kind": "APIGroup", "apiVersion": "v1", **group(parts[0])}
        if len(parts) == 2 and parts[1] in versions.get(parts[0], []):
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{parts[0]}/{parts[1]}",
                "resources": [
                    entry
                    for r in resources
                    if (r.group, r.version) == (parts[0], parts[1])
                    for entry in [
                        {
                            "name": r.plural,
                            "singularName": r.kind.lower(),
                            "namespaced": r.namespaced,
                            "kind": r.kind,
                            "verbs": [
                                "create",
                                "delete",
                                "get",
                                "list",
                                "patch",
                                "update",
                                "watch",
                            ],
                        },
                        *(
                            [
                                {
                                    "name": f"{r.plural}/status",
                                    "singularName": "",
                                    "namespaced": r.namespaced,
                                    "kind": r.kind,
                                    "verbs": ["get", "patch", "update"],
                                }
                            ]
                            if r in _WITH_STATUS
                            else []
                        ),
                    ]
                ],
            }
        raise ApiError(404, f"the server could not find the requested resource {path}")

    # -- watch -------------------------------------------------------------------------------

    def watch_events(
        self,
        resource: Resource,
        namespace: str | None,
        selector: Selector,
        resource_version: str | None,
        timeout_s: float,
        bookmarks: bool,
    ) -> Iterator[Obj | None]:
        """Events for one watch; ``None`` means: cut the connection (a dropped watch)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            generation = self._watch_generation
            if resource_version in (None, "", "0"):
                initial = self._items(resource, namespace, selector)
                start_rv = self._current_rv
                pending: list[Obj] = [{"type": "ADDED", "object": obj} for obj in initial]
            else:
                start_rv = int(resource_version)
                pending = []
                if start_rv < self._compacted_rv:
                    pending = [
                        {
                            "type": "ERROR",
                            "object": status(
                                410,
                                "Expired",
                                f"too old resource version: {start_rv} ({self._current_rv})",
                            ),
                        }
                    ]
            expired = bool(pending) and pending[0]["type"] == "ERROR"
            if not expired:
                self.open_watches += 1
                self._lock.notify_all()
        if expired:
            yield from pending
            return
        cursor = start_rv
        last_bookmark = time.monotonic()
        try:
            yield from pending
            while True:
                with self._lock:
                    events = [
                        event
                        for change in self._history
                        if change.resource_version > cursor and change.resource is resource
                        for event in [_as_watch_event(change, namespace, selector)]
                        if event is not None
                    ]
                    if self._history:
                        cursor = max(cursor, self._history[-1].resource_version)
                    if not events:
                        if self._stopping or time.monotonic() >= deadline:
                            return
                        if self._watch_generation != generation:
                            yield None
                            return
                        wait = deadline - time.monotonic()
                        if self.bookmark_interval_s:
                            wait = min(wait, self.bookmark_interval_s)
                        self._lock.wait(max(0.0, min(wait, 0.5)))
                        if self._watch_generation != generation:
                            yield None
                            return
                yield from events
                if (
                    bookmarks
                    and self.bookmark_interval_s
                    and time.monotonic() - last_bookmark >= self.bookmark_interval_s
                ):
                    last_bookmark = time.monotonic()
                    yield {
                        "type": "BOOKMARK",
                        "object": {
                            "kind": resource.kind,
                            "apiVersion": resource.api_version,
                            "metadata": {"resourceVersion": str(cursor)},
                        },
                    }
        finally:
            with self._lock:
                self.open_watches -= 1
                self._lock.notify_all()

    # -- faults (server side) -----------------------------------------------------------------

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.method == method and fault.path.search(path) and fault.times > 0:
                    fault.times -= 1
                    fault.hits += 1
                    return fault
        return None


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (a copy; ``null`` removes the key)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _namespace_defaults(namespace: Obj) -> None:
    """What the real namespace strategy enforces on create and update: the name label
    (``kubernetes.io/metadata.name``, since 1.21, cannot be changed) and the phase."""
    metadata = namespace["metadata"]
    labels = metadata.get("labels") or {}
    labels["kubernetes.io/metadata.name"] = metadata["name"]
    metadata["labels"] = labels
    namespace.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    namespace.setdefault("status", {}).setdefault("phase", "Active")


def _as_watch_event(change: Change, namespace: str | None, selector: Selector) -> Obj | None:
    """The event a watcher with this namespace and selector sees for ``change``."""
    ns = change.obj["metadata"].get("namespace", "")
    if namespace is not None and ns != namespace:
        return None
    now = selector.matches(change.obj)
    if change.type == "MODIFIED":
        before = change.old is not None and selector.matches(change.old)
        if now and before:
            kind = "MODIFIED"
        elif now:
            kind = "ADDED"
        elif before:
            kind = "DELETED"
        else:
            return None
    elif now:
        kind = change.type
    else:
        return None
    return {"type": kind, "object": copy.deepcopy(change.obj)}


# -- selectors ------------------------------------------------------------------------------


def _field(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Selector:
    """Field and label selectors as the API server reads them (equality-based only)."""

    fields: tuple[tuple[str, str, str], ...] = ()  # (path, op, value)
    labels: tuple[tuple[str, str, str | None], ...] = ()

    @staticmethod
    def parse(field_selector: str | None, label_selector: str | None) -> Selector:
        fields = []
        for term in filter(None, (field_selector or "").split(",")):
            match = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(!=|==|=)\s*(.*)", term.strip())
            if match is None:
                raise ApiError(400, f'invalid field selector: "{term}"')
            path, op, value = match.groups()
            fields.append((path, "!=" if op == "!=" else "=", value))
        labels: list[tuple[str, str, str | None]] = []
        for term in filter(None, (label_selector or "").split(",")):
            match = re.fullmatch(r"([A-Za-z0-9_./-]+)\s*(?:(!=|==|=)\s*(.*))?", term.strip())
            if match is None:
                raise ApiError(400, f'invalid label selector: "{term}"')
            key, op, value = match.groups()
            labels.append((key, "exists" if op is None else ("!=" if op == "!=" else "="), value))
        return Selector(tuple(fields), tuple(labels))

    def check_fields(self, resource: Resource) -> None:
        """400 for a field the real API server cannot select on, as it answers."""
        allowed = ("metadata.name", "metadata.namespace", *SELECTABLE_FIELDS.get(resource, ()))
        for path, _, _ in self.fields:
            if path not in allowed:
                quoted = ", ".join(f'"{name}"' for name in allowed)
                raise ApiError(
                    400,
                    f'Unable to find "{resource.qualified}" that match field selector '
                    f'"{path}": "{path}" is not a known field selector: only {quoted}',
                )

    def matches(self, obj: Obj) -> bool:
        for path, op, value in self.fields:
            if (_field(obj, path) == value) != (op == "="):
                return False
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for key, op, label_value in self.labels:
            if op == "exists" and key not in labels:
                return False
            if op == "=" and labels.get(key) != label_value:
                return False
            if op == "!=" and labels.get(key) == label_value:
                return False
        return True


# -- HTTP ------------------------------------------------------------------------------------

_CORE = re.compile(
    r"^/api/v1(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?"
    r"(?:/(?P<sub>[a-z]+))?$"
)
_GROUP = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?$"
)


class _QuietServer(ThreadingHTTPServer):
    """Clients (the reflector shutting a watch down) reset connections: not an error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


def _handler_for(fake: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def _send(self, code: int, body: Obj) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Obj:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            try:
                body = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ApiError(400, f"the body is not JSON: {exc}") from exc
            if not isinstance(body, dict):
                raise ApiError(400, "the body is not a JSON object")
            return body

        def _serve(self, method: str) -> None:
            split = urlsplit(self.path)
            query = parse_qs(split.query)
            with fake._lock:
                fake.requests.append(Recorded(method, split.path, query))
            try:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    raise ApiError(401, "Unauthorized")
                fault = fake.take_fault(method, split.path)
                if fault is not None and not fault.after_apply:
                    if method in ("POST", "PUT", "PATCH"):
                        self._body()  # drain it so the connection stays usable
                    raise ApiError(fault.code, fault.message)
                code, body = self._route(method, split.path, query)
                if fault is not None:
                    raise ApiError(fault.code, fault.message)
                if body is not None:
                    self._send(code, body)
            except ApiError as exc:
                self._send(exc.code, exc.body())

        def _route(
            self, method: str, path: str, query: dict[str, list[str]]
        ) -> tuple[int, Obj | None]:
            def arg(name: str) -> str | None:
                values = query.get(name)
                return values[0] if values else None

            if method == "GET" and path.startswith("/apis") and _GROUP.match(path) is None:
                return 200, fake.discovery(path)
            match = _CORE.match(path)
            if match is not None:
                plural, ns, name, sub = match.group("plural", "ns", "name", "sub")
                resource = {
                    "nodes": NODES,
                    "namespaces": NAMESPACES,
                    "pods": PODS,
                    "events": EVENTS,
                }.get(plural)
                if plural == "bindings" and ns and method == "POST" and not name:
                    body = self._body()
                    pod_name = (body.get("metadata") or {}).get("name", "")
                    return 201, fake.bind(ns, pod_name, body)
                if resource is None:
                    raise ApiError(404, f"the server could not find the requested resource {path}")
            else:
                match = _GROUP.match(path)
                if match is None:
                    raise ApiError(404, f"the server could not find the requested resource {path}")
                group, version, plural, ns, name, sub = match.group(
                    "group", "version", "plural", "ns", "name", "sub"
                )
                with fake._lock:
                    known = [
                        r
                        for r in fake._objects
                        if (r.group, r.version, r.plural) == (group, version, plural)
                    ]
                if not known:
                    raise ApiError(404, f"the server could not find the requested resource {path}")
                resource = known[0]
            namespace = ns if resource.namespaced else ""
            if sub == "binding" and method == "POST" and name and ns:
                return 201, fake.bind(ns, name, self._body())
            if sub == "eviction" and resource is PODS and method == "POST" and name and ns:
                return 201, fake.evict(ns, name, self._body())
            if sub == "status" and resource in _WITH_STATUS and name is not None:
                if method == "GET":
                    return 200, fake.get(resource, namespace, name)
                if method == "PUT":
                    return 200, fake.replace_status(resource, namespace, name, self._body())
                if method == "PATCH":
                    content_type = self.headers.get("Content-Type") or ""
                    return 200, fake.patch(
                        resource, namespace, name, self._body(), content_type, "status"
                    )
            if sub is not None:
                raise ApiError(404, f"the server could not find the requested resource {path}")
            if method == "GET" and name is None:
                selector = Selector.parse(arg("fieldSelector"), arg("labelSelector"))
                selector.check_fields(resource)
                if arg("watch") in ("true", "1"):
                    self._watch(resource, ns, selector, arg, query)
                    return 200, None
                return 200, fake.list(resource, ns, selector)
            if method == "GET":
                return 200, fake.get(resource, namespace, name or "")
            if method == "POST" and name is None:
                return 201, fake.create(resource, self._body(), namespace=ns)
            if method == "PUT" and name is not None:
                return 200, fake.replace(resource, namespace, name, self._body())
            if method == "DELETE" and name is not None:
                fake.delete(resource, namespace, name)
                return 200, status(200, "", "")
            if method == "PATCH" and name is not None:
                content_type = self.headers.get("Content-Type") or ""
                return 200, fake.patch(resource, namespace, name, self._body(), content_type)
            raise ApiError(405, f"method {method} is not allowed on {path}", "MethodNotAllowed")

        def _watch(
            self,
            resource: Resource,
            namespace: str | None,
            selector: Selector,
            arg: Callable[[str], str | None],
            query: dict[str, list[str]],
        ) -> None:
            timeout_s = float(arg("timeoutSeconds") or 1800)
            resource_version = arg("resourceVersion")
            if resource_version and not resource_version.isdigit():
                raise ApiError(400, f'invalid resourceVersion "{resource_version}"')
            bookmarks = arg("allowWatchBookmarks") in ("true", "1")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in fake.watch_events(
                    resource, namespace, selector, resource_version, timeout_s, bookmarks
                ):
                    if event is None:  # dropped: no terminating chunk, the socket just closes
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    data = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, OSError):
                self.close_connection = True

    return Handler


def _modified(resource: Resource, name: str) -> ApiError:
    """The 409 Conflict the API server answers a write whose resourceVersion is out of date."""
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource.qualified} "{name}": the object '
        "has been modified; please apply your changes to the latest version and try again",
        name=name,
        group=resource.group,
        kind=resource.plural,
    )
