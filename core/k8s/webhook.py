"""The mutating admission webhook: AdmissionReview v1 in, a JSONPatch of policy out.

:meth:`AdmissionWebhook.handle` takes the raw request body the API server POSTs to
``/mutate`` and returns ``(HTTP status, JSON body)``:

- a well-formed ``admission.k8s.io/v1`` AdmissionReview → 200 and an AdmissionReview
  response with the request's ``uid``, ``allowed: true`` and, when something changes,
  ``patchType: JSONPatch`` with the base64 RFC 6902 patch;
- anything else (not JSON, another apiVersion, a missing ``request.uid``...) → 400
  and ``{"error": message}`` saying what is wrong.

Only CREATE of Pods is mutated; other operations and resources are allowed unchanged.
The webhook never denies a pod: if its policies cannot be read, the mutation fails or
the time budget (``budget_s``) runs out, the pod is allowed unchanged with a warning,
and the fallback is counted in ``kubesage_fallbacks_total{component="webhook"}``.

Mutation (:func:`mutate_pod`): matching policies apply from the highest priority
down, each filling in only what is still unset (see
:mod:`kubesage.core.k8s.scheduling_policy`). Because injected labels can make further
policies match, matching repeats until the pod stops changing, so the result is a
fixed point: the same request sent again gets no patch (idempotent, as the API
server's ``reinvocationPolicy: IfNeeded`` expects).

A pod left with required constraints kubesage cannot honour, or with a claimed volume,
is not redirected to it, with a warning; a pod no scheduler places (``spec.nodeName``, a
mirror pod) is left as it is (:mod:`~kubesage.core.k8s.unsupported_constraints`).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError

from kubesage.core.annotations import GPU_MILLI_ANNOTATION
from kubesage.core.errors import InputError
from kubesage.core.field_errors import first_problem
from kubesage.core.k8s.policy_source import PolicySource
from kubesage.core.k8s.scheduling_policy import (
    SPARK_APP_LABEL,
    SPARK_LOCALITY_ANNOTATION,
    NamespaceLabels,
    SchedulingPolicy,
    by_priority,
    name_only_namespace_labels,
)
from kubesage.core.k8s.translate import effective_requests
from kubesage.core.k8s.unsupported_constraints import (
    KUBESAGE_SCHEDULER,
    never_scheduled,
    refused_redirect,
)
from kubesage.core.k8s.v1_models import Affinity
from kubesage.core.observability import metrics

log = logging.getLogger(__name__)

ADMISSION_API_VERSION = "admission.k8s.io/v1"
DEFAULT_SCHEDULER = "default-scheduler"
APPLIED_ANNOTATION = "kubesage.io/scheduling-policies"
"""Names of the policies that select the pod (comma-separated, in application order)."""
MAX_ROUNDS = 8
"""Matching rounds before giving up on a fixed point (policies whose labels feed others)."""


class MalformedReviewError(InputError):
    """The request body is not a usable AdmissionReview v1 (answered with a 400)."""


class MalformedPodError(InputError):
    """The pod in a review has a field of the wrong type; it is admitted unchanged."""


# --- the request shape (only what the webhook reads; the rest is ignored) ----------------


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class GroupVersionResource(_Lenient):
    group: StrictStr
    version: StrictStr
    resource: StrictStr


class AdmissionRequest(_Lenient):
    uid: StrictStr
    resource: GroupVersionResource
    subResource: StrictStr | None = None  # noqa: N815 - the wire name
    namespace: StrictStr | None = None
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    object: dict[str, Any] | None = None


class AdmissionReview(_Lenient):
    apiVersion: StrictStr  # noqa: N815 - the wire name
    kind: StrictStr
    request: AdmissionRequest


# --- mutation ---------------------------------------------------------------------------


@dataclass
class Mutation:
    """A mutated copy of a pod, the policies that selected it and notes for the user."""

    pod: dict[str, Any]
    applied: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _mapping(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """``parent[key]`` as a dict, created empty when absent; MalformedPodError for another type."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    if not isinstance(value, dict):
        raise MalformedPodError(f"{where}.{key}: expected an object, got {type(value).__name__}")
    return value


def _list(parent: dict[str, Any], key: str, where: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        value = parent[key] = []
    if not isinstance(value, list):
        raise MalformedPodError(f"{where}.{key}: expected a list, got {type(value).__name__}")
    return value


def _labels(pod: Mapping[str, Any]) -> dict[str, str]:
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if labels is None:
        return {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise MalformedPodError("object.metadata.labels: expected a map of strings")
    return labels


def _fill_map(container: dict[str, Any], key: str, values: Mapping[str, str], where: str) -> None:
    """Add the keys of ``values`` that ``container[key]`` lacks (existing keys win)."""
    if values:
        target = _mapping(container, key, where)
        for name in sorted(values.keys() - target.keys()):
            target[name] = values[name]


def _append_missing(container: dict[str, Any], key: str, items: Sequence[Any], where: str) -> None:
    if items:
        target = _list(container, key, where)
        for item in items:
            if item not in target:
                target.append(item)


def _implies(term: Mapping[str, Any], required: Mapping[str, Any]) -> bool:
    """True when node selector ``term`` already contains every requirement of ``required``."""
    return all(
        requirement in (term.get(kind) or [])
        for kind in ("matchExpressions", "matchFields")
        for requirement in required.get(kind) or []
    )


def _and_terms(pod_terms: list[Any], policy_terms: list[Any]) -> list[Any]:
    """ORed terms ∧ ORed terms: every pairwise union (Kubernetes ORs terms, ANDs within one).
    A pod without terms (an empty list the API server would refuse) takes the policy's."""
    if not pod_terms:
        return list(policy_terms)
    if all(any(_implies(term, p) for p in policy_terms) for term in pod_terms):
        return pod_terms
    combined = []
    for term in pod_terms:
        if not (term.get("matchExpressions") or term.get("matchFields")):
            continue  # an empty term matches no node; ANDed with a policy's, it still must not
        for policy_term in policy_terms:
            merged = dict(term)
            for kind in ("matchExpressions", "matchFields"):
                items = list(term.get(kind) or [])
                items += [item for item in policy_term.get(kind) or [] if item not in items]
                if items:
                    merged[kind] = items
            combined.append(merged)
    return combined or pod_terms  # only empty terms: the pod's, which match nothing, stay


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _merge_affinity(spec: dict[str, Any], affinity: Mapping[str, Any]) -> None:
    """Merge v1 ``affinity`` into ``spec.affinity``: constraints are added, never dropped."""
    where = "object.spec.affinity"
    created = spec.get("affinity") is None
    target = _mapping(spec, "affinity", "object.spec")
    node = affinity.get("nodeAffinity")
    if node:
        node_target = _mapping(target, "nodeAffinity", where)
        required = node.get(REQUIRED)
        if required:
            if node_target.get(REQUIRED) is None:
                node_target[REQUIRED] = required
            else:
                selector = _mapping(node_target, REQUIRED, f"{where}.nodeAffinity")
                terms = _list(selector, "nodeSelectorTerms", f"{where}.nodeAffinity.{REQUIRED}")
                selector["nodeSelectorTerms"] = _and_terms(terms, required["nodeSelectorTerms"])
        _append_missing(node_target, PREFERRED, node.get(PREFERRED) or [], f"{where}.nodeAffinity")
    for kind in ("podAffinity", "podAntiAffinity"):
        pod_terms = affinity.get(kind)
        if pod_terms:
            kind_target = _mapping(target, kind, where)
            for key in (REQUIRED, PREFERRED):
                _append_missing(kind_target, key, pod_terms.get(key) or [], f"{where}.{kind}")
    if created and not target:
        del spec["affinity"]


def _rename_resources(spec: dict[str, Any], source: str, target: str, notes: list[str]) -> None:
    for group in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(group) or []):
            where = f"object.spec.{group}[{index}]"
            if not isinstance(container, dict):
                raise MalformedPodError(f"{where}: expected an object")
            resources = container.get("resources")
            if not isinstance(resources, dict):
                continue
            for kind in ("requests", "limits"):
                amounts = resources.get(kind)
                if not isinstance(amounts, dict) or source not in amounts:
                    continue
                if target in amounts:
                    notes.append(f"{where}.resources.{kind} has both {source} and {target}")
                    continue
                # Rebuild to keep the key order stable apart from the rename.
                resources[kind] = {
                    (target if key == source else key): value for key, value in amounts.items()
                }


def _apply(
    pod: dict[str, Any], policy: SchedulingPolicy, notes: list[str], blocked: Collection[str]
) -> None:
    """Fill ``pod`` in place with what ``policy`` injects and the pod does not set yet
    (a ``schedulerName`` in ``blocked`` excepted)."""
    inject = policy.spec.inject
    metadata = _mapping(pod, "metadata", "object")
    spec = _mapping(pod, "spec", "object")
    name = inject.scheduler_name
    if name and name not in blocked and spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER):
        spec["schedulerName"] = name
    _fill_map(metadata, "labels", inject.labels, "object.metadata")
    annotations = dict(inject.annotations)
    if inject.flink is not None:
        annotations.update(inject.flink.annotations())
    if inject.spark is not None:
        annotations[SPARK_LOCALITY_ANNOTATION] = inject.spark.locality
    _fill_map(metadata, "annotations", annotations, "object.metadata")
    if inject.affinity is not None:
        _merge_affinity(spec, inject.affinity.to_v1())
    if inject.spark is not None:
        app = _labels(pod).get(SPARK_APP_LABEL)
        if app is None:
            notes.append(f"policy {policy.name}: no {SPARK_APP_LABEL} label, no Spark locality")
        else:
            term = {
                "weight": inject.spark.weight,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {SPARK_APP_LABEL: app}},
                    "topologyKey": inject.spark.topology_key,
                },
            }
            _merge_affinity(
                spec, Affinity.model_validate({"podAffinity": {PREFERRED: [term]}}).to_v1()
            )
    _append_missing(spec, "tolerations", [t.to_v1() for t in inject.tolerations], "object.spec")
    for mapping in inject.mig_resources:
        refused = _not_one_gpu(pod, mapping.source)
        if refused:
            notes.append(f"policy {policy.name}: {refused}; {mapping.source} is left as it is")
        else:
            _rename_resources(spec, mapping.source, mapping.to, notes)


def _not_one_gpu(pod: Mapping[str, Any], source: str) -> str | None:
    """Why ``source`` may not become a MIG instance in ``pod``: one instance stands for
    one whole GPU (a 4-GPU job is not four slices), and a GPU share is not an instance."""
    metadata = pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(annotations, dict) and GPU_MILLI_ANNOTATION in annotations:
        return f"the pod shares a GPU ({GPU_MILLI_ANNOTATION})"
    try:
        count = effective_requests(pod.get("spec") or {}, "object.spec").get(source)
    except InputError as exc:
        return str(exc)
    if count is None or count == 1:
        return None
    return f"the pod asks for {count} {source} and a MIG instance stands for one"


def mutate_pod(
    pod: Mapping[str, Any],
    policies: Sequence[SchedulingPolicy],
    namespace_labels: Mapping[str, str],
    *,
    schedulers: Collection[str] = (KUBESAGE_SCHEDULER,),
) -> Mutation:
    """Apply every policy that selects ``pod`` until it stops changing (a fixed point),
    redirecting it to none of ``schedulers`` that cannot schedule it (module docstring)."""
    if never_scheduled(pod):
        return Mutation(dict(pod), [], [])
    ordered = by_priority(list(policies))
    refused: set[str] = set()
    warnings: list[str] = []
    while True:  # each turn refuses one more scheduler name, which no policy sets again
        current: dict[str, Any] = json.loads(json.dumps(pod))  # a deep copy; the input is JSON
        for _ in range(MAX_ROUNDS):
            selected = [p for p in ordered if p.selects(_labels(current), namespace_labels)]
            before = json.dumps(current, sort_keys=True)
            notes: list[str] = []
            for policy in selected:
                _apply(current, policy, notes, refused)
            if selected:
                annotations = _mapping(_mapping(current, "metadata", "object"), "annotations", "")
                annotations[APPLIED_ANNOTATION] = ",".join(p.name for p in selected)
            if json.dumps(current, sort_keys=True) == before:
                break
        else:
            notes.append(f"policies did not settle in {MAX_ROUNDS} rounds (labels feed selectors)")
        name, note = refused_redirect(pod, current, schedulers)
        warnings += [note] if note else []
        if name is None:
            break
        refused.add(name)
    warnings += [w for policy in selected for w in policy.redirect_warnings(schedulers)]
    return Mutation(current, [p.name for p in selected], notes + warnings)


# --- RFC 6902 ---------------------------------------------------------------------------


def pointer_token(key: str | int) -> str:
    """One RFC 6901 reference token: ``~`` → ``~0`` first, then ``/`` → ``~1``."""
    return str(key).replace("~", "~0").replace("/", "~1")


def json_patch(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """RFC 6902 operations turning ``before`` into ``after`` (objects key by key)."""
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[dict[str, Any]] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{pointer_token(key)}"})
        for key, value in after.items():
            child = f"{path}/{pointer_token(key)}"
            if key not in before:
                ops.append({"op": "add", "path": child, "value": value})
            else:
                ops += json_patch(before[key], value, child)
        return ops
    if isinstance(before, list) and isinstance(after, list):
        if len(before) == len(after):
            return [
                op
                for index, (old, new) in enumerate(zip(before, after, strict=True))
                for op in json_patch(old, new, f"{path}/{index}")
            ]
        if len(after) > len(before) and after[: len(before)] == before:
            return [
                {"op": "add", "path": f"{path}/{index}", "value": after[index]}
                for index in range(len(before), len(after))
            ]
    if before == after and type(before) is type(after):
        return []
    return [{"op": "replace", "path": path, "value": after}]


# --- the webhook ------------------------------------------------------------------------


def _decode_review(body: bytes) -> AdmissionReview:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise MalformedReviewError(f"body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise MalformedReviewError(
            f"body must be a JSON object (an AdmissionReview), got {type(document).__name__}"
        )
    if document.get("apiVersion") != ADMISSION_API_VERSION:
        raise MalformedReviewError(
            f"apiVersion must be '{ADMISSION_API_VERSION}', got {document.get('apiVersion')!r}"
        )
    if document.get("kind") != "AdmissionReview":
        raise MalformedReviewError(f"kind must be 'AdmissionReview', got {document.get('kind')!r}")
    try:
        return AdmissionReview.model_validate(document)
    except (ValidationError, RecursionError) as exc:
        if isinstance(exc, RecursionError):
            raise MalformedReviewError("body is nested too deeply") from None
        raise MalformedReviewError(str(first_problem(exc))) from None


def _response(uid: str, patch: list[dict[str, Any]], warnings: list[str]) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(
            json.dumps(patch, separators=(",", ":")).encode()
        ).decode("ascii")
    if warnings:
        # The API server shows warnings to the client; keep each one short.
        response["warnings"] = [f"kubesage: {w}"[:240] for w in warnings]
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


class AdmissionWebhook:
    """Answers AdmissionReview v1 requests with the JSONPatch of the matching policies."""

    def __init__(
        self,
        source: PolicySource,
        *,
        budget_s: float = 0.5,
        namespace_labels: NamespaceLabels = name_only_namespace_labels,
        workers: int = 4,
        schedulers: Collection[str] = (KUBESAGE_SCHEDULER,),
    ) -> None:
        if budget_s <= 0:
            raise ValueError("budget_s must be positive")
        self.source = source
        self.schedulers = tuple(schedulers)  # kubesage's scheduler names (mutate_pod)
        self.budget_s = budget_s
        self.namespace_labels = namespace_labels
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="webhook")

    def close(self) -> None:
        """Stop the worker threads (a mutation still running is abandoned)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def handle(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for one POSTed AdmissionReview; never raises."""
        started = time.monotonic()
        try:
            review = _decode_review(body)
        except MalformedReviewError as exc:
            metrics.ERRORS.labels("webhook", "bad_request").inc()
            return 400, {"error": str(exc)}
        request, resource = review.request, review.request.resource
        kind = (request.operation, resource.group, resource.resource, request.subResource or "")
        if kind != ("CREATE", "", "pods", ""):  # only a Pod's CREATE is mutated
            metrics.DECISIONS.labels("mutate", "skipped").inc()
            return 200, _response(request.uid, [], [])
        if (pod := request.object) is None:
            metrics.ERRORS.labels("webhook", "bad_request").inc()
            return 400, {"error": "request.object: a Pod CREATE must carry the pod"}
        try:
            metadata = _mapping(pod, "metadata", "object")
            namespace = request.namespace or str(metadata.get("namespace") or "")
            future: Future[Mutation] = self._pool.submit(self._mutate, pod, namespace)
            remaining = self.budget_s - (time.monotonic() - started)
            mutation = future.result(timeout=max(remaining, 0.0))
            patch = json_patch(pod, mutation.pod)
        except FutureTimeout:
            future.cancel()
            message = f"no policy applied: over the {self.budget_s}s budget"
            return self._unchanged(request.uid, "timeout", message)
        except Exception as exc:  # a pod is never denied for our own failure
            log.warning(
                "admitting pod unchanged: %s", exc, exc_info=not isinstance(exc, InputError)
            )
            reason = "malformed_pod" if isinstance(exc, MalformedPodError) else "error"
            return self._unchanged(request.uid, reason, f"no policy applied: {exc}")
        metrics.DECISIONS.labels("mutate", "patched" if patch else "unchanged").inc()
        return 200, _response(request.uid, patch, mutation.warnings)

    def _mutate(self, pod: dict[str, Any], namespace: str) -> Mutation:
        policies, labels = self.source.policies(), self.namespace_labels(namespace)
        return mutate_pod(pod, policies, labels, schedulers=self.schedulers)

    def _unchanged(self, uid: str, reason: str, warning: str) -> tuple[int, dict[str, Any]]:
        metrics.FALLBACKS.labels("webhook", reason).inc()
        metrics.DECISIONS.labels("mutate", "unchanged").inc()
        return 200, _response(uid, [], [warning])
