"""kubesage's GPU decision as a ResourceClaim allocation: which slice devices, in what order.

kubesage decides GPUs by index on a node (a gang member's GPUs in AllReduce ring order)
and a MIG instance by GPU, profile and start slot. On a cluster with Dynamic Resource
Allocation that decision takes effect only when it is written into the pod's
ResourceClaims: ``status.allocation`` names each device by driver, pool and device name
(as the node's ResourceSlices publish them, :mod:`~kubesage.core.k8s.dra_inventory`),
and ``status.reservedFor`` names the pod. This module computes those statuses from
plain API dicts; :mod:`~kubesage.core.k8s.dra_binding` reads and writes them.

- :func:`wanted_devices`: the slice devices of a placement, in kubesage's order. A MIG
  placement on a node that publishes partitionable devices (KEP-4815) maps to the
  partition device of that profile at that slot: allocating it *is* the MIG re-layout
  (the driver creates the instance), no mig-parted node label involved.
- :func:`plan_allocation`: the new status of each of the pod's claims. The devices are
  dealt to the claims (in ``spec.resourceClaims`` order) and to each claim's requests
  (in order) in kubesage's order — ``status.allocation.devices.results`` is a list and
  its order is the only order the API carries, so a gang member's ring order is the
  results' order. Every device must pass the request's DeviceClass and request CEL
  selectors (:mod:`~kubesage.core.k8s.dra_selectors`) and the claim's
  ``matchAttribute``/``distinctAttribute`` constraints, must not be held by another
  claim, and a partition must fit its counter set; a request of a DeviceClass kubesage
  does not allocate (:data:`ALLOCATED_CLASSES`) is refused by name; else
  :class:`AllocationRefusedError` (or :class:`DeviceTakenError`) says why, and nothing
  is written.

A claim already reserved for the pod is left as it is (kube-scheduler's PreBind does the
same; in extender mode kube-scheduler allocated it before kubesage's bind). A claim
allocated for another consumer on this node is only reserved for the pod too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubesage.core.dra import api
from kubesage.core.errors import KubesageError
from kubesage.core.k8s.dra_inventory import (
    CounterKey,
    DeviceKey,
    InUse,
    NodeInventory,
    SliceDevice,
    attribute_value,
    claim_names,
    reserved_for,
    result_keys,
    uid_of,
)
from kubesage.core.k8s.dra_requests import GPU_CLASSES, MIG_CLASSES
from kubesage.core.k8s.dra_selectors import UnsupportedSelectorError, selectors_match
from kubesage.core.k8s.node_eligibility import NODE_NAME_FIELD, node_name_term
from kubesage.core.types import Placement, PodRequest

Obj = dict[str, Any]

ALLOCATED_CLASSES: frozenset[str] = GPU_CLASSES | MIG_CLASSES
"""The DeviceClasses whose requests kubesage deals its devices to (NVIDIA's GPU and MIG
classes); a claim asking for any other is left to kube-scheduler."""
BLOCKING_TAINTS = frozenset({"NoSchedule", "NoExecute"})
"""Device taint effects that keep a pod off the device unless tolerated (``None`` only
informs)."""
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
"""The finalizer kube-scheduler puts on a claim before it allocates it (the claim is not
deleted while its devices may be in use); kubesage does the same."""
DRA_DEVICES_ANNOTATION = "kubesage.io/dra-devices"
"""On the pod (with the binding): the allocated ``pool/device`` names in kubesage's order,
for people and tools; the claims' ``results`` order is the authoritative one."""


class AllocationRefusedError(KubesageError):
    """kubesage cannot write this allocation: the bind is refused, the pod re-decided."""


class DeviceTakenError(AllocationRefusedError):
    """A chosen device (or its partition's memory) is held by another claim."""


class ClaimNotReadyError(AllocationRefusedError):
    """A claim the pod names does not exist yet (its template's claim is being created)."""


# -- planning -----------------------------------------------------------------------------


def wanted_devices(
    inventory: NodeInventory, placement: Placement, request: PodRequest | None
) -> list[SliceDevice]:
    """The slice devices of kubesage's decision, in its order (a gang's ring order)."""
    if request is not None and request.mig is not None:
        if placement.mig_start is None or not placement.gpu_indices:
            raise AllocationRefusedError(f"MIG placement on {placement.node} has no slot")
        gpu, profile, start = placement.gpu_indices[0], request.mig.profile, placement.mig_start
        candidates = [
            d
            for d in inventory.devices
            if d.type == api.DEVICE_TYPE_MIG
            and d.gpu_index == gpu
            and d.profile == profile
            and d.mig_start == start
        ]
        if not candidates:
            raise AllocationRefusedError(
                f"{placement.node} publishes no MIG device {profile} at memory slice {start} "
                f"of GPU {gpu}"
            )
        # An existing (static) instance before a partition that would be created.
        return [min(candidates, key=lambda d: (d.partition, d.name))]
    chosen: list[SliceDevice] = []
    for index in placement.gpu_indices:
        found = [
            d for d in inventory.devices if d.type == api.DEVICE_TYPE_GPU and d.gpu_index == index
        ]
        if not found:
            raise AllocationRefusedError(f"{placement.node} publishes no GPU with index {index}")
        chosen.append(min(found, key=lambda d: d.name))
    return chosen


@dataclass(frozen=True)
class ClaimWrite:
    """The new status of one claim (and whether its finalizer must be added first)."""

    claim: Mapping[str, Any]
    """The claim as read (its resourceVersion is the write's precondition)."""
    status: Obj
    allocates: bool
    """True: this write sets the allocation; False: it only adds the pod to reservedFor."""

    @property
    def namespace(self) -> str:
        return str(self.claim["metadata"].get("namespace") or "default")

    @property
    def name(self) -> str:
        return str(self.claim["metadata"]["name"])

    @property
    def devices(self) -> list[DeviceKey]:
        return result_keys({"status": self.status})


def _node_selector(node: str) -> Obj:
    return {"nodeSelectorTerms": [node_name_term(node)]}


def _allows_node(claim: Mapping[str, Any], node: str) -> bool:
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector")
    if not selector:
        return True  # network-attached devices: every node
    for term in selector.get("nodeSelectorTerms") or []:
        for requirement in term.get("matchFields") or []:
            if (
                requirement.get("key") == NODE_NAME_FIELD
                and requirement.get("operator") == "In"
                and node in (requirement.get("values") or [])
            ):
                return True
    return False


def _consumer(pod: Mapping[str, Any]) -> Obj:
    metadata = pod.get("metadata") or {}
    return {"resource": "pods", "name": str(metadata.get("name")), "uid": uid_of(pod)}


@dataclass
class _Dealer:
    """Deals kubesage's devices to requests in order, checking each against the claim."""

    devices: list[SliceDevice]
    classes: Mapping[str, Mapping[str, Any]]
    taken: InUse
    inventory: NodeInventory
    position: int = 0
    counters: dict[CounterKey, Decimal] = field(default_factory=dict)

    def deal(self, claim: Mapping[str, Any]) -> tuple[list[Obj], list[str]]:
        """Results for ``claim``'s requests, and the names of the requests they answer."""
        where = f"claim {claim['metadata'].get('namespace')}/{claim['metadata']['name']}"
        spec = (claim.get("spec") or {}).get("devices") or {}
        results: list[Obj] = []
        answered: list[str] = []
        for request in spec.get("requests") or []:
            name = str(request.get("name"))
            options = (
                [(name, request["exactly"])]
                if request.get("exactly")
                else [
                    (f"{name}/{sub.get('name')}", sub)
                    for sub in request.get("firstAvailable") or []
                ]
            )
            problems: list[str] = []
            for result_name, option in options:
                picked = self._take(option, where, result_name, problems)
                if picked is not None:
                    results += [_result(result_name, device) for device in picked]
                    answered.append(result_name)
                    break
            else:
                raise AllocationRefusedError(f"{where}: request {name}: {'; '.join(problems)}")
        _check_constraints(spec.get("constraints") or [], results, self.inventory, where)
        return results, answered

    def _take(
        self, option: Mapping[str, Any], where: str, request: str, problems: list[str]
    ) -> list[SliceDevice] | None:
        mode = option.get("allocationMode") or api.ALLOCATION_MODE_EXACT
        if mode != api.ALLOCATION_MODE_EXACT or option.get("adminAccess"):
            raise AllocationRefusedError(
                f"{where}: request {request} (allocationMode {mode}, adminAccess "
                f"{bool(option.get('adminAccess'))}) is not one kubesage allocates"
            )
        class_name = str(option.get("deviceClassName"))
        if class_name not in ALLOCATED_CLASSES:  # a NIC, a compute domain, a custom class
            problems.append(
                f"DeviceClass {class_name} is not one kubesage allocates (it allocates "
                f"{', '.join(sorted(ALLOCATED_CLASSES))}); leave this pod to kube-scheduler"
            )
            return None
        count = int(option.get("count") or 1)
        picked = self.devices[self.position : self.position + count]
        if len(picked) < count:
            problems.append(f"asks for {count} device(s), kubesage placed {len(picked)}")
            return None
        device_class = self.classes.get(class_name)
        if device_class is None:
            raise AllocationRefusedError(f"{where}: DeviceClass {class_name} not found")
        class_selectors = (device_class.get("spec") or {}).get("selectors")
        for device in picked:
            try:
                fits = selectors_match(class_selectors, device.spec, device.driver) and (
                    selectors_match(option.get("selectors"), device.spec, device.driver)
                )
            except UnsupportedSelectorError as exc:
                raise AllocationRefusedError(f"{where}: {exc}") from exc
            if not fits:
                problems.append(f"{device.pool}/{device.name} does not match {class_name}")
                return None
            # Taints that keep pods off (tolerations are not evaluated here; effect
            # None only informs) and binding conditions (which kube-scheduler waits for
            # in PreBind) are left to kube-scheduler.
            blocking = [
                t for t in device.spec.get("taints") or [] if t.get("effect") in BLOCKING_TAINTS
            ]
            for field_name, present in (
                ("taints", blocking),
                ("bindingConditions", device.spec.get("bindingConditions")),
            ):
                if present:
                    raise AllocationRefusedError(
                        f"{where}: {device.pool}/{device.name} has {field_name}, which "
                        "kubesage does not handle"
                    )
        for device in picked:
            self._check_free(device, where)
        self.position += count
        return picked

    def _check_free(self, device: SliceDevice, where: str) -> None:
        if device.key in self.taken.devices:
            raise DeviceTakenError(
                f"{where}: device {device.pool}/{device.name} is allocated to another claim"
            )
        for counter_set, counter, amount in device.counters:
            key = (device.driver, device.pool, counter_set, counter)
            used = self.taken.counters.get(key, Decimal(0)) + self.counters.get(key, Decimal(0))
            if used + amount > self.inventory.counters.get(key, Decimal(0)):
                raise DeviceTakenError(
                    f"{where}: partition {device.pool}/{device.name} needs {counter} of "
                    f"{counter_set}, which other claims' devices hold"
                )
            self.counters[key] = self.counters.get(key, Decimal(0)) + amount


def _result(request: str, device: SliceDevice) -> Obj:
    return {"request": request, "driver": device.driver, "pool": device.pool, "device": device.name}


def _check_constraints(
    constraints: Sequence[Mapping[str, Any]],
    results: Sequence[Mapping[str, Any]],
    inventory: NodeInventory,
    where: str,
) -> None:
    """The claim's constraints over kubesage's devices: ``matchAttribute`` (the devices of
    the named requests agree on it) and ``distinctAttribute`` (no two share a value).
    ``requests`` names requests (each covers its subrequests) or ``<request>/<sub>``; none
    named covers every request. Another kind of constraint is refused, as kube-scheduler's
    allocator refuses one it does not know."""
    for constraint in constraints:
        match, distinct = constraint.get("matchAttribute"), constraint.get("distinctAttribute")
        attribute = match or distinct
        if not attribute or (match and distinct):
            raise AllocationRefusedError(
                f"{where}: a constraint kubesage cannot evaluate ({dict(constraint)}); it "
                "knows matchAttribute and distinctAttribute"
            )
        names = set(constraint.get("requests") or [])
        values: list[str | None] = []
        for result in results:
            request = str(result["request"])
            if names and request not in names and request.split("/")[0] not in names:
                continue
            device = inventory.device((result["driver"], result["pool"], result["device"]))
            domain, _, short = str(attribute).rpartition("/")
            value = attribute_value(device.spec, device.driver, short, domain) if device else None
            values.append(json_key(value))
        if None in values:
            raise AllocationRefusedError(
                f"{where}: a device kubesage placed has no attribute {attribute}, which the "
                "claim's constraint names"
            )
        if match and len(set(values)) > 1:
            raise AllocationRefusedError(
                f"{where}: kubesage's devices do not share the attribute {attribute} "
                "the claim's constraint asks them to match"
            )
        if distinct and len(set(values)) < len(values):
            raise AllocationRefusedError(
                f"{where}: kubesage's devices share a value of {attribute}, which the "
                "claim's constraint asks to be distinct"
            )


def json_key(value: object) -> str | None:
    return None if value is None else repr(value)


def _config(
    claim: Mapping[str, Any], answered: Sequence[str], classes: Mapping[str, Mapping[str, Any]]
) -> list[Obj]:
    """The allocation's ``config``: the classes' (FromClass), then the claim's (FromClaim)."""
    spec = (claim.get("spec") or {}).get("devices") or {}
    requests = {str(r.get("name")): r for r in spec.get("requests") or []}
    config: list[Obj] = []
    for name in answered:
        top, _, sub = name.partition("/")
        request = requests[top]
        option = request.get("exactly") or next(
            s for s in request.get("firstAvailable") or [] if s.get("name") == sub
        )
        device_class = classes.get(str(option.get("deviceClassName"))) or {}
        for entry in (device_class.get("spec") or {}).get("config") or []:
            config.append({"source": "FromClass", "requests": [name], **dict(entry)})
    for entry in spec.get("config") or []:
        config.append({"source": "FromClaim", **dict(entry)})
    return config


def plan_allocation(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    devices: Sequence[SliceDevice],
    *,
    node: str,
    classes: Mapping[str, Mapping[str, Any]],
    taken: InUse,
    inventory: NodeInventory,
) -> list[ClaimWrite]:
    """The writes that give ``pod``'s claims ``devices`` (kubesage's order) on ``node``.

    ``claims`` maps claim name → claim for every claim the pod names (see
    :func:`claim_names`). Raises :class:`AllocationRefusedError` (module docstring).
    """
    pod_uid = uid_of(pod)
    where = f"pod {(pod.get('metadata') or {}).get('namespace')}/{pod['metadata']['name']}"
    dealer = _Dealer(list(devices), classes, taken, inventory)
    writes: list[ClaimWrite] = []
    for entry, name in claim_names(pod):
        if name is None or name not in claims:
            raise ClaimNotReadyError(f"{where}: the ResourceClaim of {entry} does not exist yet")
        claim = claims[name]
        status = claim.get("status") or {}
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            raise AllocationRefusedError(f"{where}: ResourceClaim {name} is being deleted")
        if reserved_for(claim, pod_uid):
            continue
        if status.get("allocation"):
            if not _allows_node(claim, node):
                raise AllocationRefusedError(
                    f"{where}: ResourceClaim {name} is allocated on another node"
                )
            reservation = [*(status.get("reservedFor") or []), _consumer(pod)]
            if len(reservation) > api.RESERVED_FOR_MAX:
                raise AllocationRefusedError(f"{where}: ResourceClaim {name} is fully reserved")
            writes.append(ClaimWrite(claim, {**status, "reservedFor": reservation}, False))
            continue
        results, answered = dealer.deal(claim)
        allocation: Obj = {
            "devices": {"results": results, "config": _config(claim, answered, classes)},
            "nodeSelector": _node_selector(node),
        }
        if not allocation["devices"]["config"]:
            del allocation["devices"]["config"]
        fresh = {**status, "allocation": allocation, "reservedFor": [_consumer(pod)]}
        writes.append(ClaimWrite(claim, fresh, True))
    if dealer.position != len(dealer.devices):
        raise AllocationRefusedError(
            f"{where}: kubesage placed {len(dealer.devices)} device(s); the pod's unallocated "
            f"claims ask for {dealer.position}"
        )
    return writes


def released_status(claim: Mapping[str, Any], pod_uid: str, allocated: bool) -> Obj:
    """``claim``'s status without the pod's reservation (and without the allocation, when
    the write being undone made it and no other consumer remains)."""
    status = dict(claim.get("status") or {})
    others = [e for e in status.get("reservedFor") or [] if e.get("uid") != pod_uid]
    if others:
        status["reservedFor"] = others
    else:
        status.pop("reservedFor", None)
        if allocated:
            status.pop("allocation", None)
    return status


def devices_annotation(writes: Sequence[ClaimWrite]) -> dict[str, str]:
    """:data:`DRA_DEVICES_ANNOTATION` for the pod: the allocated devices in order."""
    names = [
        f"{pool}/{device}"
        for write in writes
        if write.allocates
        for _, pool, device in write.devices
    ]
    return {DRA_DEVICES_ANNOTATION: ",".join(names)} if names else {}
