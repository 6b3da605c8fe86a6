"""Ask for devices through Dynamic Resource Allocation: ResourceClaimTemplates and the
pod-side references to them (the names come from :mod:`~kubesage.core.dra.api`).

The launcher, the Spark conf and the Flink submit hook all write the same three pieces
when a cluster serves ``resource.k8s.io/v1`` (Kubernetes 1.34+):

- a ``ResourceClaimTemplate`` whose one request asks for *exactly* ``count`` devices of a
  DeviceClass (``gpu.nvidia.com`` for whole GPUs, ``mig.nvidia.com`` for MIG devices,
  the classes NVIDIA's DRA driver installs), narrowed by CEL selectors over the
  attributes the driver publishes in its ResourceSlices;
- a ``spec.resourceClaims`` entry in the pod naming that template, so each pod gets a
  claim of its own (a template, not a shared claim: every pod of a Job retry, every
  Spark executor, every Flink TaskManager is a separate pod);
- ``resources.claims`` in the container, which is what hands the allocated devices to
  that container (a pod-level claim alone reaches no container).

With the device plugin the same request is an extended-resource limit
(``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``) and the kubelet picks the devices;
:class:`DeviceMode` names the two forms, as the ``--devices`` options spell them.

The builders return plain dicts (the shape of the API reference) and validate nothing
themselves: the callers validate everything they emit together, offline, at
:data:`~kubesage.core.k8s.validation.DRA_KUBERNETES_VERSION`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from kubesage.core.dra.api import (
    ALLOCATION_MODE_EXACT,
    API_VERSION,
    ATTR_INDEX,
    ATTR_PARENT_INDEX,
    ATTR_PARENT_UUID,
    ATTR_PROFILE,
    ATTR_UUID,
    KIND_RESOURCE_CLAIM_TEMPLATE,
    NVIDIA_GPU_DRIVER,
)
from kubesage.core.errors import InputError


class DeviceMode(StrEnum):
    """How a workload asks for GPUs: the values of the ``--devices`` options."""

    dra = "dra"
    """A ResourceClaimTemplate per pod; the devices are chosen by selector."""
    device_plugin = "device-plugin"
    """An extended-resource limit (``nvidia.com/gpu``); the kubelet picks the devices."""


DEFAULT_CLAIM = "gpus"
"""Name of the pod's claim entry and of the template's one request."""


def attribute(name: str, driver: str = NVIDIA_GPU_DRIVER) -> str:
    """The CEL expression reading the device attribute ``name`` of ``driver``."""
    return f'device.attributes["{driver}"].{name}'


def _literal(value: int | str) -> str:
    # A JSON string is a valid CEL string literal for the UUIDs and profile names used here.
    return json.dumps(value)


def any_of(name: str, values: Sequence[int | str], driver: str = NVIDIA_GPU_DRIVER) -> str:
    """``attr == v1 || attr == v2 …``: the device's attribute is one of ``values``."""
    if not values:
        raise InputError(f"a selector on '{name}' needs at least one value")
    return " || ".join(f"{attribute(name, driver)} == {_literal(v)}" for v in values)


def gpu_selectors(
    indices: Sequence[int] = (), uuids: Sequence[str] = (), driver: str = NVIDIA_GPU_DRIVER
) -> list[str]:
    """CEL selecting exactly the chosen GPUs of one node: by UUID where known, else by index."""
    if uuids:
        return [any_of(ATTR_UUID, list(uuids), driver)]
    if indices:
        return [any_of(ATTR_INDEX, list(indices), driver)]
    return []


def mig_selectors(
    profile: str,
    *,
    parent_uuid: str | None = None,
    parent_index: int | None = None,
    driver: str = NVIDIA_GPU_DRIVER,
) -> list[str]:
    """CEL selecting a MIG device of ``profile``, on the chosen GPU when it is known (by
    UUID, else by index)."""
    selectors = [any_of(ATTR_PROFILE, [profile], driver)]
    if parent_uuid:
        selectors.append(any_of(ATTR_PARENT_UUID, [parent_uuid], driver))
    elif parent_index is not None:
        selectors.append(any_of(ATTR_PARENT_INDEX, [parent_index], driver))
    return selectors


def claim_template(
    name: str,
    count: int,
    device_class: str,
    selectors: Sequence[str] = (),
    *,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    request: str = DEFAULT_CLAIM,
) -> dict[str, Any]:
    """A ResourceClaimTemplate with one request: exactly ``count`` devices of ``device_class``
    that satisfy every selector (CEL expressions over the device's attributes)."""
    if count < 1:
        raise InputError(f"a device claim asks for at least one device, got {count}")
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "allocationMode": ALLOCATION_MODE_EXACT,
        "count": count,
    }
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": expression}} for expression in selectors]
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND_RESOURCE_CLAIM_TEMPLATE,
        "metadata": metadata,
        "spec": {"spec": {"devices": {"requests": [{"name": request, "exactly": exactly}]}}},
    }


def pod_claim(template: str, claim: str = DEFAULT_CLAIM) -> dict[str, str]:
    """The pod's ``spec.resourceClaims`` entry: a claim of its own, made from ``template``."""
    return {"name": claim, "resourceClaimTemplateName": template}


def container_claim(claim: str = DEFAULT_CLAIM) -> dict[str, str]:
    """A ``resources.claims`` entry handing the pod's claim ``claim`` to a container."""
    return {"name": claim}


def claim_pod_spec(
    pod_spec: Mapping[str, Any], template: str, *, claim: str = DEFAULT_CLAIM
) -> dict[str, Any]:
    """A copy of ``pod_spec`` whose every container uses a claim made from ``template``."""
    spec = dict(pod_spec)
    spec["resourceClaims"] = [*spec.get("resourceClaims", []), pod_claim(template, claim)]
    containers = []
    for container in spec.get("containers", []):
        resources = dict(container.get("resources") or {})
        resources["claims"] = [*resources.get("claims", []), container_claim(claim)]
        containers.append({**container, "resources": resources})
    spec["containers"] = containers
    return spec
