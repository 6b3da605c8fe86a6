"""The ``ppo`` scheduling policy: the trained network picks among FGD's top candidates.

The model is ``PolicyContext.model`` or the shipped ``models/ppo-openb.safetensors``
(found with :func:`kubesage.core.paths.shipped_file`). A missing, unreadable,
mismatched or non-finite model makes the policy fall back to FGD — with a warning
logged once, the reason in :attr:`PpoPolicy.problem` and every fallen-back decision
counted in :attr:`PpoPolicy.fallbacks`; the decision's explanation says so. Logits
that come out non-finite for one request fall back for that request alone. The
commands that take a model file (``simulate``/``qualify --model``) do not fall back on
it: :func:`kubesage.core.sim.runner.run_many` refuses to start when ``problem`` is set
for a model the run names (the fallback serves the shipped model, as ``serve`` and
``loop`` use it).

The network leaves FGD's own choice (candidate 0) only when it prefers another
candidate by at least :data:`DEFER_MARGIN` logits; nearer than that, FGD's choice
stands and the decision says so (counted in :attr:`PpoPolicy.deferred`). Each decision
names the chosen node, the runner-up and the candidate features that differ most
between the two.

For the live path (:meth:`PpoPolicy.score_nodes`), the nodes the network sees — FGD's
top candidates among those asked about — score above every other node, in the
network's order; the rest keep FGD's score. So the node :meth:`PpoPolicy.decide`
picks is the best-scored one when every feasible node is asked about, and a pod is
placed on a node (:meth:`PpoPolicy.placement_on`) as FGD places it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import ConfigError, ModelError
from kubesage.core.paths import shipped_file
from kubesage.core.policy.base import PolicyContext
from kubesage.core.policy.fgd import FgdPolicy
from kubesage.core.rl.cluster_summary import ClusterSummary
from kubesage.core.rl.decision_actor import DecisionActor
from kubesage.core.rl.features import CANDIDATE_FEATURES, Observation, observe
from kubesage.core.rl.network import PlacementNetwork
from kubesage.core.rl.persistence import load_network
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import Decision, Placement, PodRequest

log = logging.getLogger(__name__)

DEFAULT_MODEL_FILE = "models/ppo-openb.safetensors"
"""The shipped model, relative to the shipped configuration."""

ABOVE_FGD = 101.0
"""The network's candidates score from here up: above any FGD score (0..100)."""
DEFER_MARGIN = 0.5
"""Logits by which the network must prefer a candidate to FGD's choice to take it.

The shipped model's choices are tie-breaks among FGD's best-scored candidates; where
it barely prefers one, its choice gained nothing on workloads it was not trained on.
Chosen from 0, 0.5, 1 and 2 on generated openb variants (generator seed 1, arrival
seed 42), then measured on others (generator seeds 0 and 2) and the shipped traces
(docs/ppo.md)."""


def default_model() -> Path:
    """The shipped model file (ConfigError when the installation lacks it)."""
    return shipped_file(DEFAULT_MODEL_FILE)


@dataclass(frozen=True)
class _Logits:
    observation: Observation
    scores: FloatArray
    """One logit per real candidate (the observation's first slots), all finite."""
    preferred: int
    """The network's first preference (the first of equals)."""
    choice: int
    """The candidate decided: ``preferred``, or 0 (FGD's choice) within the margin."""

    @property
    def fgd_kept(self) -> bool:
        """FGD's choice stands although the network preferred another candidate."""
        return self.choice != self.preferred


class PpoPolicy:
    name: ClassVar[str] = "ppo"

    def __init__(self, context: PolicyContext):
        self.fgd = FgdPolicy(context)
        self.fallbacks = 0
        """Decisions FGD made because the model could not."""
        self.margin = DEFER_MARGIN
        """See :data:`DEFER_MARGIN` (0: the network's first preference always)."""
        self.deferred = 0
        """Decisions where FGD's choice stood because the network's preference for
        another candidate was under the margin."""
        self.summary = ClusterSummary()
        """The cluster's vector, kept up to date from one decision to the next."""
        self.model_path: Path | None = context.model
        self.network: PlacementNetwork | None = None
        self.actor: DecisionActor | None = None
        """The network's actor as numpy arrays: what a decision runs (see
        :mod:`~kubesage.core.rl.decision_actor`)."""
        self.problem = ""
        """Why the model cannot be used, naming the file ("" when it can)."""
        try:
            self.model_path = context.model or default_model()
            self.network, _ = load_network(self.model_path)
            self.actor = DecisionActor.of(self.network)
        except (ConfigError, ModelError) as exc:
            self.problem = str(exc)
            log.warning("ppo policy falls back to FGD: %s", exc)

    def _logits(
        self,
        state: ClusterState,
        request: PodRequest,
        among: IntArray | None = None,
        scored: FloatArray | None = None,
    ) -> _Logits | str | None:
        """The network's logits over its candidates (drawn from ``among``, with FGD's
        ``scored`` when known: see :func:`~kubesage.core.rl.features.observe`); None
        when no candidate fits, the reason in words when the model cannot score them."""
        if self.actor is None:
            return self.problem
        observation = observe(state, request, self.fgd, among, self.summary, scored)
        if not observation.mask.any():
            return None
        count = observation.nodes.size  # the real candidates fill the first slots
        logits = self.actor.logits(
            observation.candidates, observation.mask, observation.request, observation.global_raw
        )
        scores = logits[:count].astype(np.float64)
        if not np.isfinite(scores).all():
            return "the model produced non-finite scores"
        preferred = int(np.argmax(scores))
        keep_fgd = preferred != 0 and scores[preferred] - scores[0] < self.margin
        return _Logits(observation, scores, preferred, 0 if keep_fgd else preferred)

    def decide(self, state: ClusterState, request: PodRequest) -> Decision:
        outcome = self._logits(state, request)
        if isinstance(outcome, str):
            return self._fallback(state, request, outcome)
        if outcome is None:
            return self.fgd.decide(state, request).model_copy(update={"policy": self.name})
        observation, scores, best = outcome.observation, outcome.scores, outcome.choice
        node = int(observation.nodes[best])
        explanation = (
            f"{state.node_names[node]} (FGD rank {best}) scored {scores[best]:.3g} "
            f"under ppo, best of {scores.size} candidate(s)"
        )
        preferred = outcome.preferred
        if outcome.fgd_kept:
            self.deferred += 1
            explanation = (
                f"FGD's choice stands (ppo preferred another candidate by "
                f"{scores[preferred] - scores[best]:.3g} < {self.margin:g} logits): " + explanation
            )
        if scores.size > 1:
            # The runner-up: the network's preference when FGD's choice stands.
            order = np.argsort(-scores, kind="stable")
            second = preferred if outcome.fgd_kept else int(order[1])
            difference = observation.candidates[best] - observation.candidates[second]
            top = np.argsort(-np.abs(difference))[:3]
            named = ", ".join(
                f"{CANDIDATE_FEATURES[i]} {difference[i]:+.3f}" for i in top if difference[i]
            )
            explanation += (
                f"; runner-up {state.node_names[int(observation.nodes[second])]} scored "
                f"{scores[second]:.3g}; differences: {named or 'none'}"
            )
        return Decision(
            request=request.name,
            placement=self.fgd.placement_on(state, node, request),
            score=float(scores[best]),
            policy=self.name,
            explanation=explanation,
            feasible_nodes=scores.size,
        )

    def score_nodes(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        """FGD's scores of ``nodes``, with the network's candidates among them lifted
        above every other node in the network's order (see the module docstring)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        scores = self.fgd.score_nodes(state, request, nodes)
        outcome = self._logits(state, request, nodes, scores)
        if not isinstance(outcome, _Logits):
            return scores  # no model, or nothing fits: FGD ranks them all
        ranked = outcome.scores.copy()
        if outcome.fgd_kept:  # FGD's choice stands: it goes first
            ranked[outcome.choice] = ranked.max() + 1.0
        scores[outcome.observation.positions] = ABOVE_FGD + (ranked - ranked.min())
        return scores

    def placement_on(self, state: ClusterState, node: int, request: PodRequest) -> Placement:
        """Where FGD would place ``request`` on ``node``."""
        return self.fgd.placement_on(state, node, request)

    def _fallback(self, state: ClusterState, request: PodRequest, why: str) -> Decision:
        self.fallbacks += 1
        decision = self.fgd.decide(state, request)
        return decision.model_copy(
            update={
                "policy": self.name,
                "explanation": f"fallback to FGD ({why}): {decision.explanation}",
            }
        )
