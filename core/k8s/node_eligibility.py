"""Which nodes a pod may use beyond its resources: kube-scheduler's NodeUnschedulable,
TaintToleration and NodeAffinity filters (nodeSelector, required node affinity with
matchExpressions and matchFields), and, for a pod asking for ``nvidia.com/gpu``, a node
that advertises it (not one whose GPUs only DRA publishes), as the secondary scheduler
applies them before placing a pod on the core's resource model."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kubesage.core.arrays import BoolArray
from kubesage.core.errors import InputError
from kubesage.core.k8s.mig_readiness import mig_resources, mig_wait_for
from kubesage.core.k8s.translate import effective_requests, parse_quantity
from kubesage.core.topology.discovery import GPU_RESOURCE

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NODE_NAME_FIELD = "metadata.name"
"""The one field node affinity's ``matchFields`` may name."""


def node_name_term(name: str) -> dict[str, Any]:
    """A node selector term that matches one node by name (``matchFields`` on
    ``metadata.name``: a node's ``kubernetes.io/hostname`` label may differ from it).

    The API server accepts exactly one value in a ``matchFields`` requirement
    (:func:`~kubesage.core.k8s.validation.node_field_selector_problems`), so several
    nodes are several terms: ORed in required affinity (:func:`node_name_terms`), one
    preference each in preferred affinity."""
    return {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [name]}]}


def node_name_terms(names: Sequence[str]) -> list[dict[str, Any]]:
    """Node selector terms that together match these nodes by name (a required
    affinity's ``nodeSelectorTerms``: any one term matching suffices)."""
    return [node_name_term(name) for name in names]


def on_nodes(names: Sequence[str]) -> dict[str, Any]:
    """Required node affinity to these nodes (a pod spec's ``affinity``)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": node_name_terms(names)
            }
        }
    }


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif (
            operator == "Equal"  # another (Lt/Gt, behind a feature gate) tolerates nothing here
            and key == taint.get("key")
            and (toleration.get("value") or "") == (taint.get("value") or "")
        ):
            return True
    return False


def expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expression.get("key") or ""
    operator = expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        label, bound = go_parse_int(labels[key]), go_parse_int(values[0])
        if label is None or bound is None:
            return False
        return label > bound if operator == "Gt" else label < bound
    return False


_GO_INT = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def go_parse_int(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it (how Kubernetes
    compares ``Gt``/``Lt`` values), None where Go fails: an optional sign and ASCII
    digits only (no ``_``, spaces or other digits, which Python's ``int`` takes), within
    int64."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def asks_plugin_gpus(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` asks for ``nvidia.com/gpu`` as an extended resource (False when its
    spec cannot be read: the bind path refuses such a pod itself)."""
    try:
        return effective_requests(pod.get("spec") or {}).get(GPU_RESOURCE, 0) > 0
    except InputError:
        return False


def advertises_plugin_gpus(node: Mapping[str, Any]) -> bool:
    """Whether ``node``'s allocatable advertises ``nvidia.com/gpu``. The core counts a
    node's GPUs from its ResourceSlices too, but a node whose GPUs are published only
    through DRA has no device plugin (nor has a node all in MIG mode whole GPUs): the
    kubelet rejects a pod asking for them there, and kube-scheduler's NodeResourcesFit
    never picks it."""
    allocatable: Mapping[str, Any] = (node.get("status") or {}).get("allocatable") or {}
    try:
        return parse_quantity(allocatable.get(GPU_RESOURCE, "0")) > 0
    except InputError:
        return False


def node_fits_pod(
    pod: Mapping[str, Any], node: Mapping[str, Any], *, asks_gpus: bool | None = None
) -> bool:
    """kube-scheduler's node filters that the core's resource model does not cover
    (``asks_gpus``: :func:`asks_plugin_gpus` of ``pod``, when the caller has it)."""
    if asks_gpus is None:
        asks_gpus = asks_plugin_gpus(pod)
    if asks_gpus and not advertises_plugin_gpus(node):
        return False
    spec = pod.get("spec") or {}
    node_spec = node.get("spec") or {}
    metadata = node.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    tolerations: Sequence[Mapping[str, Any]] = spec.get("tolerations") or []
    if node_spec.get("unschedulable") and not tolerates(
        tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    ):
        return False
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return False
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if required:
        fields = {"metadata.name": str(metadata.get("name") or "")}
        return any(
            all(expression_matches(e, labels) for e in term.get("matchExpressions") or [])
            and all(expression_matches(e, fields) for e in term.get("matchFields") or [])
            and (term.get("matchExpressions") or term.get("matchFields"))
            for term in required
        )
    return True


class EligibilityCache:
    """Per-cycle masks of the nodes each pod may use, shared by pods with equal constraints:
    the filters above and, with ``binds_now`` (a scheduler that binds what it places at
    once), for a pod that asks for a MIG instance by name, the nodes that can start it now
    (:mod:`~kubesage.core.k8s.mig_readiness`: not mid-way through a MIG re-layout, the
    instance advertised). Planners leave that out: a re-layout exists to create instances
    a node does not advertise yet, and the bind path applies the gate."""

    def __init__(
        self,
        nodes: Mapping[str, Mapping[str, Any]],
        node_names: Sequence[str],
        *,
        binds_now: bool = False,
    ) -> None:
        self.binds_now = binds_now
        self.node_names = node_names
        """The state's node list these masks index (a rebuild makes a new list)."""
        self._nodes = [nodes.get(name) or {} for name in node_names]
        self._masks: dict[str, BoolArray | None] = {}

    def eligible(self, pod: Mapping[str, Any]) -> BoolArray | None:
        spec = pod.get("spec") or {}
        migs = mig_resources(pod) if self.binds_now else []
        asks_gpus = asks_plugin_gpus(pod)
        signature = json.dumps(
            [
                spec.get("nodeSelector"),
                (spec.get("affinity") or {}).get("nodeAffinity"),
                spec.get("tolerations"),
                migs,
                asks_gpus,
            ],
            sort_keys=True,
        )
        if signature not in self._masks:
            mask = np.array(
                [
                    node_fits_pod(pod, node, asks_gpus=asks_gpus)
                    and mig_wait_for(migs, node) is None
                    for node in self._nodes
                ],
                dtype=bool,
            )
            self._masks[signature] = None if bool(mask.all()) else mask
        return self._masks[signature]
