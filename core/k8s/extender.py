"""The kube-scheduler extender's handlers: filter, prioritize and bind.

The wire format (models, fast parsing, score scaling) is
:mod:`kubesage.core.k8s.extender_wire`; the state the handlers read and the bind path
are :mod:`kubesage.core.k8s.binding`.

The handlers work on a whole request at once: the pod is translated once (and kept
by uid and resourceVersion, so prioritize and bind reuse filter's work; a pod whose
template was seen before is not parsed again, :mod:`~kubesage.core.k8s.pod_templates`), the
candidate names are mapped to ClusterState indices through its name → index dict,
and the fit check and the policy's scores are numpy over the candidates only —
never over the whole cluster. Prioritize reuses what filter found for the same pod
and the same names (the index mapping, and the fit while none of those nodes has
changed since: their ``node_version`` stamps are compared). Responses are plain
dicts serialised by orjson — no per-node pydantic objects in the hot path.

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

Malformed input raises :class:`ExtenderRequestError` (HTTP 400 in the server).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from kubesage.core.arrays import BoolArray, IntArray
from kubesage.core.errors import KubesageError
from kubesage.core.k8s.binding import BindFunction, BindTarget, StateView
from kubesage.core.k8s.dra_requests import ClaimsPendingError
from kubesage.core.k8s.extender_wire import (
    MAX_EXTENDER_PRIORITY,
    Args,
    ExtenderBindingArgs,
    ExtenderRequestError,
    parse_args,
    parse_model,
    scale_scores,
)
from kubesage.core.k8s.pod_templates import PodTemplates
from kubesage.core.k8s.translate import TranslateError, UnsupportedPodError
from kubesage.core.observability.logging import log_event
from kubesage.core.observability.metrics import BINDS, DECISIONS, FALLBACKS
from kubesage.core.policy.base import Policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fit import fit_report
from kubesage.core.types import PodRequest

log = logging.getLogger(__name__)

POD_CACHE_SIZE = 4096
"""Translated pods kept by (uid, resourceVersion) for prioritize and bind."""
REASON_PREFIX = "kubesage: "
"""Starts every filter failure reason, so users see which extender said no."""

_SCORES = range(MAX_EXTENDER_PRIORITY + 1)
# The hot path's metric children, looked up once (labels() costs a dict lookup and a lock).
_FILTER_FEASIBLE = DECISIONS.labels("filter", "feasible")
_FILTER_NO_FIT = DECISIONS.labels("filter", "no_fit")
_PRIORITIZE_SCORED = DECISIONS.labels("prioritize", "scored")
_UNKNOWN_NODES = FALLBACKS.labels("extender", "unknown_node")
_NO_POSITIONS: IntArray = np.zeros(0, dtype=np.int64)
_NO_POSITIONS.setflags(write=False)

Response = tuple[int, bytes]
ClaimRequests = Callable[[Mapping[str, Any]], PodRequest]
"""A pod → its request including the GPUs of its ResourceClaims."""
"""HTTP status and JSON body."""


# -- the handlers --------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidates:
    names: list[str]
    index: IntArray
    """ClusterState index of each candidate; -1 for a node the state does not know."""
    items: list[dict[str, Any]] | None
    """The full Node objects, when kube-scheduler sent them (not node-cache mode)."""
    unknown: IntArray
    """Positions of the candidates the state does not know."""


@dataclass(frozen=True)
class _Passed:
    """What filter last passed (NodeNames mode): prioritize usually asks about exactly
    those names, for the same pod, with nothing changed in between."""

    node_set: Sequence[str]
    """The state's ``node_names`` the mapping was made against (compared by identity)."""
    names: list[str]
    index: IntArray
    unknown: IntArray
    state: ClusterState
    """The state the fit was decided on (compared by identity)."""
    pod: tuple[str, str]
    """The pod's (uid, resourceVersion); its uid is never empty when ``request`` is set."""
    request: PodRequest | None
    """The translated pod; None when the fit may not be reused (unsupported pod, no uid)."""
    known: IntArray
    """The passed nodes the state knows (``index`` without the unknown ones)."""
    stamps: IntArray
    """``node_version`` of the ``known`` nodes when filter decided."""

    def still_fits(self, state: ClusterState, pod: tuple[str, str]) -> PodRequest | None:
        """The pod's request when every passed node still fits it: same pod, same state
        object, and none of those nodes changed since (their stamps are the same; every
        allocate, release and cordon renews a node's stamp). None otherwise."""
        if self.request is None or pod != self.pod or state is not self.state:
            return None
        if not (state.node_version[self.known] == self.stamps).all():
            return None
        return self.request


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
        self._passed: _Passed | None = None
        """What filter last passed: prioritize usually asks about exactly those names."""

    # -- filter ----------------------------------------------------------------------

    def filter(self, body: bytes) -> Response:
        """ExtenderArgs → ExtenderFilterResult."""
        args = parse_args(body)
        pod = _pod_key(args.pod)
        request = self._request(args.pod, pod)
        with self.view.locked() as (state, _):
            candidates = _candidates(state, args, None)
            if isinstance(request, UnsupportedPodError):
                passed = np.ones(len(candidates.names), dtype=bool)
                failed: dict[str, str] = {}
                unresolvable: dict[str, str] = {}
                self._fallback("filter", "unsupported_pod", request)
            else:
                passed, failed, unresolvable = _filter(state, request, candidates)
            memo: _Passed | None = None
            if candidates.items is None:  # NodeNames mode: keep the outcome for prioritize
                memo = self._passed = _passed(state, candidates, passed, pod, request)
        if candidates.unknown.size:
            _UNKNOWN_NODES.inc(candidates.unknown.size)
        result: dict[str, Any] = {
            "Nodes": None,
            "NodeNames": None,
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
        with self.view.locked() as (state, _):
            candidates = _candidates(state, args, passed)
            request: PodRequest | UnsupportedPodError | None = None
            if passed is not None and candidates.index is passed.index:
                request = passed.still_fits(state, pod)
            fits: BoolArray | None = None  # None: every known candidate fits
            if request is None:
                request = self._request(args.pod, pod)
                if not isinstance(request, UnsupportedPodError):
                    known = candidates.index >= 0
                    fits = known.copy()
                    fits[known] = state.feasible(request, candidates.index[known])
            if isinstance(request, UnsupportedPodError):
                scores = np.zeros(len(candidates.names), dtype=np.int64)
                self._fallback("prioritize", "unsupported_pod", request)
            else:
                scores = self._scores(state, request, candidates, fits)
            entries = self._entries(state, candidates, scores)
        _PRIORITIZE_SCORED.inc()
        return 200, b"[" + b",".join(entries) + b"]"

    def _entries(
        self, state: ClusterState, candidates: _Candidates, scores: IntArray
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
        candidates: _Candidates,
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
            raise ExtenderRequestError(f"Pod: {exc}") from exc
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


def _passed(
    state: ClusterState,
    candidates: _Candidates,
    passed: BoolArray,
    pod: tuple[str, str],
    request: PodRequest | UnsupportedPodError,
) -> _Passed:
    """Filter's outcome kept for prioritize; the fit is reusable only for a pod with a
    uid that the core models."""
    index = candidates.index[passed]
    known, unknown = index, _NO_POSITIONS
    if candidates.unknown.size:
        known, unknown = index[index >= 0], np.flatnonzero(index < 0)
    reusable = isinstance(request, PodRequest) and bool(pod[0])
    return _Passed(
        node_set=state.node_names,
        names=list(compress(candidates.names, passed.tolist())),
        index=index,
        unknown=unknown,
        state=state,
        pod=pod,
        request=request if reusable and isinstance(request, PodRequest) else None,
        known=known,
        stamps=state.node_version[known],
    )


# -- helpers ---------------------------------------------------------------------------


def _candidates(state: ClusterState, args: Args, known: _Passed | None) -> _Candidates:
    """The candidates mapped to state indices; ``known``: a mapping that may be reused.

    kube-scheduler sends prioritize the nodes that passed every filter, its extenders'
    included, in the order filter returned them — with kubesage as the only (or last)
    extender, exactly the list filter passed. Comparing the two lists (cache-hot
    strings) is several times cheaper than looking every name up again, and the
    mapping holds while the state's node set is the same object; any other list is
    looked up afresh.
    """
    items: list[dict[str, Any]] | None = None
    if args.node_names is not None:
        names = args.node_names
        if known is not None and known.node_set is state.node_names and known.names == names:
            return _Candidates(names=names, index=known.index, items=None, unknown=known.unknown)
    elif args.items is not None:
        items = args.items
        names = [_item_name(item, position) for position, item in enumerate(items)]
    else:
        raise ExtenderRequestError("ExtenderArgs: neither NodeNames nor Nodes is set")
    try:
        index = np.fromiter(
            map(state.node_index.get, names, repeat(-1)), dtype=np.int64, count=len(names)
        )
    except TypeError:  # an unhashable entry (a list or an object)
        raise ExtenderRequestError("ExtenderArgs.NodeNames: every entry must be a string") from None
    unknown = np.flatnonzero(index < 0)
    for position in unknown.tolist():
        if not isinstance(names[position], str):  # only a string can be a known name
            raise ExtenderRequestError(
                f"ExtenderArgs.NodeNames[{position}]: expected a string, "
                f"got {type(names[position]).__name__}"
            )
    return _Candidates(names=names, index=index, items=items, unknown=unknown)


def _item_name(item: dict[str, Any], position: int) -> str:
    metadata = item.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise ExtenderRequestError(
            f"ExtenderArgs: Nodes.items[{position}].metadata.name is missing"
        )
    return name


def _filter(
    state: ClusterState, request: PodRequest, candidates: _Candidates
) -> tuple[BoolArray, dict[str, str], dict[str, str]]:
    """Which candidates pass, and the fit rule's reason for each other known one, split
    into those preemption might fix and those it cannot."""
    index = candidates.index
    known: IntArray | None = None
    if candidates.unknown.size == 0:  # the usual case: the state knows every candidate
        report = fit_report(state, request, index)
        passed = report.fits
    else:
        known = np.flatnonzero(index >= 0)
        passed = np.ones(index.size, dtype=bool)  # unknown nodes pass through untouched
        if known.size == 0:
            return passed, {}, {}
        report = fit_report(state, request, index[known])
        passed[known] = report.fits
    if report.rejected.size == 0:
        return passed, {}, {}
    failing = report.rejected if known is None else known[report.rejected]
    names = candidates.names
    permanent = report.rejected_unresolvable
    if not permanent.any():
        return passed, _reasons(names, failing, report.rejected_words(REASON_PREFIX)), {}
    if permanent.all():
        return passed, {}, _reasons(names, failing, report.rejected_words(REASON_PREFIX))
    fixable = ~permanent
    return (
        passed,
        _reasons(names, failing[fixable], report.rejected_words(REASON_PREFIX, fixable)),
        _reasons(names, failing[permanent], report.rejected_words(REASON_PREFIX, permanent)),
    )


def _reasons(names: list[str], positions: IntArray, texts: list[str]) -> dict[str, str]:
    """``{name: reason}`` for the candidates at ``positions``, in their order."""
    return dict(zip(map(names.__getitem__, positions.tolist()), texts, strict=True))
