"""A hindsight search for the FGD protocol: placements chosen knowing every arrival.

The question it answers: how much better than FGD can *any* sequence of placements
do on this arrival sequence? Whatever placement sequence the search finds is a
feasible run of the same protocol (each pod, in arrival order, goes to a node that
fits it, or fails when none does; nothing moves or leaves), so its allocation is a
lower bound on the optimum.

The search is a rollout search over policy switches. It starts from FGD's own run.
At each checkpoint (the start, then arrived workload crossing 40 %, 60 %, … of GPU
capacity) it
tries every policy of a portfolio from that point to the end of the arrivals, from
the best run's state at that point, and keeps a switch only when the finished run
allocates strictly more GPU. So the result never falls below FGD's, and every switch
it keeps was judged on the true future. The portfolio is FGD variants that differ in
what they assume about the future (:func:`default_portfolio`): FGD itself, FGD with
another tie-break order, FGD whose typical pods are the *actual* remaining arrivals
(or the next thousand) instead of the whole workload's, and best fit.

Pods that fit are always placed (as in the protocol, a scheduler does not refuse a
pod it can place), so the search cannot hold room back by rejecting pods.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.policy.base import Policy, PolicyContext
from kubesage.core.policy.registry import make_policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import GPU_MILLI_PER_GPU, NodeSpec, Placement, PodRequest

PolicyFactory = Callable[[Sequence[PodRequest], int], Policy]
"""Builds a policy from the arrivals still to come and the run's seed."""

DEFAULT_CHECKPOINTS_PCT: tuple[float, ...] = (0.0, 40.0, 60.0, 75.0, 85.0, 95.0, 105.0, 115.0)
"""Arrived workload (% of GPU capacity) at which the search tries a switch (0: the start,
where a switch means running that policy throughout)."""
NEAR_FUTURE_PODS = 1000
"""Arrivals the ``fgd-next`` variant takes its typical pods from."""
TIE_SEED_OFFSET = 1_000_003
"""Shifts the tie-break seed of the ``fgd-ties`` variant away from the run's."""


def default_portfolio(workload: Sequence[PodRequest]) -> dict[str, PolicyFactory]:
    """FGD and the variants the search may switch to (``workload``: the pod list as given)."""

    def fgd(future: Sequence[PodRequest], seed: int) -> Policy:
        return make_policy("fgd", PolicyContext(seed=seed, workload=workload))

    def fgd_ties(future: Sequence[PodRequest], seed: int) -> Policy:
        return make_policy("fgd", PolicyContext(seed=seed + TIE_SEED_OFFSET, workload=workload))

    def fgd_future(future: Sequence[PodRequest], seed: int) -> Policy:
        return make_policy("fgd", PolicyContext(seed=seed, workload=_with_gpu(future, workload)))

    def fgd_next(future: Sequence[PodRequest], seed: int) -> Policy:
        near = _with_gpu(future[:NEAR_FUTURE_PODS], workload)
        return make_policy("fgd", PolicyContext(seed=seed, workload=near))

    def bestfit(future: Sequence[PodRequest], seed: int) -> Policy:
        return make_policy("bestfit", PolicyContext(seed=seed, workload=workload))

    def ppo(future: Sequence[PodRequest], seed: int) -> Policy:
        return make_policy("ppo", PolicyContext(seed=seed, workload=workload))

    return {
        "fgd": fgd,
        "ppo": ppo,
        "fgd-ties": fgd_ties,
        "fgd-future": fgd_future,
        "fgd-next": fgd_next,
        "bestfit": bestfit,
    }


def _with_gpu(pods: Sequence[PodRequest], fallback: Sequence[PodRequest]) -> Sequence[PodRequest]:
    """``pods`` when they hold a GPU request (FGD's typical pods need one), else ``fallback``."""
    return pods if any(pod.num_gpu for pod in pods) else fallback


@dataclass
class Rollout:
    """One run from some position to the end of the arrivals."""

    placements: list[Placement | None]
    """Per arrival from position 0 (None: failed)."""
    states: dict[int, ClusterState]
    """State before the arrival at each checkpoint position reached."""
    final: ClusterState

    @property
    def allocated_gpu_milli(self) -> int:
        return self.final.gpu_allocated_milli_total


@dataclass(frozen=True)
class Switch:
    position: int
    arrived_pct: float
    policy: str
    gain_gpu_milli: int
    """GPU the finished run gained over the best run before this switch."""


@dataclass(frozen=True)
class RunOutcome:
    """What a finished run left: its allocation, failures and free GPU."""

    allocation_pct: float
    failed_by_kind: dict[str, int]
    failed_gpu_by_kind: dict[str, float]
    """GPUs requested by the failed pods, per kind."""
    free_gpu_by_model: dict[str, float]
    """GPUs left free per GPU model."""


@dataclass(frozen=True)
class HindsightResult:
    base: RunOutcome
    """The base policy's own run (FGD's by default)."""
    hindsight: RunOutcome
    switches: tuple[Switch, ...]
    placements: tuple[Placement | None, ...]
    """The hindsight run: per arrival, where it went (None: it failed)."""
    placed_elsewhere: int
    """Pods placed by both runs but on a different node."""
    rollouts: int
    throughout: dict[str, float]
    """Allocation (%) of each portfolio policy run from the first arrival to the last."""


def pod_kind(pod: PodRequest) -> str:
    """``cpu``, ``share``, ``1gpu`` … ``8gpu``; ``+model`` when restricted to GPU models."""
    if pod.num_gpu == 0:
        kind = "cpu"
    elif pod.is_gpu_sharing:
        kind = "share"
    else:
        kind = f"{pod.num_gpu}gpu"
    return kind + ("+model" if pod.gpu_models else "")


def checkpoint_positions(
    arrivals: Sequence[PodRequest], capacity_milli: int, percents: Sequence[float]
) -> list[int]:
    """Arrival positions at which arrived GPU first reaches each percentage of capacity."""
    arrived = np.cumsum([pod.total_gpu_milli for pod in arrivals]) * 100.0 / capacity_milli
    positions = {0 if pct <= 0 else int(np.searchsorted(arrived, pct)) + 1 for pct in percents}
    return sorted(p for p in positions if p < len(arrivals))


def rollout(
    start: ClusterState,
    arrivals: Sequence[PodRequest],
    position: int,
    policy: Policy,
    checkpoints: Sequence[int],
) -> Rollout:
    """Run ``policy`` on a copy of ``start`` over ``arrivals[position:]`` (the protocol's
    arrive-or-fail, as :class:`~kubesage.core.sim.engine.Simulator` runs it)."""
    state = start.copy()
    placements: list[Placement | None] = [None] * position
    states: dict[int, ClusterState] = {}
    marks = set(checkpoints)
    for index in range(position, len(arrivals)):
        if index in marks:
            states[index] = state.copy()
        pod = arrivals[index]
        placement = policy.decide(state, pod).placement
        if placement is not None:
            state.allocate(pod, placement)
        placements.append(placement)
    return Rollout(placements, states, state)


def empty_cluster(
    nodes: Sequence[NodeSpec],
    arrivals: Sequence[PodRequest],
    portfolio: Mapping[str, PolicyFactory],
    base: str,
) -> ClusterState:
    """The empty cluster a switch search starts from, once its inputs are checked."""
    if base not in portfolio:
        raise InputError(f"the base policy '{base}' is not in the portfolio {sorted(portfolio)}")
    if not arrivals:
        raise InputError("the arrival sequence is empty")
    empty = ClusterState(nodes)
    if empty.gpu_capacity_milli_total == 0:
        raise InputError("the cluster has no GPUs: there is no GPU allocation to compare")
    return empty


def hindsight_search(
    nodes: Sequence[NodeSpec],
    arrivals: Sequence[PodRequest],
    *,
    seed: int,
    portfolio: Mapping[str, PolicyFactory],
    base: str = "fgd",
    checkpoints_pct: Sequence[float] = DEFAULT_CHECKPOINTS_PCT,
    progress: Callable[[str], None] | None = None,
) -> HindsightResult:
    """Search policy switches at checkpoints, knowing every arrival; never below ``base``."""
    empty = empty_cluster(nodes, arrivals, portfolio, base)
    capacity = empty.gpu_capacity_milli_total
    positions = checkpoint_positions(arrivals, capacity, checkpoints_pct)
    arrived = np.cumsum([0, *(pod.total_gpu_milli for pod in arrivals)]) * 100.0 / capacity
    first = rollout(empty, arrivals, 0, portfolio[base](arrivals, seed), positions)
    best = first
    switches: list[Switch] = []
    rollouts = 1
    throughout = {base: first.allocated_gpu_milli * 100.0 / capacity}
    for position in positions:
        future = arrivals[position:]
        later = [p for p in positions if p > position]
        for name, factory in portfolio.items():
            if position == 0 and name == base:
                continue  # that is the first run
            candidate = rollout(
                best.states[position], arrivals, position, factory(future, seed), later
            )
            rollouts += 1
            if position == 0:
                throughout[name] = candidate.allocated_gpu_milli * 100.0 / capacity
            gain = candidate.allocated_gpu_milli - best.allocated_gpu_milli
            if gain > 0:
                candidate.placements[:position] = best.placements[:position]
                candidate.states.update({p: s for p, s in best.states.items() if p <= position})
                best = candidate
                switches.append(Switch(position, float(arrived[position]), name, gain))
        if progress is not None:
            progress(
                f"checkpoint {arrived[position]:.0f} % arrived: "
                f"{best.allocated_gpu_milli * 100.0 / capacity:.3f} % allocated"
            )
    elsewhere = sum(
        1
        for a, b in zip(first.placements, best.placements, strict=True)
        if a is not None and b is not None and a.node_index != b.node_index
    )
    return HindsightResult(
        base=outcome(first, arrivals),
        hindsight=outcome(best, arrivals),
        switches=tuple(switches),
        placements=tuple(best.placements),
        placed_elsewhere=elsewhere,
        rollouts=rollouts,
        throughout=throughout,
    )


def outcome(run: Rollout, arrivals: Sequence[PodRequest]) -> RunOutcome:
    """Allocation, failures by pod kind and free GPUs by model of a finished run."""
    state = run.final
    failed: Counter[str] = Counter()
    failed_milli: Counter[str] = Counter()
    for pod, placement in zip(arrivals, run.placements, strict=True):
        if placement is None:
            failed[pod_kind(pod)] += 1
            failed_milli[pod_kind(pod)] += pod.total_gpu_milli
    free_node = state.gpu_free_milli.sum(axis=1)
    free_by_model = {
        model: float(free_node[state.gpu_model_index == index].sum()) / GPU_MILLI_PER_GPU
        for index, model in enumerate(state.gpu_models)
    }
    return RunOutcome(
        allocation_pct=state.gpu_allocation_ratio * 100.0,
        failed_by_kind=dict(sorted(failed.items())),
        failed_gpu_by_kind={k: v / GPU_MILLI_PER_GPU for k, v in sorted(failed_milli.items())},
        free_gpu_by_model=free_by_model,
    )
