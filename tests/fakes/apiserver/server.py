"""The fake API server itself: serving over HTTP on a free port with a kubeconfig,
the helpers tests drive it with, and injected faults."""

from __future__ import annotations

import copy
import re
import tempfile
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path

import yaml

from kubesage.core.k8s.apiclient import ApiClient, load_api_client
from tests.fakes import dra
from tests.fakes.apiserver.discovery import discovery_document
from tests.fakes.apiserver.handler import QuietServer, handler_for
from tests.fakes.apiserver.resources import (
    DEVICE_CLASSES,
    EVENTS,
    JOBS,
    LEASES,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    TOKEN,
    Fault,
    Obj,
    Recorded,
    Resource,
)
from tests.fakes.apiserver.watch import WatchedStore


class FakeApiServer(WatchedStore):
    """A FAKE Kubernetes API server (see :mod:`tests.fakes.apiserver`) for the real client."""

    def __init__(self, *, bookmark_interval_s: float | None = None, dra: bool = True) -> None:
        """``dra``: serve ``resource.k8s.io/v1`` (False: a cluster without DRA, 404)."""
        super().__init__(bookmark_interval_s=bookmark_interval_s, dra=dra)
        self._faults: list[Fault] = []
        self.requests: list[Recorded] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="fake-apiserver-")
        self.kubeconfig = Path(self._tmp.name) / "kubeconfig"

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        server = QuietServer(("127.0.0.1", 0), handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self.kubeconfig.write_text(yaml.safe_dump(self.kubeconfig_dict()))
        return self

    def stop(self) -> None:
        self.end_watches()
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

    def client(self) -> ApiClient:
        """The real kubernetes client configured from this fake's kubeconfig, as
        kubesage loads any cluster's."""
        api = load_api_client(str(self.kubeconfig))
        assert api is not None
        return api

    # -- test-side object helpers --------------------------------------------------------

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

    def budget_lags(self, namespace: str, name: str) -> None:
        """The disruption controller has not yet observed the budget's latest change
        (``status.observedGeneration`` behind) until the next pod or budget change: an
        eviction meets the API server's "still being processed" answer meanwhile."""
        with self._lock:
            pdb = self._objects[PDBS][(namespace, name)]
            pdb["status"]["observedGeneration"] = pdb["metadata"].get("generation", 1) - 1

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
        retry_after_s: int | None = None,
        on_hit: Callable[[], None] | None = None,
    ) -> Fault:
        """Answer the next ``times`` requests matching ``method`` and the ``path`` regex
        with ``code``; with ``after_apply`` the change is made first (a lost response);
        with ``retry_after_s`` (a 429) the answer asks the client to wait that long;
        ``on_hit`` is called each time, before the error is answered."""
        fault = Fault(
            method,
            re.compile(path),
            code,
            times,
            after_apply,
            message,
            retry_after_s,
            on_hit=on_hit,
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        """Stop injecting every fault."""
        with self._lock:
            self._faults.clear()

    # -- what the HTTP side asks -------------------------------------------------------------

    def discovery(self, path: str) -> Obj:
        """The discovery document at ``path`` (:func:`discovery_document`)."""
        return discovery_document(self.stored_kinds(), path)

    def record(self, request: Recorded) -> None:
        """Keep a received request (:meth:`requests_to` reads them)."""
        with self._lock:
            self.requests.append(request)

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.method == method and fault.path.search(path) and fault.times > 0:
                    fault.times -= 1
                    fault.hits += 1
                    break
            else:
                return None
        if fault.on_hit is not None:
            fault.on_hit()
        return fault
