"""kube-scheduler extender protocol v1: the wire models and the filter/prioritize/bind handlers.

The models spell the JSON keys exactly as kube-scheduler writes them — the Go field
names of ``k8s.io/kube-scheduler/extender/v1`` (``ExtenderArgs{Pod, Nodes,
NodeNames}``, ``ExtenderFilterResult``, ``HostPriority{Host, Score}``,
``ExtenderBindingArgs``, ``ExtenderBindingResult``); like Go's decoder, the lower-case
spelling is accepted on input too.

The handlers work on a whole request at once: the pod is translated once (and kept
by uid and resourceVersion, so prioritize and bind reuse filter's work), the
candidate names are mapped to ClusterState indices through its name → index dict,
and the fit check and the policy's scores are numpy over the candidates only —
never over the whole cluster. Prioritize reuses what filter found for the same pod
and the same names (the index mapping, and the fit while none of those nodes has
changed since: their ``node_version`` stamps are compared). Responses are plain
dicts serialised by orjson — no per-node pydantic objects in the hot path; the
models describe and test the wire format.

What the handlers decide, and their fallbacks:

- **filter**: a candidate passes when the core's fit check passes (CPU, memory,
  GPU model, whole GPUs, GPU share, MIG slot). Failing nodes get a reason in words;
  those that preemption could never fix (too small, wrong GPU model or MIG mode)
  go to ``FailedAndUnresolvableNodes``. A node kubesage does not know yet (not
  synced) passes untouched — kube-scheduler has already run its own checks. A pod
  outside the core's model (:class:`UnsupportedPodError`) passes everywhere; both
  are counted as fallbacks.
- **prioritize**: the policy's scores of the feasible candidates, min-max scaled to
  integers 0..10 (``MaxExtenderPriority``): the best node always gets 10. Infeasible
  and unknown nodes get 0; if every feasible node scores the same, all get 10.
- **bind**: through the injected bind function (the Binding subresource, or the
  embedded cluster); a failure is an ``ExtenderBindingResult.Error``.

Malformed input raises :class:`ExtenderRequestError` (HTTP 400 in the server).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
import orjson
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from kubesage.core.errors import InputError, KubesageError
from kubesage.core.k8s.logging import log_event
from kubesage.core.k8s.metrics import BINDS, DECISIONS, FALLBACKS
from kubesage.core.k8s.translate import TranslateError, UnsupportedPodError, pod_request
from kubesage.core.policy.base import Policy, ScoringPolicy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import Placement, PodRequest

log = logging.getLogger(__name__)

MAX_EXTENDER_PRIORITY = 10
"""Highest score an extender may return (``extenderv1.MaxExtenderPriority``)."""
POD_CACHE_SIZE = 4096
"""Translated pods kept by (uid, resourceVersion) for prioritize and bind."""

_SCORES = range(MAX_EXTENDER_PRIORITY + 1)
# The hot path's metric children, looked up once (labels() costs a dict lookup and a lock).
_FILTER_FEASIBLE = DECISIONS.labels("filter", "feasible")
_FILTER_NO_FIT = DECISIONS.labels("filter", "no_fit")
_PRIORITIZE_SCORED = DECISIONS.labels("prioritize", "scored")
_UNKNOWN_NODES = FALLBACKS.labels("extender", "unknown_node")

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
ModelT = TypeVar("ModelT", bound=BaseModel)
Response = tuple[int, bytes]
"""HTTP status and JSON body."""


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


# -- collaborators -------------------------------------------------------------------


class ExtenderRequestError(InputError):
    """A request body the extender cannot read; the message names the field."""


class BindRefusedError(KubesageError):
    """A binding kubesage itself refuses (the pod does not fit, or is bound elsewhere)."""


class StateView(Protocol):
    """Consistent access to the cluster state (ClusterSync and the embedded cluster)."""

    def locked(self) -> AbstractContextManager[tuple[ClusterState, Sequence[str]]]:
        """Hold the state's lock; yield the state and its node names."""
        ...


@dataclass(frozen=True)
class BindTarget:
    """A pod to bind, with its translated request when filter or prioritize saw it."""

    namespace: str
    name: str
    uid: str
    node: str
    request: PodRequest | None


BindFunction = Callable[[BindTarget], None]
"""Binds a pod to a node or raises a KubesageError saying why not."""


class AssumingView(StateView, Protocol):
    """A state that can account a pod before the API shows it bound (ClusterSync)."""

    def assume(self, pod: Mapping[str, Any], request: PodRequest, placement: Placement) -> None:
        """Account ``pod`` at ``placement`` now."""
        ...

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Undo :meth:`assume` (the bind failed)."""
        ...


class PodBinder(Protocol):
    """Posts a Binding (kubesage.core.k8s.binder.Binder)."""

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        annotations: dict[str, str] | None = None,
    ) -> None:
        """Bind or raise a KubesageError."""
        ...


def assume_and_bind(view: AssumingView, binder: PodBinder, policy: Policy) -> BindFunction:
    """Bind through the API, accounting the pod in the state first (undone on failure).

    The GPUs the policy picks are recorded on the pod by the binder's annotations, so
    the state rebuilt from the API later agrees with this one. A pod filter never saw
    (no request known) is bound without accounting; the watch accounts it.
    """

    # Imported on use: only the live-cluster path needs the Kubernetes client.
    from kubesage.core.k8s.binder import placement_annotations

    def bind(target: BindTarget) -> None:
        pod = {"metadata": {"uid": target.uid, "namespace": target.namespace, "name": target.name}}
        placement: Placement | None = None
        if target.request is not None and isinstance(policy, ScoringPolicy):
            with view.locked() as (state, _):
                node = state.node_index.get(target.node)
                if node is None or not state.feasible(target.request, np.array([node]))[0]:
                    raise BindRefusedError(
                        f"pod {target.namespace}/{target.name} no longer fits on {target.node}"
                    )
                placement = policy.placement_on(state, node, target.request)
                view.assume(pod, target.request, placement)
        try:
            binder.bind(
                target.namespace,
                target.name,
                target.uid,
                target.node,
                annotations=placement_annotations(placement) if placement else None,
            )
        except KubesageError:
            if placement is not None:
                view.forget(pod)
            raise

    return bind


class LockedState:
    """A ClusterState behind a lock: the :class:`StateView` of a state owned here."""

    def __init__(self, state: ClusterState):
        self.state = state
        self._lock = threading.RLock()

    def locked(self) -> AbstractContextManager[tuple[ClusterState, Sequence[str]]]:
        return self._hold()

    def _hold(self) -> _Held:
        return _Held(self._lock, self.state)


class _Held:
    def __init__(self, lock: threading.RLock, state: ClusterState):
        self._lock = lock
        self._state = state

    def __enter__(self) -> tuple[ClusterState, Sequence[str]]:
        self._lock.acquire()
        return self._state, self._state.node_names

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


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
        if not np.array_equal(state.node_version[self.known], self.stamps):
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
    ):
        self.view = view
        self.policy = policy
        self._bind = bind
        self._pods: OrderedDict[tuple[str, str], PodRequest | UnsupportedPodError] = OrderedDict()
        self._pods_by_uid: OrderedDict[str, PodRequest] = OrderedDict()
        self._pod_cache_size = pod_cache_size
        self._pods_lock = threading.Lock()
        self._entry_table: npt.NDArray[np.object_] = np.array([], dtype=object)
        self._entries_of: Sequence[str] | None = None
        self._passed: _Passed | None = None
        """What filter last passed: prioritize usually asks about exactly those names."""

    # -- filter ----------------------------------------------------------------------

    def filter(self, body: bytes) -> Response:
        """ExtenderArgs → ExtenderFilterResult."""
        args = _parse_args(body)
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
        args = _parse_args(body)
        pod = _pod_key(args.pod)
        passed = self._passed
        with self.view.locked() as (state, _):
            candidates = _candidates(state, args, passed)
            known = candidates.index >= 0
            request: PodRequest | UnsupportedPodError | None = None
            if passed is not None and candidates.index is passed.index:
                request = passed.still_fits(state, pod)  # every known candidate fits
            if request is not None:
                fits = known
            else:
                request = self._request(args.pod, pod)
                fits = known.copy()
                if not isinstance(request, UnsupportedPodError):
                    fits[known] = state.feasible(request, candidates.index[known])
            if isinstance(request, UnsupportedPodError):
                scores = np.zeros(len(candidates.names), dtype=np.int64)
                self._fallback("prioritize", "unsupported_pod", request)
            else:
                scores = self._scores(state, request, candidates.index, fits)
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
        self, state: ClusterState, request: PodRequest, index: IntArray, fits: BoolArray
    ) -> IntArray:
        """Scores 0..10 of the candidates that fit (``fits``); 0 for the others."""
        scores = np.zeros(index.size, dtype=np.int64)
        positions = np.flatnonzero(fits)
        if positions.size == 0:
            return scores
        nodes = index[positions]
        if isinstance(self.policy, ScoringPolicy):
            raw = np.asarray(self.policy.score(state, request, nodes), dtype=np.float64)
            scores[positions] = scale_scores(raw)
        else:
            # A policy without per-node scores: its chosen node gets the top score.
            decision = self.policy.decide(state, request)
            if decision.placement is not None:
                scores[positions[nodes == decision.placement.node_index]] = MAX_EXTENDER_PRIORITY
        return scores

    # -- bind ------------------------------------------------------------------------

    def bind(self, body: bytes) -> Response:
        """ExtenderBindingArgs → ExtenderBindingResult (Error empty on success)."""
        args = _parse(ExtenderBindingArgs, body)
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
        try:
            outcome = pod_request(pod)
        except UnsupportedPodError as exc:
            outcome = exc
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
    known = index[index >= 0]
    reusable = isinstance(request, PodRequest) and bool(pod[0])
    return _Passed(
        node_set=state.node_names,
        names=list(compress(candidates.names, passed.tolist())),
        index=index,
        unknown=np.flatnonzero(index < 0),
        state=state,
        pod=pod,
        request=request if reusable and isinstance(request, PodRequest) else None,
        known=known,
        stamps=state.node_version[known],
    )


def scale_scores(raw: npt.NDArray[np.float64]) -> IntArray:
    """Min-max scale to integers 0..10; the best is always 10, all-equal scores all 10."""
    if raw.size and np.isfinite(raw).all():  # the usual case: no NaN bookkeeping
        low, high = raw.min(), raw.max()
        if high <= low:
            return np.full(raw.size, MAX_EXTENDER_PRIORITY, dtype=np.int64)
        fast: IntArray = np.rint((raw - low) / (high - low) * MAX_EXTENDER_PRIORITY).astype(
            np.int64
        )
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


# -- helpers -------------------------------------------------------------------------


class _Args(NamedTuple):
    """ExtenderArgs as the handlers read it (the wire model is :class:`ExtenderArgs`)."""

    pod: dict[str, Any]
    node_names: list[Any] | None
    """As sent; entries are checked in :func:`_candidates`."""
    items: list[dict[str, Any]] | None
    """``Nodes.items`` when NodeNames is absent."""


def _parse_args(body: bytes) -> _Args:
    """Read ExtenderArgs fast: orjson and a shape check instead of model validation.

    Validating 10,000 node names through pydantic costs ~1.5 ms a request, and even
    ``model_construct`` costs more than this tuple; the checks here reject the same
    malformed shapes as the model (names are checked in :func:`_candidates`).
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
    nodes = _go_field(document, "Nodes")
    items = None
    if names is not None and not isinstance(names, list):
        raise ExtenderRequestError("ExtenderArgs.NodeNames: expected a list of node names")
    if names is None and nodes is not None:
        items = nodes.get("items") if isinstance(nodes, dict) else None
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ExtenderRequestError("ExtenderArgs.Nodes.items: expected a list of v1 Nodes")
    return _Args(pod, names, items)


def _go_field(document: dict[str, Any], name: str) -> Any:
    """``document[name]``, matching the key case-insensitively as Go's decoder does."""
    if name in document:
        return document[name]
    folded = name.lower()
    for key, value in document.items():
        if isinstance(key, str) and key.lower() == folded:
            return value
    return None


def _parse(model: type[ModelT], body: bytes) -> ModelT:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise ExtenderRequestError(f"{model.__name__}: {_describe(exc)}") from None


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False)[:3]:
        location = ".".join(str(part) for part in error["loc"])
        problems.append(f"{location}: {error['msg']}" if location else str(error["msg"]))
    more = exc.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def _candidates(state: ClusterState, args: _Args, known: _Passed | None) -> _Candidates:
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


@dataclass(frozen=True)
class _Check:
    fails: BoolArray
    """Over the failing candidates: does this check rule the node out?"""
    reason: str
    unresolvable: bool


def _filter(
    state: ClusterState, request: PodRequest, candidates: _Candidates
) -> tuple[BoolArray, dict[str, str], dict[str, str]]:
    index = candidates.index
    known = index >= 0
    passed = ~known  # unknown nodes pass through untouched
    passed[known] = state.feasible(request, index[known])
    failing = np.flatnonzero(~passed)
    if failing.size == 0:
        return passed, {}, {}
    nodes = index[failing]
    checks = _checks(state, request, nodes)
    # Each failing node's first failing check; one that fails none (feasible by parts
    # but not together cannot happen) gets the last, generic reason rather than a crash.
    fails = np.array([check.fails for check in checks] + [np.ones(failing.size, dtype=bool)])
    reasons = fails.argmax(axis=0)
    texts = np.array([check.reason for check in checks] + ["does not fit (kubesage)"], dtype=object)
    permanent = np.array([check.unresolvable for check in checks] + [False])
    failing_names = list(compress(candidates.names, (~passed).tolist()))
    permanent_of = permanent[reasons]
    if not permanent_of.any():
        return passed, dict(zip(failing_names, texts[reasons].tolist(), strict=True)), {}
    return (
        passed,
        _reasons(failing_names, ~permanent_of, texts[reasons]),
        _reasons(failing_names, permanent_of, texts[reasons]),
    )


def _reasons(
    names: list[str], selected: BoolArray, texts: npt.NDArray[np.object_]
) -> dict[str, str]:
    """``{name: reason}`` for the selected failing nodes."""
    return dict(zip(compress(names, selected.tolist()), texts[selected].tolist(), strict=True))


def _checks(state: ClusterState, request: PodRequest, nodes: IntArray) -> list[_Check]:
    """Why each failing node fails, cheapest explanation first; permanent ones first."""
    checks = [
        _Check(
            state.cpu_capacity_milli[nodes] < request.cpu_milli,
            f"kubesage: allocatable CPU is below the pod's {request.cpu_milli}m",
            True,
        ),
        _Check(
            state.memory_capacity_mib[nodes] < request.memory_mib,
            f"kubesage: allocatable memory is below the pod's {request.memory_mib}Mi",
            True,
        ),
    ]
    if request.num_gpu:
        models = ", ".join(request.gpu_models) if request.gpu_models else "any"
        checks.append(
            _Check(
                ~state.gpu_model_mask(request.gpu_models)[nodes],
                f"kubesage: no GPU of an allowed model ({models})",
                True,
            )
        )
        mig_nodes = state.node_mig_enabled[nodes]
        if request.mig is not None:
            checks.append(_Check(~mig_nodes, "kubesage: GPUs are not in MIG mode (MIG pod)", True))
        else:
            checks.append(
                _Check(mig_nodes, "kubesage: GPUs are in MIG mode (pod is not MIG)", True)
            )
            checks.append(
                _Check(
                    state.gpu_count[nodes] < request.num_gpu,
                    f"kubesage: fewer than {request.num_gpu} GPUs on the node",
                    True,
                )
            )
    checks.append(
        _Check(
            state.cpu_free_milli[nodes] < request.cpu_milli,
            f"kubesage: insufficient free CPU for {request.cpu_milli}m",
            False,
        )
    )
    checks.append(
        _Check(
            state.memory_free_mib[nodes] < request.memory_mib,
            f"kubesage: insufficient free memory for {request.memory_mib}Mi",
            False,
        )
    )
    if request.mig is not None:
        no_slot: BoolArray = ~np.asarray(state.mig_slots(request.mig, nodes).any(axis=(1, 2)))
        checks.append(
            _Check(no_slot, f"kubesage: no free MIG slot for {request.mig.profile}", False)
        )
    elif request.is_gpu_sharing:
        checks.append(
            _Check(
                state.gpu_max_free_milli[nodes] < request.gpu_milli,
                f"kubesage: no GPU with {request.gpu_milli} milli-GPU free",
                False,
            )
        )
    elif request.num_gpu:
        checks.append(
            _Check(
                state.gpu_whole_free_count[nodes] < request.num_gpu,
                f"kubesage: fewer than {request.num_gpu} wholly free GPUs",
                False,
            )
        )
    return checks
