"""Write kubesage's device choice into a pod's ResourceClaims before the pod is bound.

This is what kube-scheduler's DynamicResources plugin does in PreBind, for the pods
kubesage binds (the secondary scheduler, the control loop's gang and defragmentation
binds): for each claim the pod names that is not yet reserved for it,

1. add the ``resource.kubernetes.io/delete-protection`` finalizer (an update of the
   claim: a status write cannot change metadata);
2. write ``status.allocation`` (the devices of
   :func:`~kubesage.core.k8s.dra_allocation.plan_allocation`, in kubesage's order) and
   ``status.reservedFor`` the pod, through the ``status`` subresource (UpdateStatus),
   with the claim's resourceVersion as precondition.

Then the caller posts the Binding. The devices are read fresh for every allocation
(the node's ResourceSlices, every claim's allocation, the DeviceClasses): no cache can
make kubesage hand out a device another scheduler has just allocated.

Conflicts are re-decided, never half-applied:

- 409 on a write (the claim changed since it was read): the claims already written
  for this pod are rolled back, everything is read again and the allocation planned
  again, up to ``attempts`` times;
- a chosen device held by another claim, a claim allocated elsewhere meanwhile, a claim
  kubesage cannot satisfy: :class:`~kubesage.core.k8s.dra_allocation.AllocationRefusedError`
  after rolling back what was written; the bind is refused and the pod decided again
  (next cycle, with the device seen as taken);
- the bind fails after the allocation: :meth:`ClaimAllocator.release` removes the
  pod's reservation and the allocation it wrote (and the finalizer it added).

A pod without ``spec.resourceClaims`` is not touched here: the device-plugin path.
What a pending pod asks for through its claims is read from the informer's cache
(:mod:`~kubesage.core.k8s.claim_cache`), not here.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import urllib3

from kubesage.core.dra import api as dra_api
from kubesage.core.errors import DependencyError
from kubesage.core.k8s.api_status import api_message
from kubesage.core.k8s.apiclient import ApiClient, ApiException, CoreV1Api, ResourceV1Api
from kubesage.core.k8s.dra_allocation import (
    DELETE_PROTECTION_FINALIZER,
    AllocationRefusedError,
    ClaimNotReadyError,
    ClaimWrite,
    devices_annotation,
    plan_allocation,
    released_status,
    wanted_devices,
)
from kubesage.core.k8s.dra_inventory import (
    NodeInventory,
    claim_names,
    in_use,
    node_inventory,
    reserved_for,
    result_keys,
)
from kubesage.core.types import Placement, PodRequest

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class _ConflictError(Exception):
    """A write met a newer claim (HTTP 409): read again and plan again."""


@dataclass(frozen=True)
class Written:
    """One claim written for a pod: what to undo if the bind fails."""

    write: ClaimWrite
    claim: Obj
    """The claim as the status write returned it."""
    added_finalizer: bool


@dataclass(frozen=True)
class Allocated:
    """The claims written for one pod before its bind."""

    namespace: str
    pod: str
    uid: str
    written: tuple[Written, ...]

    @property
    def annotations(self) -> dict[str, str]:
        """The binding's annotations: the allocated devices in kubesage's order."""
        return devices_annotation([w.write for w in self.written])


class ClaimAllocator:
    """Allocates and reserves a pod's ResourceClaims (see the module docstring)."""

    def __init__(
        self, api: ApiClient, *, attempts: int = 3, request_timeout_s: float = 10.0
    ) -> None:
        # Any: called with _preload_content=False (raw JSON), which the generated
        # signatures do not describe.
        self._resource: Any = ResourceV1Api(api)
        self._core: Any = CoreV1Api(api)
        self.attempts = max(1, attempts)
        self.request_timeout_s = request_timeout_s
        self.conflicts = 0
        """Writes that met a newer claim and were planned again (a counter, for tests)."""

    def inventory(self, node: str) -> NodeInventory:
        """The devices ``node`` publishes now (empty on a cluster without DRA)."""
        try:
            slices = self._list(
                self._resource.list_resource_slice,
                field_selector=f"{dra_api.SLICE_NODE_FIELD}={node}",
            )
        except AllocationRefusedError:  # 404: resource.k8s.io/v1 is not served
            slices = []
        return node_inventory(slices, node)

    # -- allocation ---------------------------------------------------------------------

    def allocate(
        self,
        pod: Mapping[str, Any] | None,
        *,
        namespace: str,
        name: str,
        uid: str,
        placement: Placement | None,
        request: PodRequest | None,
    ) -> Allocated | None:
        """Allocate ``pod``'s claims to ``placement`` and reserve them for it; None when
        the pod names no claim. ``pod`` None: it is read. Raises AllocationRefusedError
        (the bind is refused) or DependencyError (the API failed)."""
        where = f"pod {namespace}/{name}"
        current = (
            dict(pod)
            if pod is not None
            else self._get(self._core.read_namespaced_pod, name, namespace)
        )
        if current is None:
            raise AllocationRefusedError(f"{where} not found")
        if uid and (current.get("metadata") or {}).get("uid") != uid:
            raise AllocationRefusedError(f"{where} was re-created with another UID")
        names = claim_names(current)
        if not names:
            return None
        if placement is None:
            log.warning("%s names ResourceClaims but no placement was decided: left as is", where)
            return None
        for attempt in range(self.attempts):
            writes = self._plan(current, namespace, names, placement, request)
            try:
                written = self._write_all(writes, current)
            except _ConflictError as exc:
                self.conflicts += 1
                log.info("%s: %s; planning again (attempt %d)", where, exc, attempt + 1)
                continue
            return Allocated(namespace, name, str(current["metadata"].get("uid") or ""), written)
        raise AllocationRefusedError(
            f"{where}: its ResourceClaims kept changing while kubesage allocated them "
            f"({self.attempts} attempts); the pod is decided again"
        )

    def _plan(
        self,
        pod: Mapping[str, Any],
        namespace: str,
        names: Sequence[tuple[str, str | None]],
        placement: Placement,
        request: PodRequest | None,
    ) -> list[ClaimWrite]:
        claims: dict[str, Obj] = {}
        for entry, claim_name in names:
            if claim_name is None:
                raise ClaimNotReadyError(
                    f"pod {namespace}/{pod['metadata']['name']}: the ResourceClaim of "
                    f"{entry} has not been created yet"
                )
            claim = self._get(self._resource.read_namespaced_resource_claim, claim_name, namespace)
            if claim is None:
                raise ClaimNotReadyError(f"ResourceClaim {namespace}/{claim_name} not found")
            claims[claim_name] = claim
        node = placement.node
        inventory = self.inventory(node)
        mine = {str(c["metadata"].get("uid")) for c in claims.values()}
        taken = in_use(
            self._list(self._resource.list_resource_claim_for_all_namespaces), inventory, mine
        )
        classes: dict[str, Obj] = {}
        for claim in claims.values():
            for class_name in _class_names(claim):
                if class_name not in classes:
                    found = self._get(self._resource.read_device_class, class_name)
                    if found is not None:
                        classes[class_name] = found
        unallocated = any(not (c.get("status") or {}).get("allocation") for c in claims.values())
        devices = wanted_devices(inventory, placement, request) if unallocated else []
        return plan_allocation(
            pod,
            claims,
            devices,
            node=node,
            classes=classes,
            taken=taken,
            inventory=inventory,
        )

    def _write_all(
        self, writes: Sequence[ClaimWrite], pod: Mapping[str, Any]
    ) -> tuple[Written, ...]:
        done: list[Written] = []
        try:
            for write in writes:
                done.append(self._write(write))
        except BaseException:
            self._undo(done, str(pod["metadata"].get("uid") or ""))
            raise
        return tuple(done)

    def _write(self, write: ClaimWrite) -> Written:
        claim = copy.deepcopy(dict(write.claim))
        added = False
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if write.allocates and DELETE_PROTECTION_FINALIZER not in finalizers:
            claim["metadata"]["finalizers"] = [*finalizers, DELETE_PROTECTION_FINALIZER]
            claim = self._replace(claim, status=False)
            added = True
        claim["status"] = write.status
        try:
            stored = self._replace(claim, status=True)
        except BaseException:
            if added:
                self._drop_finalizer(write.namespace, write.name)
            raise
        return Written(write, stored, added)

    # -- undo ----------------------------------------------------------------------------

    def release(self, allocated: Allocated) -> None:
        """Undo :meth:`allocate` after a failed bind (errors are logged: the bind's own
        error is the one reported)."""
        self._undo(list(allocated.written), allocated.uid)

    def _undo(self, written: Sequence[Written], pod_uid: str) -> None:
        for item in reversed(written):
            try:
                self._release_one(item, pod_uid)
            except (DependencyError, AllocationRefusedError) as exc:
                log.error(
                    "rolling back ResourceClaim %s/%s failed: %s",
                    item.write.namespace,
                    item.write.name,
                    exc,
                )

    def _release_one(self, item: Written, pod_uid: str) -> None:
        namespace, name = item.write.namespace, item.write.name
        for _ in range(self.attempts + 1):
            claim = self._get(self._resource.read_namespaced_resource_claim, name, namespace)
            if claim is None or not reserved_for(claim, pod_uid):
                return
            ours = item.write.allocates and result_keys(claim) == item.write.devices
            claim["status"] = released_status(claim, pod_uid, ours)
            try:
                stored = self._replace(claim, status=True)
            except _ConflictError:
                continue
            if item.added_finalizer and not (stored.get("status") or {}).get("allocation"):
                self._drop_finalizer(namespace, name)
            return
        raise AllocationRefusedError(f"ResourceClaim {namespace}/{name} kept changing")

    def _drop_finalizer(self, namespace: str, name: str) -> None:
        for _ in range(self.attempts + 1):
            claim = self._get(self._resource.read_namespaced_resource_claim, name, namespace)
            finalizers = list((claim or {}).get("metadata", {}).get("finalizers") or [])
            if claim is None or DELETE_PROTECTION_FINALIZER not in finalizers:
                return
            finalizers.remove(DELETE_PROTECTION_FINALIZER)
            claim["metadata"]["finalizers"] = finalizers
            try:
                self._replace(claim, status=False)
            except _ConflictError:
                continue
            return

    # -- API calls ---------------------------------------------------------------------------

    def _call(self, method: Any, *args: Any, **kwargs: Any) -> Obj:
        try:
            answer = method(
                *args, _preload_content=False, _request_timeout=self.request_timeout_s, **kwargs
            )
            document = json.loads(answer.data)
        except ApiException as exc:
            if exc.status == 409:
                raise _ConflictError(api_message(exc)) from exc
            if exc.status in (404, 422):
                raise AllocationRefusedError(
                    f"ResourceClaim API refused (HTTP {exc.status}): {api_message(exc)}"
                ) from exc
            raise DependencyError(
                f"resource.k8s.io API: HTTP {exc.status}: {api_message(exc)}"
            ) from exc
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise DependencyError(f"resource.k8s.io API unreachable: {exc}") from exc
        return document if isinstance(document, dict) else {}

    def _get(self, method: Any, *args: Any) -> Obj | None:
        try:
            return self._call(method, *args)
        except AllocationRefusedError as exc:
            if isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404:
                return None
            raise

    def _list(self, method: Any, **kwargs: Any) -> list[Obj]:
        items = self._call(method, **kwargs).get("items") or []
        return [item for item in items if isinstance(item, dict)]

    def _replace(self, claim: Obj, *, status: bool) -> Obj:
        metadata = claim["metadata"]
        method = (
            self._resource.replace_namespaced_resource_claim_status
            if status
            else self._resource.replace_namespaced_resource_claim
        )
        return self._call(method, metadata["name"], metadata.get("namespace") or "default", claim)


def _class_names(claim: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        options = (
            [request["exactly"]] if request.get("exactly") else request.get("firstAvailable") or []
        )
        names += [str(o.get("deviceClassName")) for o in options if o.get("deviceClassName")]
    return names
