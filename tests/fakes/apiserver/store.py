"""The fake API server's object store: create, get, replace, patch, delete, bind and
evict with the real registry's checks, each change recorded for the watches."""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from collections.abc import Callable
from typing import Any

from tests.fakes import dra
from tests.fakes.apiserver.coordination import lease_problems
from tests.fakes.apiserver.pod_validation import pod_spec_problems
from tests.fakes.apiserver.resources import (
    CONFIG_MAPS,
    DEVICE_CLASSES,
    DRA_RESOURCES,
    EVENTS,
    FLINK_DEPLOYMENTS,
    GENERATED_KINDS,
    JOBS,
    LEASES,
    MERGE_PATCH,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    PYTORCH_JOBS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SCHEDULING_POLICIES,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    Change,
    Obj,
    Resource,
    now_rfc3339,
    status,
)
from tests.fakes.apiserver.selectors import Selector
from tests.fakes.disruption import budget_status, covers, eviction_refusal


class ObjectStore:
    """The stored objects: every write gets a new resourceVersion and an entry in the
    watch history, with the registry's defaulting and checks and the disruption
    controller's budget statuses."""

    def __init__(self, *, dra: bool = True) -> None:
        """``dra``: store ``resource.k8s.io/v1`` (False: a cluster without DRA, 404)."""
        self._lock = threading.Condition(threading.RLock())
        self._rv = itertools.count(100)
        self._current_rv = 99
        self._objects: dict[Resource, dict[tuple[str, str], Obj]] = {
            NODES: {},
            NAMESPACES: {},
            PODS: {},
            EVENTS: {},
            CONFIG_MAPS: {},
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
        """Watches resuming from before this resourceVersion get 410 Expired."""
        self._pod_deleted: list[Callable[[Obj], None]] = []
        """The controllers :meth:`delete` calls with every deleted pod."""

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion handed out."""
        return self._current_rv

    def stored_kinds(self) -> list[Resource]:
        """Every kind the store holds (built-in, registered custom, DRA when served)."""
        with self._lock:
            return list(self._objects)

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
            if resource in GENERATED_KINDS:
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
            if resource in GENERATED_KINDS:  # only the server sets it: a spec change counts
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
        place), of Leases and of pods' node affinity; 422 ``Invalid`` with the problems."""
        if resource is LEASES:
            problems = lease_problems(new)
        elif resource is PODS:
            problems = pod_spec_problems(new.get("spec") or {}, "spec")
        elif resource is JOBS:
            template = ((new.get("spec") or {}).get("template") or {}).get("spec") or {}
            problems = pod_spec_problems(template, "spec.template.spec")
        elif resource is RESOURCE_SLICES:
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
            f'{resource.kind}{"." + resource.group if resource.group else ""} "{name}" is invalid: '
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

    def evict(self, namespace: str, name: str, eviction: Obj, *, dry_run: bool = False) -> Obj:
        """The pods/eviction subresource (see the module docstring); ``dry_run``
        (``?dryRun=All``): every check and the same answer, nothing changed."""
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
            if dry_run:
                return status(201, "", "")
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
            if pod.get("spec", {}).get("schedulingGates"):
                raise ApiError(
                    409,
                    conflict + f"pod {name} has non-empty .spec.schedulingGates",
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
