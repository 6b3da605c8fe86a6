"""The kube-scheduler extender's handlers: filter, prioritize and bind.

The wire format (models, fast parsing, score scaling) is
:mod:`kubesage.core.k8s.extender_wire`; the per-request work over the candidate nodes
(names → indices, the fit with reasons, what filter passed) is
:mod:`kubesage.core.k8s.extender_candidates`; the state the handlers read and the bind
path are :mod:`kubesage.core.k8s.binding`.

The handlers work on a whole request at once: the pod is translated once (and kept
by uid and resourceVersion, so prioritize and bind reuse filter's work; a pod whose
template was seen before is not parsed again, :mod:`~kubesage.core.k8s.pod_templates`), the
candidate names are mapped to ClusterState indices through its name → index dict,
and the fit check and the policy's scores are numpy over the candidates only —
never over the whole cluster. Prioritize reuses what filter found for the same pod
and the same names (the index mapping, and the fit while none of those nodes has
changed since: their ``node_version`` stamps are compared). Responses are plain
dicts serialised by orjson — no per-node pydantic objects in the hot path.

Filter's answer also starts the prioritize that follows it: once the answer is written,
:meth:`Extender.prescore` scores the nodes that passed (the server runs it on the event
loop while kube-scheduler reads the answer and sends prioritize). Prioritize uses those
scores when it asks about exactly those nodes for the same pod and none of them has
changed since — the same condition as reusing the fit, and the same snapshot semantics
as kube-scheduler's own score plugins, which score the nodes as of the cycle's start.
After :data:`PRESCORES_UNUSED_LIMIT` unused ones in a row (no prioritize configured,
or another extender narrowing the list) it stops until a prioritize uses one again.

What the handlers decide, and their fallbacks:

- **filter**: a candidate passes when the core's fit rule passes
  (:mod:`kubesage.core.state.fit`: CPU, memory, GPU model, whole GPUs, GPU share, MIG
  slot). Failing nodes get the rule's reason in words (prefixed ``kubesage:``); those
  that preemption could never fix (too small, wrong GPU model or MIG mode) go to
  ``FailedAndUnresolvableNodes``. A node kubesage does not know yet (not synced)
  passes untouched — kube-scheduler has already run its own checks. A pod outside
  the core's model (:class:`UnsupportedPodError`) passes everywhere; both are
  counted as fallbacks.
- **prioritize**: the policy's scores (:meth:`Policy.score_nodes`) of the feasible
  candidates, min-max scaled to integers 0..10 (``MaxExtenderPriority``): the best
  node always gets 10. Infeasible and unknown nodes get 0; if every feasible node
  scores the same, all get 10.
- **bind**: through the injected bind function
  (:func:`~kubesage.core.k8s.binding.assume_and_bind` on a live cluster, the embedded
  cluster's binder); a failure is an ``ExtenderBindingResult.Error``.

Malformed input raises :class:`ExtenderRequestError` (HTTP 400 in the server), except
a well-formed filter request whose Pod kubesage cannot read (:class:`PodRequestError`):
kube-scheduler reads only a 200's body, so filter answers that in the result's
``Error``, which kube-scheduler reports on the pod (counted as
``kubesage_errors_total{kind="bad_pod"}``).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from itertools import compress
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from kubesage.core.arrays import BoolArray, FloatArray, IntArray
from kubesage.core.errors import KubesageError
from kubesage.core.k8s.binding import BindFunction, BindTarget, StateView
from kubesage.core.k8s.dra_requests import ClaimsPendingError
from kubesage.core.k8s.extender_candidates import (
    REASON_PREFIX,
    Candidates,
    Passed,
    filter_candidates,
    map_candidates,
    passed_of,
)
from kubesage.core.k8s.extender_wire import (
    MAX_EXTENDER_PRIORITY,
    ExtenderBindingArgs,
    PodRequestError,
    parse_args,
    parse_model,
    scale_scores,
)
from kubesage.core.k8s.pod_templates import PodTemplates
from kubesage.core.k8s.translate import TranslateError, UnfittablePodError, UnsupportedPodError
from kubesage.core.observability.logging import log_event
from kubesage.core.observability.metrics import BINDS, DECISIONS, ERRORS, FALLBACKS
from kubesage.core.policy.base import Policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import PodRequest

log = logging.getLogger(__name__)

POD_CACHE_SIZE = 4096
"""Translated pods kept by (uid, resourceVersion) for prioritize and bind."""
PRESCORES_UNUSED_LIMIT = 16
"""Filter answers scored ahead for nothing, in a row, before prescoring pauses."""

_SCORES = range(MAX_EXTENDER_PRIORITY + 1)
# The hot path's metric children, looked up once (labels() costs a dict lookup and a lock).
_FILTER_FEASIBLE = DECISIONS.labels("filter", "feasible")
_FILTER_NO_FIT = DECISIONS.labels("filter", "no_fit")
_PRIORITIZE_SCORED = DECISIONS.labels("prioritize", "scored")
_UNKNOWN_NODES = FALLBACKS.labels("extender", "unknown_node")
_NO_RESULT: dict[str, Any] = {  # an ExtenderFilterResult's fields, in Go's order
    "Nodes": None,
    "NodeNames": None,
    "FailedNodes": {},
    "FailedAndUnresolvableNodes": {},
}

Response = tuple[int, bytes]
ClaimRequests = Callable[[Mapping[str, Any]], PodRequest]
"""A pod → its request including the GPUs of its ResourceClaims."""
"""HTTP status and JSON body."""


# -- the handlers --------------------------------------------------------------------


class Extender:
    """filter, prioritize and bind over a cluster state and a scheduling policy."""

    def __init__(
        self,
        view: StateView,
        policy: Policy,
        bind: BindFunction | None = None,
        *,
        pod_cache_size: int = POD_CACHE_SIZE,
        claim_requests: ClaimRequests | None = None,
    ):
        self.view = view
        self.policy = policy
        self._bind = bind
        self._claim_requests = claim_requests
        """A live cluster's translator for pods that ask for GPUs through ResourceClaims
        (:meth:`~kubesage.core.k8s.informer.ClusterSync.request_of`): their GPUs are in the
        claims, which the pod's own spec does not show."""
        self._pods: OrderedDict[tuple[str, str], PodRequest | UnsupportedPodError] = OrderedDict()
        self._pods_by_uid: OrderedDict[str, PodRequest] = OrderedDict()
        self._pod_cache_size = pod_cache_size
        self._pods_lock = threading.Lock()
        self._templates = PodTemplates()
        self._entry_table: npt.NDArray[np.object_] = np.array([], dtype=object)
        self._entries_of: Sequence[str] | None = None
        self._passed: Passed | None = None
        """What filter last passed: prioritize usually asks about exactly those names."""
        self._prescored: tuple[Passed, FloatArray] | None = None
        """The policy's raw scores of ``_passed``'s nodes, computed after filter answered."""
        self._prescores_unused = 0
        self.prescores_used = 0
        """Prioritize answers that used scores computed ahead (a figure for tests)."""

    # -- filter ----------------------------------------------------------------------

    def filter(self, body: bytes) -> Response:
        """ExtenderArgs → ExtenderFilterResult."""
        args = parse_args(body)
        pod = _pod_key(args.pod)
        try:
            request = self._request(args.pod, pod)
        except PodRequestError as exc:
            ERRORS.labels("filter", "bad_pod").inc()
            log_event(log, logging.INFO, "pod_refused", verb="filter", error=str(exc))
            return 200, orjson.dumps({**_NO_RESULT, "Error": f"{REASON_PREFIX}{exc}"})
        with self.view.locked() as (state, _):
            candidates = map_candidates(state, args, None)
            if isinstance(request, UnfittablePodError):  # no node can: every known one fails
                passed = candidates.index < 0
                failed: dict[str, str] = {}
                reason = f"{REASON_PREFIX}{request}"
                unresolvable = dict.fromkeys(compress(candidates.names, (~passed).tolist()), reason)
            elif isinstance(request, UnsupportedPodError):
                passed = np.ones(len(candidates.names), dtype=bool)
                failed = {}
                unresolvable = {}
                self._fallback("filter", "unsupported_pod", request)
            else:
                passed, failed, unresolvable = filter_candidates(state, request, candidates)
            memo: Passed | None = None
            if candidates.items is None:  # NodeNames mode: keep the outcome for prioritize
                memo = self._passed = passed_of(state, candidates, passed, pod, request)
        if candidates.unknown.size:
            _UNKNOWN_NODES.inc(candidates.unknown.size)
        result: dict[str, Any] = {
            **_NO_RESULT,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        if candidates.items is not None:
            result["Nodes"] = {"items": list(compress(candidates.items, passed.tolist()))}
        if memo is not None:
            result["NodeNames"] = memo.names
        (_FILTER_FEASIBLE if passed.any() else _FILTER_NO_FIT).inc()
        return 200, orjson.dumps(result)

    # -- prioritize --------------------------------------------------------------------

    def prioritize(self, body: bytes) -> Response:
        """ExtenderArgs → HostPriorityList (scores 0..10)."""
        args = parse_args(body)
        pod = _pod_key(args.pod)
        passed = self._passed
        prescored, self._prescored = self._prescored, None
        with self.view.locked() as (state, _):
            candidates = map_candidates(state, args, passed)
            reused: PodRequest | None = None
            if passed is not None and candidates.index is passed.index:
                reused = passed.still_fits(state, pod)
            if reused is not None:  # filter's nodes, all known and still fitting
                self._prescores_unused = 0  # prioritize follows filter: prescoring pays
                if prescored is not None and prescored[0] is passed:
                    scores = scale_scores(prescored[1])  # scored ahead, nothing changed since
                    self.prescores_used += 1
                else:
                    scores = self._scores(state, reused, candidates, None)
            else:
                self._prescores_unused += prescored is not None
                request = self._request(args.pod, pod)
                if isinstance(request, UnsupportedPodError):
                    scores = np.zeros(len(candidates.names), dtype=np.int64)
                    self._fallback("prioritize", "unsupported_pod", request)
                else:
                    known = candidates.index >= 0
                    fits = known.copy()
                    fits[known] = state.feasible(request, candidates.index[known])
                    scores = self._scores(state, request, candidates, fits)
            entries = self._entries(state, candidates, scores)
        _PRIORITIZE_SCORED.inc()
        return 200, b"[" + b",".join(entries) + b"]"

    def prescore(self) -> None:
        """Score the nodes filter just passed, for the prioritize that follows (see the
        module docstring); nothing when that prioritize could not use them."""
        memo = self._passed
        if self._prescored is not None:  # the last one was never asked for
            self._prescores_unused += 1
            self._prescored = None
        if (
            memo is None
            or memo.request is None
            or memo.unknown.size
            or memo.known.size == 0
            or self._prescores_unused >= PRESCORES_UNUSED_LIMIT
        ):
            return
        with self.view.locked() as (state, _):
            if memo.still_fits(state, memo.pod) is None:
                return
            raw = self.policy.score_nodes(state, memo.request, memo.known)
        self._prescored = (memo, np.asarray(raw, dtype=np.float64))

    def _entries(
        self, state: ClusterState, candidates: Candidates, scores: IntArray
    ) -> list[bytes]:
        """Each candidate's ``{"Host":"<name>","Score":<n>}`` — the bytes orjson would
        write, looked up in a per-(node, score) table instead of serialising a dict per
        node (the table is rebuilt when the state's node set changes)."""
        if self._entries_of is not state.node_names:
            self._entry_table = np.array(
                [
                    [
                        b'{"Host":' + orjson.dumps(name) + b',"Score":%d}' % score
                        for score in _SCORES
                    ]
                    for name in state.node_names
                ]
                + [[b""] * len(_SCORES)],  # row -1: unknown nodes, filled in below
                dtype=object,
            )
            self._entries_of = state.node_names
        entries: list[bytes] = self._entry_table[candidates.index, scores].tolist()
        for position in candidates.unknown.tolist():
            host = orjson.dumps(candidates.names[position])
            entries[position] = b'{"Host":' + host + b',"Score":%d}' % scores[position]
        return entries

    def _scores(
        self,
        state: ClusterState,
        request: PodRequest,
        candidates: Candidates,
        fits: BoolArray | None,
    ) -> IntArray:
        """Scores 0..10 of the candidates that fit (``fits``; None: every known one);
        0 for the others."""
        index = candidates.index
        if fits is None:
            if candidates.unknown.size == 0 and index.size:
                # The usual prioritize: filter's nodes, all known and still fitting.
                raw = self.policy.score_nodes(state, request, index)
                return scale_scores(np.asarray(raw, dtype=np.float64))
            fits = index >= 0
        scores = np.zeros(index.size, dtype=np.int64)
        positions = np.flatnonzero(fits)
        if positions.size == 0:
            return scores
        raw = self.policy.score_nodes(state, request, index[positions])
        scores[positions] = scale_scores(np.asarray(raw, dtype=np.float64))
        return scores

    # -- bind ------------------------------------------------------------------------

    def bind(self, body: bytes) -> Response:
        """ExtenderBindingArgs → ExtenderBindingResult (Error empty on success)."""
        args = parse_model(ExtenderBindingArgs, body)
        namespace = args.pod_namespace or "default"
        target = BindTarget(
            namespace=namespace,
            name=args.pod_name,
            uid=args.pod_uid,
            node=args.node,
            request=self._pod_by_uid(args.pod_uid),
        )
        pod = f"{namespace}/{args.pod_name}"
        if self._bind is None:
            error = "this kubesage instance does not bind (no bind target configured)"
        else:
            try:
                self._bind(target)
                error = ""
            except KubesageError as exc:
                error = str(exc)
        outcome = "failed" if error else "bound"
        BINDS.labels(outcome).inc()
        DECISIONS.labels("bind", outcome).inc()
        log_event(
            log,
            logging.WARNING if error else logging.INFO,
            "bind",
            pod=pod,
            node=args.node,
            outcome=outcome,
            error=error or None,
        )
        return 200, orjson.dumps({"Error": error})

    # -- pods ------------------------------------------------------------------------

    def _request(
        self, pod: dict[str, Any], key: tuple[str, str]
    ) -> PodRequest | UnsupportedPodError:
        """The pod's request, translated once per (uid, resourceVersion) = ``key``."""
        uid = key[0]
        if uid:
            with self._pods_lock:
                cached = self._pods.get(key)
                if cached is not None:
                    self._pods.move_to_end(key)
                    return cached
        outcome: PodRequest | UnsupportedPodError
        claims = self._claim_requests is not None and bool(
            (pod.get("spec") or {}).get("resourceClaims")
        )
        try:
            if claims and self._claim_requests is not None:
                outcome = self._claim_requests(pod)
            else:
                outcome = self._templates.request(pod)
        except UnsupportedPodError as exc:
            outcome = exc
        except ClaimsPendingError as exc:
            # Not cached: the claim appears soon; until then kube-scheduler's own DRA
            # plugin keeps the pod unschedulable, and kubesage leaves it to the default.
            return UnsupportedPodError("a ResourceClaim it names is not created yet", path=exc.path)
        except TranslateError as exc:
            raise PodRequestError(f"Pod: {exc}") from exc
        if uid:
            with self._pods_lock:
                self._pods[key] = outcome
                if isinstance(outcome, PodRequest):
                    self._pods_by_uid[uid] = outcome
                    self._pods_by_uid.move_to_end(uid)
                for cache in (self._pods, self._pods_by_uid):
                    while len(cache) > self._pod_cache_size:
                        cache.popitem(last=False)
        return outcome

    def _pod_by_uid(self, uid: str) -> PodRequest | None:
        with self._pods_lock:
            return self._pods_by_uid.get(uid) if uid else None

    @staticmethod
    def _fallback(verb: str, reason: str, exc: Exception) -> None:
        FALLBACKS.labels("extender", reason).inc()
        log_event(log, logging.INFO, "pass_through", verb=verb, reason=reason, detail=str(exc))


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _pod_key(pod: dict[str, Any]) -> tuple[str, str]:
    """The pod's (uid, resourceVersion), empty strings where missing."""
    metadata = pod.get("metadata")
    if not isinstance(metadata, dict):
        return "", ""
    return _text(metadata.get("uid")), _text(metadata.get("resourceVersion"))
