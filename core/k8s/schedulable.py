"""Whether a pod is one a scheduler may bind now: the rule the pending list, the gangs
and the Binder share.

The API server refuses a Binding (409 Conflict) for a pod that is being deleted
(``metadata.deletionTimestamp``), is already assigned (``spec.nodeName``), or still
carries scheduling gates (``spec.schedulingGates``, which only the controllers that
added them remove, Kueue say); kube-scheduler leaves a gated pod ``SchedulingGated``
and never tries it. So does kubesage: such a pod is not pending, and a gang does not
count it towards ``min-available``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
