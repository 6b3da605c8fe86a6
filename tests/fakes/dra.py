"""``resource.k8s.io/v1`` semantics for the FAKE API server: what the real registry's
strategies and validation (``pkg/registry/resource/*``, ``pkg/apis/resource/validation``,
Kubernetes 1.34) do on create and update.

- **ResourceSlice** (cluster-scoped): ``spec.driver`` and ``spec.pool.name`` required,
  ``spec.pool.resourceSliceCount`` > 0, exactly one of ``nodeName``, ``nodeSelector``,
  ``allNodes``, ``perDeviceNodeSelection``; at most 128 devices with unique names; an
  attribute holds exactly one of ``int``, ``bool``, ``string``, ``version``; a capacity
  has a ``value``; ``consumesCounters`` names a counter set of ``sharedCounters``.
  ``spec.driver`` and ``spec.nodeName`` are immutable.
- **DeviceClass** (cluster-scoped): each selector has a ``cel.expression``.
- **ResourceClaim** (namespaced): on create the status is dropped and the spec
  defaulted (``allocationMode: ExactCount``, ``count: 1``) and validated (unique request
  names, exactly one of ``exactly``/``firstAvailable``, a ``deviceClassName``); the spec
  is immutable; a write of the main resource keeps the stored status and a write of
  ``/status`` keeps the stored spec and metadata. Status validation:
  ``reservedFor`` needs an allocation, at most 256 entries with ``resource``, ``name``
  and a unique ``uid`` (none added while the claim is being deleted); a set
  ``status.allocation`` is immutable (it may only be cleared, which the reservedFor
  rule allows only once ``reservedFor`` is empty); each result names a request of the
  claim (``request`` or ``request/subrequest``), a driver, pool and device, at most 32
  results. As in the real API server, nothing checks that two claims hold the same device:
  that is the scheduler's bookkeeping, not the registry's.
- **ResourceClaimTemplate** (namespaced): ``spec.spec`` validated as a claim spec;
  immutable.

Each check returns the problems in the API server's words (``field: Required value``,
``field: Invalid value: ...``); the fake answers 422 ``Invalid`` with them.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from kubesage.core.dra import api

Obj = dict[str, Any]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
_ATTRIBUTE_TYPES = ("int", "bool", "string", "version")


@dataclass(frozen=True)
class Problem:
    """One field error, as ``field.Error`` prints it."""

    field: str
    reason: str  # the Status cause's reason: FieldValueRequired, FieldValueInvalid, ...
    detail: str

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}"


def _required(path: str, detail: str = "") -> Problem:
    return Problem(path, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def _invalid(path: str, value: object, detail: str) -> Problem:
    return Problem(path, "FieldValueInvalid", f"Invalid value: {json.dumps(value)}: {detail}")


def _forbidden(path: str, detail: str) -> Problem:
    return Problem(path, "FieldValueForbidden", f"Forbidden: {detail}")


def _duplicate(path: str, value: object) -> Problem:
    return Problem(path, "FieldValueDuplicate", f"Duplicate value: {json.dumps(value)}")


def _too_many(path: str, count: int, limit: int) -> Problem:
    return Problem(path, "FieldValueTooMany", f"Too many: {count}: must have at most {limit} items")


def _immutable(path: str, value: object) -> Problem:
    return _invalid(path, value, "field is immutable")


def _mapping(value: object) -> Obj:
    return value if isinstance(value, dict) else {}


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


# -- ResourceSlice ----------------------------------------------------------------------


def slice_problems(new: Obj, old: Obj | None) -> list[Problem]:
    """Validation of a ResourceSlice create (``old`` None) or update."""
    spec = _mapping(new.get("spec"))
    problems: list[Problem] = []
    driver = spec.get("driver")
    if not driver:
        problems.append(_required("spec.driver"))
    elif not isinstance(driver, str) or not _DNS_SUBDOMAIN.match(driver):
        problems.append(_invalid("spec.driver", driver, "a lowercase RFC 1123 subdomain"))
    pool = _mapping(spec.get("pool"))
    if not pool.get("name"):
        problems.append(_required("spec.pool.name"))
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or count <= 0:
        problems.append(
            _invalid("spec.pool.resourceSliceCount", count, "must be greater than zero")
        )
    generation = pool.get("generation", 0)
    if not isinstance(generation, int) or generation < 0:
        problems.append(_invalid("spec.pool.generation", generation, "must be non-negative"))
    chosen = [name for name in _NODE_SELECTION if spec.get(name) not in (None, "", False, {})]
    choices = ", ".join(f"`{name}`" for name in _NODE_SELECTION)
    if not chosen:
        problems.append(_required("spec", f"exactly one of {choices} is required"))
    elif len(chosen) > 1:
        problems.append(
            _invalid(
                "spec",
                "{" + ", ".join(f"`{name}`" for name in chosen) + "}",
                f"exactly one of {choices} is required, but multiple fields are set",
            )
        )
    counter_sets = set()
    for index, counter_set in enumerate(_items(spec.get("sharedCounters"))):
        where = f"spec.sharedCounters[{index}]"
        name = _mapping(counter_set).get("name")
        if not name:
            problems.append(_required(f"{where}.name"))
        elif name in counter_sets:
            problems.append(_duplicate(f"{where}.name", name))
        counter_sets.add(name)
        if not _mapping(_mapping(counter_set).get("counters")):
            problems.append(_required(f"{where}.counters"))
    devices = _items(spec.get("devices"))
    if len(devices) > api.SLICE_MAX_DEVICES:
        problems.append(_too_many("spec.devices", len(devices), api.SLICE_MAX_DEVICES))
    names: set[str] = set()
    for index, device in enumerate(devices):
        problems += _device_problems(
            _mapping(device), f"spec.devices[{index}]", names, counter_sets
        )
    if old is not None:
        old_spec = _mapping(old.get("spec"))
        for key in ("driver", "nodeName"):
            if spec.get(key) != old_spec.get(key):
                problems.append(_immutable(f"spec.{key}", spec.get(key)))
    return problems


def _unique_label(name: object, path: str, seen: set[str]) -> list[Problem]:
    """A required RFC 1123 label not among ``seen`` (which it joins)."""
    if isinstance(name, str) and name:
        duplicate = name in seen
        seen.add(name)
        if not _DNS_LABEL.match(name):
            return [_invalid(path, name, "a lowercase RFC 1123 label")]
        return [_duplicate(path, name)] if duplicate else []
    if not name:
        return [_required(path)]
    return [_invalid(path, name, "a lowercase RFC 1123 label")]


def _device_problems(
    device: Obj, where: str, names: set[str], counter_sets: set[Any]
) -> list[Problem]:
    problems = _unique_label(device.get("name"), f"{where}.name", names)
    for key, attribute in _mapping(device.get("attributes")).items():
        values = [kind for kind in _ATTRIBUTE_TYPES if kind in _mapping(attribute)]
        if len(values) != 1:
            problems.append(
                _invalid(
                    f"{where}.attributes[{key}]",
                    attribute,
                    "exactly one value must be specified",
                )
            )
    for key, capacity in _mapping(device.get("capacity")).items():
        if "value" not in _mapping(capacity):
            problems.append(_required(f"{where}.capacity[{key}].value"))
    for index, consumption in enumerate(_items(device.get("consumesCounters"))):
        counter_set = _mapping(consumption).get("counterSet")
        path = f"{where}.consumesCounters[{index}].counterSet"
        if not counter_set:
            problems.append(_required(path))
        elif counter_set not in counter_sets:
            problems.append(
                _invalid(path, counter_set, "must reference a counter set in spec.sharedCounters")
            )
    return problems


# -- DeviceClass ----------------------------------------------------------------------


def device_class_problems(new: Obj, old: Obj | None) -> list[Problem]:
    """Validation of a DeviceClass: each selector carries a CEL expression."""
    problems: list[Problem] = []
    for index, selector in enumerate(_items(_mapping(new.get("spec")).get("selectors"))):
        if not _mapping(_mapping(selector).get("cel")).get("expression"):
            problems.append(_required(f"spec.selectors[{index}].cel.expression"))
    return problems


# -- ResourceClaim and ResourceClaimTemplate ----------------------------------------------


def default_claim_spec(spec: Obj) -> None:
    """API defaulting of a claim spec (in place): ``allocationMode`` and ``count``."""
    for request in _items(_mapping(spec.get("devices")).get("requests")):
        exact = _mapping(request).get("exactly")
        choices = [exact] if isinstance(exact, dict) else []
        choices += [
            s for s in _items(_mapping(request).get("firstAvailable")) if isinstance(s, dict)
        ]
        for choice in choices:
            choice.setdefault("allocationMode", api.ALLOCATION_MODE_EXACT)
            if choice["allocationMode"] == api.ALLOCATION_MODE_EXACT:
                choice.setdefault("count", 1)


def request_names(spec: Obj) -> set[str]:
    """What an allocation result may name: each request, and ``request/subrequest``."""
    names: set[str] = set()
    for request in _items(_mapping(spec.get("devices")).get("requests")):
        name = _mapping(request).get("name")
        if not isinstance(name, str):
            continue
        names.add(name)
        for sub in _items(_mapping(request).get("firstAvailable")):
            names.add(f"{name}/{_mapping(sub).get('name')}")
    return names


def claim_spec_problems(spec: Obj, path: str) -> list[Problem]:
    """Validation of a ResourceClaimSpec found at ``path``."""
    problems: list[Problem] = []
    requests = _items(_mapping(spec.get("devices")).get("requests"))
    if len(requests) > api.ALLOCATION_RESULTS_MAX:
        problems.append(
            _too_many(f"{path}.devices.requests", len(requests), api.ALLOCATION_RESULTS_MAX)
        )
    seen: set[str] = set()
    for index, request in enumerate(requests):
        where = f"{path}.devices.requests[{index}]"
        request = _mapping(request)
        problems += _unique_label(request.get("name"), f"{where}.name", seen)
        exact, first = request.get("exactly"), request.get("firstAvailable")
        if (exact is None) == (first is None):
            problems.append(
                _required(where, "exactly one of `exactly` or `firstAvailable` is required")
            )
        if isinstance(exact, dict):
            problems += _exact_problems(exact, f"{where}.exactly")
        for sub_index, sub in enumerate(_items(first)):
            sub_where = f"{where}.firstAvailable[{sub_index}]"
            if not _mapping(sub).get("name"):
                problems.append(_required(f"{sub_where}.name"))
            problems += _exact_problems(_mapping(sub), sub_where)
    for index, constraint in enumerate(_items(_mapping(spec.get("devices")).get("constraints"))):
        for ref_index, ref in enumerate(_items(_mapping(constraint).get("requests"))):
            if str(ref).split("/")[0] not in seen:
                problems.append(
                    _invalid(
                        f"{path}.devices.constraints[{index}].requests[{ref_index}]",
                        ref,
                        "must be the name of a request in the claim or the name of a "
                        "request and a subrequest separated by '/'",
                    )
                )
    return problems


def _exact_problems(exact: Obj, where: str) -> list[Problem]:
    problems: list[Problem] = []
    if not exact.get("deviceClassName"):
        problems.append(_required(f"{where}.deviceClassName"))
    mode = exact.get("allocationMode", api.ALLOCATION_MODE_EXACT)
    if mode not in (api.ALLOCATION_MODE_EXACT, api.ALLOCATION_MODE_ALL):
        problems.append(
            _invalid(f"{where}.allocationMode", mode, 'supported values: "All", "ExactCount"')
        )
    count = exact.get("count")
    if mode == api.ALLOCATION_MODE_EXACT and (not isinstance(count, int) or count <= 0):
        problems.append(_invalid(f"{where}.count", count, "must be greater than zero"))
    if mode == api.ALLOCATION_MODE_ALL and count not in (None, 0):
        problems.append(_invalid(f"{where}.count", count, "must not be specified for All"))
    for index, selector in enumerate(_items(exact.get("selectors"))):
        if not _mapping(_mapping(selector).get("cel")).get("expression"):
            problems.append(_required(f"{where}.selectors[{index}].cel.expression"))
    return problems


def prepare_claim(new: Obj, old: Obj | None) -> list[Problem]:
    """A write of a ResourceClaim's main resource (create or update), in place: the
    status is dropped (create) or kept as stored (update); the spec is defaulted,
    validated, and immutable."""
    if old is None:
        new.pop("status", None)
    else:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    spec = new.setdefault("spec", {})
    return _claim_spec_written(spec, "spec", new, old)


def _claim_spec_written(claim_spec: Obj, path: str, new: Obj, old: Obj | None) -> list[Problem]:
    """``claim_spec`` (at ``path`` in ``new``) defaulted and validated; ``new``'s whole
    spec immutable once stored."""
    default_claim_spec(claim_spec)
    problems = claim_spec_problems(claim_spec, path)
    if old is not None and new.get("spec") != old.get("spec"):
        problems.append(_immutable("spec", "<spec>"))
    return problems


def prepare_claim_status(new: Obj, old: Obj) -> list[Problem]:
    """A write of ``/status`` (in place): spec and metadata as stored, status validated."""
    new["spec"] = copy.deepcopy(old.get("spec"))
    kept = {k: v for k, v in _mapping(new.get("metadata")).items() if k == "resourceVersion"}
    new["metadata"] = {**copy.deepcopy(old["metadata"]), **kept}
    return claim_status_problems(
        _mapping(new.get("status")),
        _mapping(old.get("status")),
        request_names(new["spec"]),
        deleted=bool(old["metadata"].get("deletionTimestamp")),
    )


def claim_status_problems(
    status: Obj, old: Obj, names: set[str], *, deleted: bool = False
) -> list[Problem]:
    """``validateResourceClaimStatusUpdate`` (see the module docstring); ``deleted``: the
    claim is being deleted, so ``reservedFor`` may lose entries but gain none."""
    problems: list[Problem] = []
    reserved = _items(status.get("reservedFor"))
    if len(reserved) > api.RESERVED_FOR_MAX:
        problems.append(_too_many("status.reservedFor", len(reserved), api.RESERVED_FOR_MAX))
    uids: set[str] = set()
    for index, consumer in enumerate(reserved):
        where = f"status.reservedFor[{index}]"
        consumer = _mapping(consumer)
        for key in ("resource", "name", "uid"):
            if not consumer.get(key):
                problems.append(_required(f"{where}.{key}"))
        uid = consumer.get("uid")
        if uid and uid in uids:
            problems.append(_duplicate(where, uid))
        if uid:
            uids.add(str(uid))
    allocation = status.get("allocation")
    if reserved and allocation is None:
        problems.append(
            _forbidden("status.reservedFor", "may not be specified when `allocated` is not set")
        )
    old_uids = {_mapping(c).get("uid") for c in _items(old.get("reservedFor"))}
    if reserved and allocation is not None and deleted and not uids <= old_uids:
        problems.append(
            _forbidden(
                "status.reservedFor",
                "new entries may not be added while `deallocationRequested` or "
                "`deletionTimestamp` are set",
            )
        )
    old_allocation = old.get("allocation")
    if old_allocation is not None and allocation is not None and allocation != old_allocation:
        problems.append(_immutable("status.allocation", "<allocation>"))
    if isinstance(allocation, dict):
        results = _items(_mapping(allocation.get("devices")).get("results"))
        if len(results) > api.ALLOCATION_RESULTS_MAX:
            problems.append(
                _too_many(
                    "status.allocation.devices.results", len(results), api.ALLOCATION_RESULTS_MAX
                )
            )
        for index, result in enumerate(results):
            where = f"status.allocation.devices.results[{index}]"
            result = _mapping(result)
            request = result.get("request")
            if not request:
                problems.append(_required(f"{where}.request"))
            elif request not in names:
                problems.append(
                    _invalid(
                        f"{where}.request",
                        request,
                        "must be the name of a request in the claim or the name of a "
                        "request and a subrequest separated by '/'",
                    )
                )
            for key in ("driver", "pool", "device"):
                if not result.get(key):
                    problems.append(_required(f"{where}.{key}"))
    return problems


def prepare_template(new: Obj, old: Obj | None) -> list[Problem]:
    """A ResourceClaimTemplate write (in place): the claim spec inside defaulted and
    validated; the whole spec immutable."""
    spec = new.setdefault("spec", {})
    return _claim_spec_written(spec.setdefault("spec", {}), "spec.spec", new, old)


def allocated_devices(claims: list[Obj]) -> dict[tuple[str, str, str], str]:
    """``(driver, pool, device)`` → ``namespace/name`` of the claim allocated it (a test
    helper: the scheduler's view of what is taken)."""
    taken: dict[tuple[str, str, str], str] = {}
    for claim in claims:
        allocation = _mapping(_mapping(claim.get("status")).get("allocation"))
        meta = _mapping(claim.get("metadata"))
        for result in _items(_mapping(allocation.get("devices")).get("results")):
            result = _mapping(result)
            key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            taken[key] = f"{meta.get('namespace')}/{meta.get('name')}"
    return taken
