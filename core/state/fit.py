"""The fit rule: can a pod go on a node right now, and if not, why.

This module is the one place that answers the question, for the simulator, every
policy, the PPO candidate list and the scheduler extender's filter:

- :func:`fit_mask` — a boolean mask over nodes (all of them, or a given subset), the
  hot path: it is asked once per decision.
- :func:`fit_report` — the same mask and, for every node that does not fit, the
  first check it fails as a :class:`FitCheck` code: data, not only words, so a
  caller can count the reasons or tell "too small" from "full right now".

A node fits a request when its free CPU and memory cover the request and, for a
GPU request, its GPU model is allowed and its GPUs are in the right mode: a MIG
request needs a MIG-mode node with a free slot for the profile; any other GPU
request needs a node not in MIG mode with one GPU that has the share free (a
sharing pod) or enough wholly free GPUs (whole-GPU pods).

The reasons are asked in :class:`FitCheck` order: first what could never change
while the node stays as it is (its capacity, GPU model, GPU mode and count — the
kube-scheduler extender calls these *unresolvable*: preempting pods cannot fix
them), then what is free right now. Every check that a rejected node fails is
implied by one of the fit conditions above or is one of them, so a node has a
reason exactly when it does not fit (``tests/core/state/test_fit_agreement.py``
checks this on random clusters, together with every path that uses the rule).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kubesage.core.arrays import BoolArray, IntArray
from kubesage.core.types import PodRequest

if TYPE_CHECKING:
    from kubesage.core.state.cluster_state import ClusterState

ReasonArray = npt.NDArray[np.int8]
"""A :class:`FitCheck` code per node; :data:`NO_REASON` where the node fits."""

NO_REASON = 0
"""The reason code of a node that fits."""


class FitCheck(IntEnum):
    """Why a node cannot host a pod: one check of the fit rule.

    The values are stable codes (they may be stored or compared across versions);
    their order is the order the checks are asked, so a node's reason is the first
    one it fails.
    """

    CPU_CAPACITY = 1
    """The node's allocatable CPU is below the request."""
    MEMORY_CAPACITY = 2
    """The node's allocatable memory is below the request."""
    GPU_MODEL = 3
    """The node has no GPU of a model the pod allows (or no GPU at all)."""
    NOT_MIG_MODE = 4
    """A MIG request, and the node's GPUs are not in MIG mode."""
    MIG_MODE = 5
    """A whole-GPU or sharing request, and the node's GPUs are in MIG mode."""
    GPU_COUNT = 6
    """The node has fewer GPUs than the pod asks for."""
    CPU_FREE = 7
    """Not enough CPU free right now."""
    MEMORY_FREE = 8
    """Not enough memory free right now."""
    MIG_SLOT = 9
    """No free slot for the pod's MIG profile on any of the node's GPUs."""
    GPU_SHARE = 10
    """No single GPU has the pod's share free."""
    WHOLE_GPUS = 11
    """Fewer wholly free GPUs than the pod asks for."""

    @property
    def unresolvable(self) -> bool:
        """Whether preempting pods could never make the node fit (capacity, model, mode)."""
        return self <= FitCheck.GPU_COUNT

    def words(self, request: PodRequest) -> str:
        """The reason in words, with the request's amounts."""
        return _WORDS[self](request)


def _models(request: PodRequest) -> str:
    return ", ".join(request.gpu_models) if request.gpu_models else "any"


def _profile(request: PodRequest) -> str:
    return request.mig.profile if request.mig is not None else "the MIG profile"


_WORDS: dict[FitCheck, Callable[[PodRequest], str]] = {
    FitCheck.CPU_CAPACITY: lambda r: f"allocatable CPU is below the pod's {r.cpu_milli}m",
    FitCheck.MEMORY_CAPACITY: lambda r: f"allocatable memory is below the pod's {r.memory_mib}Mi",
    FitCheck.GPU_MODEL: lambda r: f"no GPU of an allowed model ({_models(r)})",
    FitCheck.NOT_MIG_MODE: lambda r: "GPUs are not in MIG mode (MIG pod)",
    FitCheck.MIG_MODE: lambda r: "GPUs are in MIG mode (pod is not MIG)",
    FitCheck.GPU_COUNT: lambda r: f"fewer than {r.num_gpu} GPUs on the node",
    FitCheck.CPU_FREE: lambda r: f"insufficient free CPU for {r.cpu_milli}m",
    FitCheck.MEMORY_FREE: lambda r: f"insufficient free memory for {r.memory_mib}Mi",
    FitCheck.MIG_SLOT: lambda r: f"no free MIG slot for {_profile(r)}",
    FitCheck.GPU_SHARE: lambda r: f"no GPU with {r.gpu_milli} milli-GPU free",
    FitCheck.WHOLE_GPUS: lambda r: f"fewer than {r.num_gpu} wholly free GPUs",
}

_CHECKS = tuple(sorted(FitCheck))
"""Every check by code: ``_CHECKS[code - 1]``."""
_UNRESOLVABLE: BoolArray = np.array([False] + [check.unresolvable for check in _CHECKS])
"""``_UNRESOLVABLE[code]``: indexed by reason code (0: fits)."""
# The codes as plain ints for the hot path (numpy converts an IntEnum member slowly).
(
    _CPU_CAPACITY,
    _MEMORY_CAPACITY,
    _GPU_MODEL,
    _NOT_MIG_MODE,
    _MIG_MODE,
    _GPU_COUNT,
    _CPU_FREE,
    _MEMORY_FREE,
    _MIG_SLOT,
    _GPU_SHARE,
    _WHOLE_GPUS,
) = (int(check) for check in _CHECKS)


@dataclass(frozen=True)
class FitReport:
    """Which nodes fit a request, and the first check each other node fails."""

    request: PodRequest
    fits: BoolArray
    """Over the nodes asked about, in their order."""
    reasons: ReasonArray
    """A :class:`FitCheck` code per node; :data:`NO_REASON` exactly where it fits."""
    rejected: IntArray
    """Positions of the nodes that do not fit, in order (``flatnonzero(~fits)``)."""
    rejected_reasons: ReasonArray
    """The codes of the ``rejected`` nodes (``reasons[rejected]``): what a caller that
    only reports the rejected nodes (the extender's filter) reads, with no gather over
    every node."""
    _tables: dict[str, npt.NDArray[np.object_]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Words by reason code, by prefix (built on first use)."""

    def reason(self, position: int) -> FitCheck | None:
        """The reason of the node at ``position`` (None when it fits)."""
        code = int(self.reasons[position])
        return None if code == NO_REASON else FitCheck(code)

    @property
    def unresolvable(self) -> BoolArray:
        """Nodes rejected for a reason preemption cannot fix."""
        result: BoolArray = _UNRESOLVABLE[self.reasons]
        return result

    @property
    def rejected_unresolvable(self) -> BoolArray:
        """:attr:`unresolvable` of the ``rejected`` nodes only."""
        result: BoolArray = _UNRESOLVABLE[self.rejected_reasons]
        return result

    def words(self, prefix: str = "") -> npt.NDArray[np.object_]:
        """Each node's reason in words, after ``prefix``; ``""`` where it fits."""
        words: npt.NDArray[np.object_] = self._word_table(prefix)[self.reasons]
        return words

    def rejected_words(self, prefix: str = "", which: BoolArray | None = None) -> list[str]:
        """The reason in words (after ``prefix``) of each ``rejected`` node, in order;
        with ``which`` (a mask over ``rejected``), of the selected ones only."""
        codes = self.rejected_reasons if which is None else self.rejected_reasons[which]
        words: list[str] = self._word_table(prefix)[codes].tolist()
        return words

    def _word_table(self, prefix: str) -> npt.NDArray[np.object_]:
        """Words by reason code (``""`` for :data:`NO_REASON`)."""
        table = self._tables.get(prefix)
        if table is None:
            table = self._tables[prefix] = word_table(self.request, prefix)
        return table

    def counts(self) -> dict[FitCheck, int]:
        """How many nodes fail for each reason, most common first."""
        tally = np.bincount(self.reasons, minlength=len(_CHECKS) + 1)
        tally[NO_REASON] = 0
        codes = np.lexsort((np.arange(tally.size), -tally))  # ties: the earlier check first
        return {_CHECKS[code - 1]: int(tally[code]) for code in codes.tolist() if tally[code]}

    def summary(self, limit: int = 3) -> str:
        """The most common reasons with their node counts, on one line."""
        counts = self.counts()
        parts = [
            f"{check.words(self.request)} ({count} node{'' if count == 1 else 's'})"
            for check, count in list(counts.items())[:limit]
        ]
        more = len(counts) - limit
        return "; ".join(parts) + (f"; {more} other reason(s)" if more > 0 else "")


WORD_TABLES_KEPT = 1024
"""Request shapes whose reasons in words are kept (all dropped past that)."""
_WORD_TABLES: dict[tuple[object, ...], npt.NDArray[np.object_]] = {}


def word_table(request: PodRequest, prefix: str = "") -> npt.NDArray[np.object_]:
    """Every reason of ``request`` in words after ``prefix``, by code (``""`` at
    :data:`NO_REASON`); read-only, shared by the requests of one shape.

    The extender's filter words the reasons of a few hundred nodes on every call;
    the words depend only on the amounts the request asks for, so they are made once
    per shape rather than once per call.
    """
    mig = request.mig.profile if request.mig is not None else None
    key = (prefix, request.cpu_milli, request.memory_mib, request.num_gpu, request.gpu_milli,
           request.gpu_models, mig)  # fmt: skip
    table = _WORD_TABLES.get(key)
    if table is None:
        table = np.array([""] + [prefix + check.words(request) for check in _CHECKS], dtype=object)
        table.setflags(write=False)
        if len(_WORD_TABLES) >= WORD_TABLES_KEPT:
            _WORD_TABLES.clear()
        _WORD_TABLES[key] = table
    return table


def fit_mask(state: ClusterState, request: PodRequest, nodes: IntArray | None = None) -> BoolArray:
    """Boolean mask over nodes that can host ``request`` right now.

    With ``nodes`` (valid indices) the mask is over those nodes only, in their
    order: the extender asks about a few hundred candidates of a large cluster, and
    indexing their columns costs less than the whole-cluster mask. Asked about most
    of the cluster it computes the whole mask and indexes it (contiguous arrays beat
    gathering nearly every row).
    """
    if nodes is not None and nodes.size * 4 > state.num_nodes:
        whole: BoolArray = fit_mask(state, request)[nodes]
        return whole

    def column(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return values if nodes is None else values[nodes]

    fits: BoolArray = (column(state.cpu_free_milli) >= request.cpu_milli) & (
        column(state.memory_free_mib) >= request.memory_mib
    )
    if request.num_gpu == 0:
        return fits
    fits &= column(state.gpu_model_mask(request.gpu_models))
    mig_enabled = column(state.node_mig_enabled)
    if request.mig is not None:
        slots = state.mig_slots(request.mig, nodes).any(axis=(1, 2))
        result: BoolArray = fits & mig_enabled & slots
        return result
    fits &= ~mig_enabled
    if request.is_gpu_sharing:
        fits &= column(state.gpu_max_free_milli) >= request.gpu_milli
    else:
        fits &= column(state.gpu_whole_free_count) >= request.num_gpu
    return fits


def fit_report(
    state: ClusterState, request: PodRequest, nodes: IntArray | None = None
) -> FitReport:
    """:func:`fit_mask` with the reason of every node that does not fit.

    The checks run on the rejected nodes only, so a report costs little more than
    the mask when most nodes fit.
    """
    fits = fit_mask(state, request, nodes)
    rejected = (~fits).nonzero()[0]  # flatnonzero's work without its Python wrapper
    reasons = np.zeros(fits.size, dtype=np.int8)
    if rejected.size:
        codes = _first_failures(state, request, rejected if nodes is None else nodes[rejected])
        reasons[rejected] = codes
    else:
        codes = reasons[:0]
    return FitReport(
        request=request, fits=fits, reasons=reasons, rejected=rejected, rejected_reasons=codes
    )


CAPACITY_SHAPES_KEPT = 1024
"""Request shapes whose capacity checks a state keeps (all dropped past that)."""


def _first_failures(state: ClusterState, request: PodRequest, nodes: IntArray) -> ReasonArray:
    """The code of the first check each of ``nodes`` (all rejected) fails."""
    # The capacity checks come first (FitCheck order) and never change for a node, so
    # their outcome over the whole cluster is kept per request shape: the extender's
    # filter then gathers one array instead of running five checks per call.
    first = _capacity_failures(state, request)[nodes]
    free = _first_of(_free_checks(state, request, nodes), nodes.size)
    np.putmask(free, first != 0, first)
    if not free.all():
        # The checks include every condition of fit_mask, so a rejected node fails one.
        raise AssertionError(f"{request.name}: the fit rule rejects a node no check explains")
    return free


def _capacity_failures(state: ClusterState, request: PodRequest) -> ReasonArray:
    """Every node's first failing capacity check (model, mode, sizes); 0: none fails."""
    mig = request.mig is not None
    key = ("fit", request.cpu_milli, request.memory_mib, request.num_gpu, request.gpu_models, mig)
    cache = state.capacity_cache
    codes: ReasonArray | None = cache.get(key)
    if codes is None:
        if len(cache) >= CAPACITY_SHAPES_KEPT:
            cache.clear()
        codes = _first_of(_capacity_checks(state, request), state.num_nodes)
        codes.setflags(write=False)
        cache[key] = codes
    return codes


def _capacity_checks(state: ClusterState, request: PodRequest) -> list[tuple[int, BoolArray]]:
    """The checks preemption cannot change (:attr:`FitCheck.unresolvable`), all nodes."""
    checks: list[tuple[int, BoolArray]] = [
        (_CPU_CAPACITY, state.cpu_capacity_milli < request.cpu_milli),
        (_MEMORY_CAPACITY, state.memory_capacity_mib < request.memory_mib),
    ]
    if request.num_gpu:
        checks.append((_GPU_MODEL, ~state.gpu_model_mask(request.gpu_models)))
        if request.mig is not None:
            checks.append((_NOT_MIG_MODE, ~state.node_mig_enabled))
        else:
            checks.append((_MIG_MODE, state.node_mig_enabled))
            checks.append((_GPU_COUNT, state.gpu_count < request.num_gpu))
    return checks


def _free_checks(
    state: ClusterState, request: PodRequest, nodes: IntArray
) -> list[tuple[int, BoolArray]]:
    """The checks on what is free right now, over ``nodes``."""
    checks: list[tuple[int, BoolArray]] = [
        (_CPU_FREE, state.cpu_free_milli[nodes] < request.cpu_milli),
        (_MEMORY_FREE, state.memory_free_mib[nodes] < request.memory_mib),
    ]
    if request.mig is not None:
        no_slot: BoolArray = ~np.asarray(state.mig_slots(request.mig, nodes).any(axis=(1, 2)))
        checks.append((_MIG_SLOT, no_slot))
    elif request.is_gpu_sharing:
        checks.append((_GPU_SHARE, state.gpu_max_free_milli[nodes] < request.gpu_milli))
    elif request.num_gpu:
        checks.append((_WHOLE_GPUS, state.gpu_whole_free_count[nodes] < request.num_gpu))
    return checks


def _first_of(checks: list[tuple[int, BoolArray]], size: int) -> ReasonArray:
    """The code of the first of ``checks`` each position fails; 0 where none does."""
    first: ReasonArray = np.zeros(size, dtype=np.int8)
    # The last check first, so a position keeps the code of the first check it fails:
    # cheaper than stacking the checks and taking argmax over them (the filter's hot path).
    for code, failing in reversed(checks):
        np.putmask(first, failing, code)
    return first
