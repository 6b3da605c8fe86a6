"""kube-scheduler extender protocol v1 on the wire: the models, fast parsing, score scaling.

The models spell the JSON keys exactly as kube-scheduler writes them — the Go field
names of ``k8s.io/kube-scheduler/extender/v1`` (``ExtenderArgs{Pod, Nodes,
NodeNames}``, ``ExtenderFilterResult``, ``HostPriority{Host, Score}``,
``ExtenderBindingArgs``, ``ExtenderBindingResult``); like Go's decoder, the lower-case
spelling is accepted on input too.

The models describe and test the wire format; the hot path does not build them:
:func:`parse_args` reads ExtenderArgs with orjson and a shape check, and the
handlers (:mod:`kubesage.core.k8s.extender`) write plain dicts. Malformed input
raises :class:`ExtenderRequestError` (HTTP 400 in the server), naming the field.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, TypeVar

import numpy as np
import orjson
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import InputError
from kubesage.core.field_errors import describe

MAX_EXTENDER_PRIORITY = 10
"""Highest score an extender may return (``extenderv1.MaxExtenderPriority``)."""

ModelT = TypeVar("ModelT", bound=BaseModel)


class ExtenderRequestError(InputError):
    """A request body the extender cannot read; the message names the field."""


class PodRequestError(ExtenderRequestError):
    """Well-formed arguments whose Pod kubesage cannot read (a fractional GPU count, a bad
    kubesage annotation): filter answers it in ``ExtenderFilterResult.Error``, which
    kube-scheduler reports on the pod; it never reads a body that is not a 200."""


# -- wire models ---------------------------------------------------------------------


def _go(name: str, default: Any = ..., **constraints: Any) -> Any:
    """A field read from its Go name (or the lower-case spelling) and written as it."""
    return Field(
        default, alias=name, validation_alias=AliasChoices(name, name.lower()), **constraints
    )


class _GoModel(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class NodeList(_GoModel):
    """``v1.NodeList``: only ``items`` matters to the extender."""

    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_GoModel):
    """What kube-scheduler POSTs to filter and prioritize."""

    pod: dict[str, Any] = _go("Pod")
    """The v1 Pod being scheduled."""
    nodes: NodeList | None = _go("Nodes", None)
    """Candidate nodes in full (``nodeCacheCapable: false``)."""
    node_names: list[str] | None = _go("NodeNames", None)
    """Candidate node names (``nodeCacheCapable: true``)."""


class ExtenderFilterResult(_GoModel):
    """The filter answer: the nodes that pass and why the others failed."""

    nodes: NodeList | None = _go("Nodes", None)
    node_names: list[str] | None = _go("NodeNames", None)
    failed_nodes: dict[str, str] = _go("FailedNodes", {})
    """Failed nodes that preemption might make fit."""
    failed_and_unresolvable_nodes: dict[str, str] = _go("FailedAndUnresolvableNodes", {})
    """Failed nodes that preemption cannot help."""
    error: str = _go("Error", "")


class HostPriority(_GoModel):
    """One node's score; a prioritize answer is a list of these (``HostPriorityList``)."""

    host: str = _go("Host")
    score: int = _go("Score", ge=0, le=MAX_EXTENDER_PRIORITY)


class ExtenderBindingArgs(_GoModel):
    """What kube-scheduler POSTs to bind."""

    pod_name: str = _go("PodName", min_length=1)
    pod_namespace: str = _go("PodNamespace", "")
    pod_uid: str = _go("PodUID", "")
    node: str = _go("Node", min_length=1)


class ExtenderBindingResult(_GoModel):
    error: str = _go("Error", "")


def parse_model(model: type[ModelT], body: bytes) -> ModelT:
    """``body`` validated as ``model`` (ExtenderRequestError naming the fields if not)."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise ExtenderRequestError(f"{model.__name__}: {describe(exc)}") from None


# -- ExtenderArgs, fast ----------------------------------------------------------------


class Args(NamedTuple):
    """ExtenderArgs as the handlers read it (the wire model is :class:`ExtenderArgs`)."""

    pod: dict[str, Any]
    node_names: list[Any] | None
    """As sent; the handlers check the entries when they look them up."""
    items: list[dict[str, Any]] | None
    """``Nodes.items`` when NodeNames is absent."""


def parse_args(body: bytes) -> Args:
    """Read ExtenderArgs fast: orjson and a shape check instead of model validation.

    Validating 10,000 node names through pydantic costs ~1.5 ms a request, and even
    ``model_construct`` costs more than this tuple; the checks here reject the same
    malformed shapes as the model (the handlers check the names).
    """
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ExtenderRequestError(f"ExtenderArgs: invalid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ExtenderRequestError(
            f"ExtenderArgs: expected a JSON object, got {type(document).__name__}"
        )
    pod = _go_field(document, "Pod")
    if not isinstance(pod, dict):
        raise ExtenderRequestError("ExtenderArgs.Pod: expected a v1 Pod object")
    names = _go_field(document, "NodeNames")
    items = None
    if names is not None and not isinstance(names, list):
        raise ExtenderRequestError("ExtenderArgs.NodeNames: expected a list of node names")
    # Nodes only matters without NodeNames (and finding it absent costs a key scan).
    nodes = _go_field(document, "Nodes") if names is None else None
    if nodes is not None:
        # Go writes an empty NodeList's nil slice as "items": null.
        items = (nodes.get("items") or []) if isinstance(nodes, dict) else None
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ExtenderRequestError("ExtenderArgs.Nodes.items: expected a list of v1 Nodes")
    return Args(pod, names, items)


def _go_field(document: dict[str, Any], name: str) -> Any:
    """``document[name]``, matching the key case-insensitively as Go's decoder does."""
    if name in document:
        return document[name]
    folded = name.lower()
    for key, value in document.items():
        if isinstance(key, str) and key.lower() == folded:
            return value
    return None


# -- scores ------------------------------------------------------------------------------


def scale_scores(raw: FloatArray) -> IntArray:
    """Min-max scale to integers 0..10; the best is always 10, all-equal scores all 10."""
    low, high = (raw.min(), raw.max()) if raw.size else (np.nan, np.nan)
    # Both ends finite means every score is (a NaN makes both NaN): the usual case, with
    # no NaN bookkeeping; one array for the arithmetic, as prioritize runs it per request.
    if math.isfinite(low) and math.isfinite(high):
        if high <= low:
            return np.full(raw.size, MAX_EXTENDER_PRIORITY, dtype=np.int64)
        scaled = raw - low
        scaled /= high - low
        scaled *= MAX_EXTENDER_PRIORITY
        fast: IntArray = np.rint(scaled, out=scaled).astype(np.int64)
        return fast
    finite = np.where(np.isfinite(raw), raw, np.nan)
    if np.isnan(finite).all():
        return np.full(raw.size, MAX_EXTENDER_PRIORITY, dtype=np.int64)
    low, high = np.nanmin(finite), np.nanmax(finite)
    if high <= low:
        return np.where(np.isnan(finite), 0, MAX_EXTENDER_PRIORITY).astype(np.int64)
    scaled = np.rint((np.nan_to_num(finite, nan=low) - low) / (high - low) * MAX_EXTENDER_PRIORITY)
    result: IntArray = scaled.astype(np.int64)
    return result
