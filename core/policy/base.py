"""The one shape every scheduling policy has.

:class:`Policy` is what the simulator and the live path call: ``decide`` places one
request on the whole cluster (the simulator, gangs); ``score_nodes`` ranks a given
set of feasible nodes (the extender's prioritize, where kube-scheduler chose the
candidates) and ``placement_on`` says where on a chosen node the pod goes (the GPUs
or MIG slot a bind records in the state before the API call).

:class:`ScoringPolicy` implements all three from one node score: it scores every
feasible node for a request at once (numpy, O(N)), the best score wins, and the
policy then picks the GPUs inside that node. Ties between nodes are broken by a
fixed random order of the nodes drawn from the run's seed — the paper's simulator
does the same by prefixing node names with a random permutation and taking the
smallest name — so a run is reproducible and no node is favoured by its position
in the input. Which nodes are feasible, and why the others are not, is the fit rule
of :mod:`kubesage.core.state.fit`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.policy.gpu_choice import lowest_index_gpus, placement_on
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fit import fit_report
from kubesage.core.types import Decision, Placement, PodRequest

_TIE_STREAM = 0x7E
"""Keeps the tie-break order's random stream apart from the policy's own draws."""


@runtime_checkable
class Policy(Protocol):
    """Decides where one request goes, given the current cluster state."""

    @property
    def name(self) -> str:
        """The registered policy name."""
        ...

    def decide(self, state: ClusterState, request: PodRequest) -> Decision:
        """Return a Decision; ``placement`` is None when no node can host the request."""
        ...

    def score_nodes(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        """Scores (higher is better) of ``nodes``, each of which fits ``request``.

        Ranks them as :meth:`decide` would: asked about every feasible node, the node
        ``decide`` picks has the highest score.
        """
        ...

    def placement_on(self, state: ClusterState, node: int, request: PodRequest) -> Placement:
        """Where on ``node`` (which fits ``request``) the pod goes: its GPUs or MIG slot."""
        ...


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may learn about the run when it is built."""

    seed: int = 0
    """Seeds the policy's random choices and its tie-break order."""
    workload: Sequence[PodRequest] = field(default_factory=tuple)
    """The workload as given (before any inflation); FGD derives typical pods from it."""
    model: Path | None = None
    """A learned policy's model file (None: its shipped default)."""


class ScoringPolicy(ABC):
    """A policy defined by a node score and a GPU choice; the rest is shared."""

    name: ClassVar[str]

    def __init__(self, context: PolicyContext):
        self.context = context
        self.rng = np.random.default_rng(context.seed)
        self._tie_rank: IntArray | None = None

    @abstractmethod
    def score(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        """Scores (higher is better) of the feasible ``nodes`` for ``request``."""

    def score_nodes(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        """:meth:`score` as float64 (the :class:`Policy` interface)."""
        return np.asarray(self.score(state, request, nodes), dtype=np.float64)

    def choose_gpus(self, state: ClusterState, node: int, request: PodRequest) -> tuple[int, ...]:
        """GPU indices on ``node`` for ``request``; the default is :func:`lowest_index_gpus`."""
        return lowest_index_gpus(state, node, request)

    def placement_on(self, state: ClusterState, node: int, request: PodRequest) -> Placement:
        """``request`` on ``node``: the MIG slot that costs least, or this policy's GPUs."""
        return placement_on(state, node, request, self.choose_gpus)

    def tie_rank(self, state: ClusterState) -> IntArray:
        """A fixed random rank per node; among equal scores the lowest rank wins."""
        if self._tie_rank is None or self._tie_rank.size != state.num_nodes:
            self._tie_rank = (
                np.random.default_rng((self.context.seed, _TIE_STREAM))
                .permutation(state.num_nodes)
                .astype(np.int64)
            )
        return self._tie_rank

    def decide(self, state: ClusterState, request: PodRequest) -> Decision:
        nodes = np.flatnonzero(state.feasible(request)).astype(np.int64)
        if nodes.size == 0:
            return Decision(
                request=request.name,
                placement=None,
                score=float("-inf"),
                policy=self.name,
                explanation=_no_fit_reason(state, request),
            )
        scores = self.score(state, request, nodes)
        best, runner_up = best_two(scores, self.tie_rank(state)[nodes])
        node = int(nodes[best])
        explanation = (
            f"{state.node_names[node]} scored {scores[best]:.4g} under {self.name}, best of "
            f"{nodes.size} feasible node(s)"
        )
        if runner_up is not None:
            explanation += (
                f"; runner-up {state.node_names[int(nodes[runner_up])]} "
                f"scored {scores[runner_up]:.4g}"
            )
        return Decision(
            request=request.name,
            placement=self.placement_on(state, node, request),
            score=float(scores[best]),
            policy=self.name,
            explanation=explanation,
            feasible_nodes=int(nodes.size),
        )


def best_two(scores: FloatArray, rank: IntArray) -> tuple[int, int | None]:
    """Positions of the best and second-best score; equal scores go to the lower rank."""
    top = scores.max()
    tied = np.flatnonzero(scores == top)
    best = int(tied[np.argmin(rank[tied])]) if tied.size > 1 else int(tied[0])
    if scores.size == 1:
        return best, None
    rest = scores.copy()
    rest[best] = -np.inf
    second_top = rest.max()
    second = np.flatnonzero(rest == second_top)
    return best, int(second[np.argmin(rank[second])])


def _no_fit_reason(state: ClusterState, request: PodRequest) -> str:
    """Why no node fits: the most common reasons of the fit rule, with node counts."""
    return f"no node fits: {fit_report(state, request).summary()}"
