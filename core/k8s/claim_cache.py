"""The informer's ResourceClaims: what pods that get GPUs through DRA ask for and hold.

A pod asking for GPUs through Dynamic Resource Allocation has no ``nvidia.com/gpu``
limit, and which GPUs it holds is in its claims' ``status.allocation``, not in the Pod.
:class:`ClaimCache` keeps every ResourceClaim (listed and watched by
:class:`~kubesage.core.k8s.informer.ClusterSync`) so that, without an API call per pod:

- :meth:`ClaimCache.request` is the pod's request with the GPUs its claims ask for
  (:func:`~kubesage.core.k8s.dra_requests.with_claims`): the secondary scheduler's
  pending pods and the informer's bound ones read it alike;
- :meth:`ClaimCache.held` is which GPUs (in results order) or which MIG slot a bound
  pod holds: each allocation result ``(driver, pool, device)`` matched to the device its
  node's ResourceSlices publish (:class:`~kubesage.core.dra.nodes.NodeDevices`). A pod
  kube-scheduler bound (extender mode) is so accounted on the devices it really got.

A claim's spec is immutable and names its consumers in ``status.reservedFor``, so a
claim event re-accounts exactly the pods it is reserved for (before and after). On a
cluster without ``resource.k8s.io/v1`` the list reads as empty
(:class:`~kubesage.core.k8s.optional_group.OptionalListCall`): no pod names a claim
there. Not locked: its owner (ClusterSync) calls it under its own lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubesage.core.dra import api as dra
from kubesage.core.dra.nodes import NodeDevices
from kubesage.core.k8s.apiclient import ApiClient, ResourceV1Api
from kubesage.core.k8s.dra_inventory import claim_names, result_keys
from kubesage.core.k8s.dra_requests import ClaimsPendingError, with_claims
from kubesage.core.k8s.optional_group import OptionalListCall
from kubesage.core.k8s.translate import TranslateError, pod_request
from kubesage.core.types import PodRequest

Obj = dict[str, Any]
Held = tuple[tuple[int, ...], int | None]
"""``(GPU indices in results order, MIG start slot)``, as the binder's annotations read."""


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or "default"), str(metadata.get("name"))


def _consumers(claim: Mapping[str, Any] | None) -> set[str]:
    """The UIDs of the pods ``claim`` is reserved for."""
    reserved = ((claim or {}).get("status") or {}).get("reservedFor") or []
    return {str(e["uid"]) for e in reserved if isinstance(e, Mapping) and e.get("uid")}


class ClaimCache:
    """Every ResourceClaim, by namespace and name (see the module docstring)."""

    def __init__(self, api: ApiClient, driver: str = dra.NVIDIA_GPU_DRIVER) -> None:
        self.driver = driver
        resource: Any = ResourceV1Api(api)  # raw JSON calls (_preload_content=False)
        self.list_call = OptionalListCall(
            resource.list_resource_claim_for_all_namespaces,
            dra.API_VERSION,
            "no pod can ask for GPUs through ResourceClaims",
        )
        self._claims: dict[tuple[str, str], Obj] = {}

    @property
    def served(self) -> bool | None:
        """Whether the cluster serves ``resource.k8s.io/v1`` (None: not listed yet)."""
        return self.list_call.served

    def replace(self, items: Iterable[Obj]) -> set[str]:
        """A full list; returns the UIDs of the pods whose claims changed."""
        fresh = {_key(item): item for item in items}
        touched: set[str] = set()
        for key in set(fresh) | set(self._claims):
            old, new = self._claims.get(key), fresh.get(key)
            if old is None or new is None or old != new:
                touched |= _consumers(old) | _consumers(new)
        self._claims = fresh
        return touched

    def apply(self, kind: str, obj: Obj) -> set[str]:
        """A watch event; returns the UIDs of the pods the claim is (or was) reserved for."""
        key = _key(obj)
        old = self._claims.pop(key, None) if kind == "DELETED" else self._claims.get(key)
        if kind != "DELETED":
            self._claims[key] = obj
        return _consumers(old) | _consumers(obj)

    def claims_of(self, pod: Mapping[str, Any]) -> list[Obj] | None:
        """The pod's claims in ``spec.resourceClaims`` order; None while one is not known."""
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        found: list[Obj] = []
        for _, name in claim_names(pod):
            claim = self._claims.get((namespace, name)) if name else None
            if claim is None:
                return None
            found.append(claim)
        return found

    def fingerprint(self, pod: Mapping[str, Any]) -> str:
        """Changes when the claims :meth:`request` reads for ``pod`` do (their specs are
        immutable: which claims are known, by UID)."""
        if not (pod.get("spec") or {}).get("resourceClaims"):
            return ""
        claims = self.claims_of(pod)
        if claims is None:
            return "?"
        return ",".join(str((c.get("metadata") or {}).get("uid") or "") for c in claims)

    def request(self, pod: Mapping[str, Any]) -> PodRequest:
        """The pod's request with the GPUs its claims ask for (TranslateError when it
        cannot be read; :class:`ClaimsPendingError` while a claim is not known yet)."""
        request = pod_request(pod)
        if not (pod.get("spec") or {}).get("resourceClaims"):
            return request
        claims = self.claims_of(pod)
        if claims is None and self.served is False:  # no claim will ever be seen
            raise TranslateError(
                f"it names ResourceClaims, and the cluster does not serve {dra.API_VERSION}, "
                "the API kubesage reads them with (Kubernetes 1.34 on): leave this pod to "
                "kube-scheduler",
                path="spec.resourceClaims",
            )
        if claims is None:
            raise ClaimsPendingError(
                "a ResourceClaim it names is not created yet", path="spec.resourceClaims"
            )
        return with_claims(request, [c.get("spec") or {} for c in claims])

    def held(self, pod: Mapping[str, Any], devices: NodeDevices | None) -> Held | None:
        """The GPUs (results order) or MIG slot the pod's allocated claims hold on its
        node; None when it holds none through claims or they are not all published."""
        claims = self.claims_of(pod) if (pod.get("spec") or {}).get("resourceClaims") else None
        if not claims or devices is None:
            return None
        indices: list[int] = []
        for claim in claims:
            for driver, pool, name in result_keys(claim):
                if driver != devices.driver:
                    continue  # another driver's device (a NIC): not a GPU
                gpu = next((g for g in devices.gpus if (g.pool, g.name) == (pool, name)), None)
                if gpu is not None:
                    indices.append(gpu.index)
                    continue
                mig = next((m for m in devices.migs if (m.pool, m.name) == (pool, name)), None)
                if mig is None or mig.start is None:
                    return None  # not (or no longer) published: kubesage cannot say where
                return (mig.parent_index,), mig.start
        return (tuple(indices), None) if indices else None
