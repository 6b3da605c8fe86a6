"""The extender's candidates: node names mapped to ClusterState indices, filter's fit
with the reasons in words, and what filter passed (kept for the prioritize after it).

The handlers are :mod:`kubesage.core.k8s.extender`; this module is their per-request
work over the candidate nodes, numpy over the candidates only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any

import numpy as np

from kubesage.core.arrays import BoolArray, IntArray
from kubesage.core.k8s.extender_wire import Args, ExtenderRequestError
from kubesage.core.k8s.translate import UnsupportedPodError
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fit import fit_report
from kubesage.core.types import PodRequest

REASON_PREFIX = "kubesage: "
"""Starts every filter failure reason, so users see which extender said no."""
_NO_POSITIONS: IntArray = np.zeros(0, dtype=np.int64)
_NO_POSITIONS.setflags(write=False)


@dataclass(frozen=True)
class Candidates:
    names: list[str]
    index: IntArray
    """ClusterState index of each candidate; -1 for a node the state does not know."""
    items: list[dict[str, Any]] | None
    """The full Node objects, when kube-scheduler sent them (not node-cache mode)."""
    unknown: IntArray
    """Positions of the candidates the state does not know."""


@dataclass(frozen=True)
class Passed:
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


def passed_of(
    state: ClusterState,
    candidates: Candidates,
    passed: BoolArray,
    pod: tuple[str, str],
    request: PodRequest | UnsupportedPodError,
) -> Passed:
    """Filter's outcome kept for prioritize; the fit is reusable only for a pod with a
    uid that the core models."""
    index = candidates.index[passed]
    known, unknown = index, _NO_POSITIONS
    if candidates.unknown.size:
        known, unknown = index[index >= 0], np.flatnonzero(index < 0)
    reusable = isinstance(request, PodRequest) and bool(pod[0])
    return Passed(
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


def map_candidates(state: ClusterState, args: Args, known: Passed | None) -> Candidates:
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
            return Candidates(names=names, index=known.index, items=None, unknown=known.unknown)
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
    return Candidates(names=names, index=index, items=items, unknown=unknown)


def _item_name(item: dict[str, Any], position: int) -> str:
    metadata = item.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise ExtenderRequestError(
            f"ExtenderArgs: Nodes.items[{position}].metadata.name is missing"
        )
    return name


def filter_candidates(
    state: ClusterState, request: PodRequest, candidates: Candidates
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
