"""v1 Pod and v1 Node JSON → the core's :class:`PodRequest` and :class:`NodeSpec`.

Input is the camelCase JSON the API server and kube-scheduler's extender calls send
(``kubectl get pod -o json``, or ``ApiClient.sanitize_for_serialization`` of a client
object). Only what the scheduler counts is read:

- **Pod requests**, not limits (a resource with a limit but no request requests its
  limit, as API-server defaulting does). The effective request is the larger of the
  app containers' sum and the largest init container, with restartable init
  containers (sidecars) added to both as in kube-scheduler, plus ``spec.overhead``.
- **GPUs**: ``nvidia.com/gpu`` counts whole GPUs. A GPU-sharing pod carries the
  annotation :data:`GPU_MILLI_ANNOTATION` (``"250"`` = a quarter of one GPU) with at
  most one ``nvidia.com/gpu``. A MIG instance is the device plugin's mixed-strategy
  resource ``nvidia.com/mig-<profile>`` (``+me`` written ``.me``:
  :func:`~kubesage.core.k8s.mig_names.mig_resource_name`;
  one instance per pod, the core's model); its
  geometry is read from the profile name
  (:func:`~kubesage.core.k8s.mig_names.mig_shape`), so the core needs no
  GPU catalogue.
- **GPU model constraints**: ``nodeSelector`` on GPU Feature Discovery's
  ``nvidia.com/gpu.product`` or the annotation :data:`GPU_MODELS_ANNOTATION`.
- **Node allocatable** (not capacity) and the labels :mod:`~kubesage.core.topology.discovery`
  reads (GPU product, count, memory, zone, rack; a MIG-device product is refused).

Quantities are parsed exactly (:func:`parse_quantity` → ``Decimal``); a pod's
requests round up and a node's allocatable rounds down, so a rounding error can
never make a pod fit where it does not. Malformed input raises
:class:`TranslateError` naming the field path; a well-formed pod the core cannot
model (two MIG instances, say) raises :class:`UnsupportedPodError`, so callers can
pass it through to the default scheduler instead of rejecting it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import ValidationError

from kubesage.core.annotations import (
    GANG_ANNOTATION,
    GPU_MILLI_ANNOTATION,
    GPU_MODELS_ANNOTATION,
)
from kubesage.core.field_errors import first_problem

# Re-exported: what translating a pod raises, and the MIG names it reads, are imported
# from here by every reader of pods.
from kubesage.core.k8s.mig_names import MIG_RESOURCE_PREFIX as MIG_RESOURCE_PREFIX
from kubesage.core.k8s.mig_names import max_per_gpu, mig_profile_of
from kubesage.core.k8s.mig_names import mig_shape as mig_shape
from kubesage.core.k8s.translate_errors import TranslateError as TranslateError
from kubesage.core.k8s.translate_errors import UnfittablePodError as UnfittablePodError
from kubesage.core.k8s.translate_errors import UnsupportedPodError as UnsupportedPodError
from kubesage.core.topology.discovery import (
    DEFAULT_RACK_LABEL,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    ZONE_LABEL,
    gpu_model_from_product,
    mig_device_refusal,
    names_mig_device,
)
from kubesage.core.types import (
    GPU_MILLI_PER_GPU,
    MAX_GPUS_PER_NODE,
    MIG_MEMORY_SLICES,
    MigShape,
    NodeSpec,
    PodRequest,
)

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
"""GPU Feature Discovery: memory of one GPU in MiB."""
LEGACY_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
UNKNOWN_GPU_MODEL = "unknown"
"""GPU model of a node with GPUs but no GFD product label (matches no model constraint)."""

MAX_AMOUNT = 2**48
"""Largest milli-CPU or MiB amount accepted (int64 sums over many nodes stay exact)."""

_MIB = Decimal(2**20)
_MILLI = Decimal(1000)

_BINARY_SUFFIXES = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([a-zA-Z]*|[eE][+-]?[0-9]+)$")
_MAX_QUANTITY_LENGTH = 64
_DIGITS = re.compile(r"^[0-9]{1,9}$")


# -- quantities ----------------------------------------------------------------------


def parse_quantity(text: object, path: str = "quantity") -> Decimal:
    """A Kubernetes resource quantity (``"500m"``, ``"2Gi"``, ``"1e3"``, ``4``) as a Decimal."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise TranslateError(f"expected a quantity string, got {type(text).__name__}", path=path)
    if isinstance(text, int | float):
        if isinstance(text, float) and not math.isfinite(text):
            raise TranslateError(f"quantity {text!r} is not finite", path=path)
        return Decimal(str(text))
    stripped = text.strip()
    match = _QUANTITY.match(stripped) if len(stripped) <= _MAX_QUANTITY_LENGTH else None
    if match is None:
        raise TranslateError(f"cannot read quantity {text[:_MAX_QUANTITY_LENGTH]!r}", path=path)
    number, suffix = match.groups()
    try:
        value = Decimal(number)
        if suffix in _BINARY_SUFFIXES:
            return value * _BINARY_SUFFIXES[suffix]
        if suffix in _DECIMAL_SUFFIXES:
            return value * _DECIMAL_SUFFIXES[suffix]
        if suffix[:1] in ("e", "E") and suffix[1:].lstrip("+-").isdecimal():
            exponent = int(suffix[1:])
            if abs(exponent) > 30:
                raise TranslateError(f"quantity {text!r} is out of range", path=path)
            return value.scaleb(exponent)
    except InvalidOperation:
        pass
    raise TranslateError(f"cannot read quantity {text!r} (unknown suffix {suffix!r})", path=path)


def _non_negative(value: Decimal, path: str) -> Decimal:
    if value < 0:
        raise TranslateError(f"negative quantity {value}", path=path)
    return value


def cpu_to_milli(value: Decimal, *, round_up: bool, path: str = "cpu") -> int:
    """CPU cores → milli-cores (up for requests, down for capacity)."""
    milli = value * _MILLI
    return _bounded(math.ceil(milli) if round_up else math.floor(milli), path)


def bytes_to_mib(value: Decimal, *, round_up: bool, path: str = "memory") -> int:
    """Bytes → MiB (up for requests, down for capacity)."""
    mib = value / _MIB
    return _bounded(math.ceil(mib) if round_up else math.floor(mib), path)


def _bounded(value: int, path: str) -> int:
    # ClusterState keeps int64 arrays and sums them: refuse what could overflow.
    if value > MAX_AMOUNT:
        raise TranslateError(
            f"quantity is larger than kubesage can count ({MAX_AMOUNT})", path=path
        )
    return value


def _whole_count(value: Decimal, path: str) -> int:
    if value != value.to_integral_value():
        raise TranslateError(f"extended resource count {value} is not a whole number", path=path)
    return int(value)


# -- MIG ------------------------------------------------------------------------------


# -- small readers -------------------------------------------------------------------


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TranslateError(f"expected an object, got {type(value).__name__}", path=path)
    return value


def _list(value: object, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TranslateError(f"expected a list, got {type(value).__name__}", path=path)
    return value


def _string_map(value: object, path: str) -> dict[str, str]:
    mapping = _mapping(value, path)
    for key, item in mapping.items():
        if not isinstance(item, str):
            raise TranslateError(
                f"expected a string, got {type(item).__name__}", path=f"{path}.{key}"
            )
    return dict(mapping)


def _name(metadata: Mapping[str, Any], path: str) -> str:
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise TranslateError("missing or empty", path=f"{path}.name")
    return name


def _resources(value: object, path: str) -> dict[str, Decimal]:
    return {
        key: _non_negative(parse_quantity(quantity, f"{path}.{key}"), f"{path}.{key}")
        for key, quantity in _mapping(value, path).items()
    }


# -- pods ----------------------------------------------------------------------------


HUGEPAGES_PREFIX = "hugepages-"
"""Huge page resources (``hugepages-2Mi``), which pod-level resources may set."""


def _container_requests(container: object, path: str) -> dict[str, Decimal]:
    """A container's requests, with limit-only resources requesting their limit."""
    resources = _mapping(_mapping(container, path).get("resources"), f"{path}.resources")
    requests = _resources(resources.get("requests"), f"{path}.resources.requests")
    limits = _resources(resources.get("limits"), f"{path}.resources.limits")
    for key, limit in limits.items():
        requests.setdefault(key, limit)
    return requests


def _add(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> dict[str, Decimal]:
    merged = dict(total)
    for key, value in more.items():
        merged[key] = merged.get(key, Decimal(0)) + value
    return merged


def _max(total: dict[str, Decimal], other: Mapping[str, Decimal]) -> dict[str, Decimal]:
    merged = dict(total)
    for key, value in other.items():
        merged[key] = max(merged.get(key, Decimal(0)), value)
    return merged


def effective_requests(spec: Mapping[str, Any], path: str = "spec") -> dict[str, Decimal]:
    """What kube-scheduler counts for a pod: containers vs. init containers, then the
    pod-level ``spec.resources`` in their place where given (CPU, memory, hugepages:
    Kubernetes' pod-level resources take precedence), plus overhead."""
    app: dict[str, Decimal] = {}
    for index, container in enumerate(_list(spec.get("containers"), f"{path}.containers")):
        app = _add(app, _container_requests(container, f"{path}.containers[{index}]"))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for index, container in enumerate(_list(spec.get("initContainers"), f"{path}.initContainers")):
        where = f"{path}.initContainers[{index}]"
        requests = _container_requests(container, where)
        if _mapping(container, where).get("restartPolicy") == "Always":
            # A sidecar keeps running: it adds to everything started after it.
            sidecars = _add(sidecars, requests)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(sidecars, requests))
    total = _max(_add(app, sidecars), init_peak)
    if spec.get("resources") is not None:
        pod_level = _container_requests(spec, path)  # requests, or limits where only those
        total.update(
            {
                k: v
                for k, v in pod_level.items()
                if k in ("cpu", "memory") or k.startswith(HUGEPAGES_PREFIX)
            }
        )
    return _add(total, _resources(spec.get("overhead"), f"{path}.overhead"))


def _gpu_models(
    spec: Mapping[str, Any], annotations: Mapping[str, str], path: str
) -> tuple[str, ...]:
    models: set[str] = set()
    selector = _string_map(spec.get("nodeSelector"), f"{path}.spec.nodeSelector")
    if GPU_PRODUCT_LABEL in selector:
        models.add(gpu_model_from_product(selector[GPU_PRODUCT_LABEL]))
    listed = annotations.get(GPU_MODELS_ANNOTATION, "")
    annotated = {gpu_model_from_product(m.strip()) for m in listed.split(",") if m.strip()}
    if models and annotated:
        models &= annotated  # both constrain the pod
        if not models:
            raise UnsupportedPodError(
                f"nodeSelector {GPU_PRODUCT_LABEL} and annotation {GPU_MODELS_ANNOTATION} "
                "allow no common GPU model",
                path=f"{path}.metadata.annotations",
            )
    else:
        models |= annotated
    return tuple(sorted(models))


def _gpu_shape(
    requests: Mapping[str, Decimal], annotations: Mapping[str, str], path: str
) -> tuple[int, int, MigShape | None]:
    """``(num_gpu, gpu_milli, mig)`` from the pod's GPU resources and annotations."""
    where = f"{path}.spec.containers[*].resources.requests"
    gpus = _whole_count(requests.get(GPU_RESOURCE, Decimal(0)), f"{where}.{GPU_RESOURCE}")
    migs = {
        key: _whole_count(value, f"{where}.{key}")
        for key, value in requests.items()
        if key.startswith(MIG_RESOURCE_PREFIX) and value > 0
    }
    milli_text = annotations.get(GPU_MILLI_ANNOTATION)
    if migs:
        if gpus or milli_text is not None or len(migs) > 1 or sum(migs.values()) > 1:
            share = "" if milli_text is None else f", {GPU_MILLI_ANNOTATION}={milli_text!r}"
            raise UnsupportedPodError(
                f"one MIG instance per pod is modelled, with no other GPU request; got "
                f"{dict(sorted(migs.items()))}, {GPU_RESOURCE}={gpus}{share}",
                path=where,
            )
        resource = next(iter(migs))
        shape = mig_shape(mig_profile_of(resource), f"{where}.{resource}")
        return 1, shape.gpu_milli, shape
    if milli_text is not None:
        annotation_path = f"{path}.metadata.annotations.{GPU_MILLI_ANNOTATION}"
        if not _DIGITS.match(milli_text) or not 0 < int(milli_text) <= GPU_MILLI_PER_GPU:
            raise TranslateError(
                f"expected a whole number of milli-GPU in 1..{GPU_MILLI_PER_GPU}, "
                f"got {milli_text[:32]!r}",
                path=annotation_path,
            )
        if gpus > 1:
            raise TranslateError(
                f"a GPU-sharing pod takes part of one GPU, but it requests {gpus} {GPU_RESOURCE}",
                path=annotation_path,
            )
        return 1, int(milli_text), None
    if gpus > MAX_GPUS_PER_NODE:
        raise UnfittablePodError(
            f"{gpus} GPUs asked for, and no node has more than {MAX_GPUS_PER_NODE}",
            path=f"{where}.{GPU_RESOURCE}",
        )
    return gpus, (GPU_MILLI_PER_GPU if gpus else 0), None


def _qos_class(pod: Mapping[str, Any], requests: Mapping[str, Decimal]) -> str:
    status = pod.get("status")
    if isinstance(status, Mapping) and isinstance(status.get("qosClass"), str):
        return str(status["qosClass"])
    return "Burstable" if requests.get("cpu") or requests.get("memory") else "BestEffort"


def pod_request(pod: Mapping[str, Any]) -> PodRequest:
    """The core's request for a v1 Pod (see the module docstring for what is read)."""
    if not isinstance(pod, Mapping):
        raise TranslateError(f"expected a Pod object, got {type(pod).__name__}", path="pod")
    metadata = _mapping(pod.get("metadata"), "pod.metadata")
    name = _name(metadata, "pod.metadata")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise TranslateError("expected a string", path="pod.metadata.namespace")
    path = f"pod '{namespace}/{name}'"
    annotations = _string_map(metadata.get("annotations"), f"{path}.metadata.annotations")
    spec = _mapping(pod.get("spec"), f"{path}.spec")
    requests = effective_requests(spec, f"{path}.spec")
    num_gpu, gpu_milli, mig = _gpu_shape(requests, annotations, path)
    priority = spec.get("priority", 0)
    if priority is None:
        priority = 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TranslateError("expected an integer", path=f"{path}.spec.priority")
    gang = annotations.get(GANG_ANNOTATION)
    try:
        return PodRequest(
            name=f"{namespace}/{name}",
            cpu_milli=cpu_to_milli(
                requests.get("cpu", Decimal(0)), round_up=True, path=f"{path}.requests.cpu"
            ),
            memory_mib=bytes_to_mib(
                requests.get("memory", Decimal(0)), round_up=True, path=f"{path}.requests.memory"
            ),
            num_gpu=num_gpu,
            gpu_milli=gpu_milli,
            gpu_models=_gpu_models(spec, annotations, path) if num_gpu else (),
            qos=_qos_class(pod, requests),
            priority=priority,
            gang_id=f"{namespace}/{gang}" if gang else None,
            mig=mig,
        )
    except ValidationError as exc:
        raise UnsupportedPodError(str(first_problem(exc)), path=path) from exc


# -- nodes ---------------------------------------------------------------------------


def _mig_gpu_count(allocatable: Mapping[str, Decimal], path: str) -> int:
    """Physical GPUs behind a node's MIG instances, when GFD does not label the count: the
    fewest that could hold them — their memory slices, and each profile's instances at
    its most per GPU (56 × ``1g.10gb``: 7 a GPU, so 8 GPUs, where their 56 slices alone
    would say 7). A lower bound: GPUs with free slices, or empty ones, are not seen."""
    slices, gpus = 0, 0
    for key, value in allocatable.items():
        if key.startswith(MIG_RESOURCE_PREFIX):
            shape = mig_shape(mig_profile_of(key), f"{path}.{key}")
            count = _whole_count(value, f"{path}.{key}")
            slices += count * shape.memory_slices
            gpus = max(gpus, math.ceil(count / max_per_gpu(shape)))
    return max(gpus, math.ceil(slices / MIG_MEMORY_SLICES))


def node_spec(node: Mapping[str, Any], *, rack_label: str = DEFAULT_RACK_LABEL) -> NodeSpec:
    """The core's spec of a v1 Node: allocatable resources, GPU model, zone and rack."""
    if not isinstance(node, Mapping):
        raise TranslateError(f"expected a Node object, got {type(node).__name__}", path="node")
    metadata = _mapping(node.get("metadata"), "node.metadata")
    name = _name(metadata, "node.metadata")
    path = f"node '{name}'"
    labels = _string_map(metadata.get("labels"), f"{path}.metadata.labels")
    status = _mapping(node.get("status"), f"{path}.status")
    allocatable = _resources(
        status.get("allocatable") or status.get("capacity"), f"{path}.status.allocatable"
    )
    mig_enabled = any(
        key.startswith(MIG_RESOURCE_PREFIX) and value > 0 for key, value in allocatable.items()
    )
    where, product = f"{path}.status.allocatable", labels.get(GPU_PRODUCT_LABEL)
    gpus = _whole_count(allocatable.get(GPU_RESOURCE, Decimal(0)), f"{where}.{GPU_RESOURCE}")
    if product and gpus and names_mig_device(product):
        label = f"{path}.metadata.labels.{GPU_PRODUCT_LABEL}"
        raise TranslateError(f"{mig_device_refusal(product)}; use 'mixed' or DRA", path=label)
    if mig_enabled:
        gpus = _label_int(labels, GPU_COUNT_LABEL, path) or _mig_gpu_count(allocatable, where)
    gpu_model = (
        (gpu_model_from_product(product) if product else UNKNOWN_GPU_MODEL) if gpus else None
    )
    try:
        return NodeSpec(
            name=name,
            cpu_milli=cpu_to_milli(
                allocatable.get("cpu", Decimal(0)), round_up=False, path=f"{where}.cpu"
            ),
            memory_mib=bytes_to_mib(
                allocatable.get("memory", Decimal(0)), round_up=False, path=f"{where}.memory"
            ),
            gpu_count=gpus,
            gpu_model=gpu_model,
            gpu_memory_mib=_label_int(labels, GPU_MEMORY_LABEL, path) if gpus else None,
            mig_enabled=mig_enabled,
            zone=labels.get(ZONE_LABEL) or labels.get(LEGACY_ZONE_LABEL),
            rack=labels.get(rack_label),
            labels=labels,
        )
    except ValidationError as exc:
        raise TranslateError(str(first_problem(exc)), path=path) from exc


def _label_int(labels: Mapping[str, str], key: str, path: str) -> int | None:
    text = labels.get(key)
    if text is None:
        return None
    if not _DIGITS.match(text):
        raise TranslateError(
            f"expected a whole number, got {text[:32]!r}", path=f"{path}.metadata.labels.{key}"
        )
    return int(text)
