"""Whether a pod is one a scheduler may bind now: the rule the pending list, the gangs
and the Binder share; and the other facts about a pod the caches read (its key, whether
it ended, the node it is nominated to, what it holds at least: :func:`usage_of`).

The API server refuses a Binding (409 Conflict) for a pod that is being deleted
(``metadata.deletionTimestamp``), is already assigned (``spec.nodeName``), or still
carries scheduling gates (``spec.schedulingGates``, which only the controllers that
added them remove, Kueue say); kube-scheduler leaves a gated pod ``SchedulingGated``
and never tries it. So does kubesage: such a pod is not pending, and a gang does not
count it towards ``min-available``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubesage.core.annotations import GPU_MILLI_ANNOTATION
from kubesage.core.k8s.translate import (
    MIG_RESOURCE_PREFIX,
    TranslateError,
    bytes_to_mib,
    cpu_to_milli,
    effective_requests,
)
from kubesage.core.topology.discovery import GPU_RESOURCE


def pod_name(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of a pod object."""
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def pod_key(pod: Mapping[str, Any]) -> str:
    """A pod's key in the caches: its UID (``namespace/name`` when it has none)."""
    uid = (pod.get("metadata") or {}).get("uid")
    return str(uid) if uid else pod_name(pod)


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """The pod has ended (``status.phase`` ``Succeeded`` or ``Failed``): it holds nothing."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def bound_node(pod: Mapping[str, Any]) -> str | None:
    """The node the pod is assigned to (``spec.nodeName``), None while unbound."""
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def is_terminating(pod: Mapping[str, Any]) -> bool:
    """The pod is being deleted (``metadata.deletionTimestamp`` is set)."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def scheduling_gates(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the pod's scheduling gates (empty when it may be scheduled)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return tuple(str(gate.get("name") or "") if isinstance(gate, dict) else "" for gate in gates)


def awaits_scheduler(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """The pod names ``scheduler_name`` and a bind of it could succeed now: unbound,
    not being deleted, no scheduling gates."""
    return (
        (pod.get("spec") or {}).get("schedulerName") == scheduler_name
        and bound_node(pod) is None
        and not is_terminating(pod)
        and not scheduling_gates(pod)
    )


def nominated_node(pod: Mapping[str, Any]) -> str | None:
    """The node a pending pod is nominated to (``status.nominatedNodeName``: kube-scheduler
    evicted pods there to make room for it, and binds it there once they are gone); None
    when it is bound, being deleted or not nominated."""
    node = (pod.get("status") or {}).get("nominatedNodeName")
    if not node or bound_node(pod) is not None or is_terminating(pod):
        return None
    return str(node)


@dataclass(frozen=True)
class Usage:
    """The least a pod holds, from its spec (:func:`usage_of`): what the accounting
    counts for a bound pod kubesage cannot model."""

    cpu_milli: int
    memory_mib: int
    gpus: int | None
    """GPUs it may hold, a GPU share or a MIG instance counted as a whole GPU; None when
    that cannot be told."""
    unread: str = ""
    """Why its CPU and memory could not be read (they are then 0), if so."""


def usage_of(pod: Mapping[str, Any]) -> Usage:
    """What a pod holds at least, read from its spec's effective requests: its CPU and
    memory, and its GPUs as :class:`Usage` counts them (None when the pod names
    ResourceClaims, whose GPUs cannot be told without their translation)."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    try:
        requests = effective_requests(spec)
        cpu = cpu_to_milli(requests.get("cpu", Decimal(0)), round_up=True)
        memory = bytes_to_mib(requests.get("memory", Decimal(0)), round_up=True)
    except TranslateError as exc:
        return Usage(0, 0, None, unread=str(exc))
    if spec.get("resourceClaims"):
        return Usage(cpu, memory, None)
    gpus = sum(
        math.ceil(value)
        for key, value in requests.items()
        if key == GPU_RESOURCE or key.startswith(MIG_RESOURCE_PREFIX)
    )
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if gpus == 0 and GPU_MILLI_ANNOTATION in annotations:
        gpus = 1  # a GPU share, however malformed its annotation
    return Usage(cpu, memory, gpus)
