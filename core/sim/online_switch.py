"""The hindsight search's online twin: the same policy switches, judged on sampled futures.

The hindsight search (:mod:`kubesage.core.sim.hindsight`) keeps a policy switch when
the finished run on the *true* remaining arrivals allocates more. An online scheduler
cannot see those arrivals; it knows the workload they are drawn from, as FGD does.
This search makes the same kind of choice with only that: at each checkpoint it runs
every policy of the portfolio from the current state over :data:`DEFAULT_FUTURES`
futures drawn from the workload (with replacement, as many pods as remain to arrive;
the same draws for every policy), switches to the policy with the best mean finished
allocation when it beats the current one, and then places the true arrivals with that
policy until the next checkpoint. The run it makes is a real run of the protocol that
looked at nothing it could not know.

Between FGD and the hindsight result it measures how much of the hindsight headroom an
online policy can reach with the same portfolio; what only the hindsight run reaches
was bought with knowledge of the future.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.policy.base import Policy
from kubesage.core.sim.hindsight import (
    DEFAULT_CHECKPOINTS_PCT,
    PolicyFactory,
    checkpoint_positions,
    empty_cluster,
    rollout,
)
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import NodeSpec, PodRequest

ONLINE_POLICIES = ("fgd", "ppo", "bestfit")
"""The hindsight portfolio's policies that read nothing of the true future: not
``fgd-future`` or ``fgd-next`` (their typical pods are the actual arrivals), and not
``fgd-ties`` (FGD in another tie order: on sampled futures a choice between the two is
a draw of noise)."""
DEFAULT_FUTURES = 2
"""Sampled futures per checkpoint."""
FUTURE_SEED_OFFSET = 500
"""Seeds the futures' draws away from the arrival order's seed."""


@dataclass(frozen=True)
class OnlineResult:
    """What the online search's run allocated, and which policy placed what."""

    allocation_pct: float
    """GPU allocated when the arrivals stop (% of capacity)."""
    policies: tuple[str, ...]
    """The policy that placed the arrivals from each checkpoint on."""
    rollouts: int


def online_switch_search(
    nodes: Sequence[NodeSpec],
    arrivals: Sequence[PodRequest],
    workload: Sequence[PodRequest],
    *,
    seed: int,
    portfolio: Mapping[str, PolicyFactory],
    base: str = "fgd",
    futures: int = DEFAULT_FUTURES,
    checkpoints_pct: Sequence[float] = DEFAULT_CHECKPOINTS_PCT,
) -> OnlineResult:
    """Place ``arrivals`` switching policies at checkpoints on sampled futures of
    ``workload`` (module docstring); ``base`` places them until a switch wins."""
    state = empty_cluster(nodes, arrivals, portfolio, base)
    if not workload:
        raise InputError("the workload to draw futures from is empty")
    if futures < 1:
        raise InputError(f"futures must be at least 1, got {futures}")
    capacity = state.gpu_capacity_milli_total
    positions = checkpoint_positions(arrivals, capacity, checkpoints_pct)
    rng = np.random.default_rng(seed + FUTURE_SEED_OFFSET)
    current = base
    chosen: list[str] = []
    rollouts = 0
    ends = [*positions, len(arrivals)]  # ends[0]: where the first checkpoint begins
    _place(state, arrivals[: ends[0]], portfolio[base](workload, seed))
    for position, end in zip(positions, ends[1:], strict=True):
        remaining = len(arrivals) - position
        drawn = [
            [workload[i] for i in rng.integers(len(workload), size=remaining)]
            for _ in range(futures)
        ]
        value: dict[str, float] = {}
        for name, factory in portfolio.items():
            finished = [
                rollout(state, future, 0, factory(future, seed), []).allocated_gpu_milli
                for future in drawn
            ]
            rollouts += len(drawn)
            value[name] = float(np.mean(finished))
        best = max(portfolio, key=lambda name: value[name])
        if value[best] > value[current]:
            current = best
        chosen.append(current)
        _place(state, arrivals[position:end], portfolio[current](workload, seed))
    return OnlineResult(
        allocation_pct=state.gpu_allocation_ratio * 100.0,
        policies=tuple(chosen),
        rollouts=rollouts,
    )


def _place(state: ClusterState, pods: Sequence[PodRequest], policy: Policy) -> None:
    """Place ``pods`` on ``state`` in order with ``policy`` (built from the workload,
    never from the true arrivals, whatever the portfolio holds)."""
    for pod in pods:
        placement = policy.decide(state, pod).placement
        if placement is not None:
            state.allocate(pod, placement)
