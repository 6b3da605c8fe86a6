"""The ``ppo`` scheduling policy: the trained network picks among FGD's top candidates.

The model is ``PolicyContext.model`` or the shipped
``configs/models/ppo-openb.safetensors``. A missing, unreadable, mismatched or
non-finite model makes the policy fall back to FGD — with a warning logged once
and every fallen-back decision counted in :attr:`PpoPolicy.fallbacks`; the
decision's explanation says so. Logits that come out non-finite for one request
fall back for that request alone.

Each decision names the chosen node, the runner-up (the next-best logit) and the
candidate features that differ most between the two.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from kubesage.core.errors import ModelError
from kubesage.core.policy.base import PolicyContext
from kubesage.core.policy.fgd import FgdPolicy
from kubesage.core.rl.features import CANDIDATE_FEATURES, observe
from kubesage.core.rl.network import PlacementNetwork
from kubesage.core.rl.persistence import load_network
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import Decision, PodRequest

log = logging.getLogger(__name__)

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "configs" / "models" / "ppo-openb.safetensors"


class PpoPolicy:
    name: ClassVar[str] = "ppo"

    def __init__(self, context: PolicyContext):
        # A decision's tensors are tiny: more intra-op threads only add synchronisation
        # (measured 20× slower with two threads while another process shares the cores).
        torch.set_num_threads(1)
        self.fgd = FgdPolicy(context)
        self.fallbacks = 0
        """Decisions FGD made because the model could not."""
        self.model_path = context.model or DEFAULT_MODEL
        self.network: PlacementNetwork | None = None
        self.problem = ""
        try:
            self.network, _ = load_network(self.model_path)
        except ModelError as exc:
            self.problem = str(exc)
            log.warning("ppo policy falls back to FGD: %s", exc)

    def decide(self, state: ClusterState, request: PodRequest) -> Decision:
        if self.network is None:
            return self._fallback(state, request, self.problem)
        observation = observe(state, request, self.fgd)
        if not observation.mask.any():
            return self.fgd.decide(state, request).model_copy(update={"policy": self.name})
        with torch.no_grad():
            logits, _ = self.network(
                torch.as_tensor(observation.candidates)[None],
                torch.as_tensor(observation.mask)[None],
                torch.as_tensor(observation.request)[None],
                torch.as_tensor(observation.global_raw)[None],
            )
        scores = logits[0].numpy()
        real = observation.mask
        if not np.isfinite(scores[real]).all():
            return self._fallback(state, request, "the model produced non-finite scores")
        order = np.argsort(-np.where(real, scores, -np.inf), kind="stable")
        best = int(order[0])
        node = int(observation.nodes[best])
        explanation = (
            f"{state.node_names[node]} (FGD rank {best}) scored {scores[best]:.3g} "
            f"under ppo, best of {int(real.sum())} candidate(s)"
        )
        if real.sum() > 1:
            second = int(order[1])
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
            feasible_nodes=int(real.sum()),
        )

    def _fallback(self, state: ClusterState, request: PodRequest, why: str) -> Decision:
        self.fallbacks += 1
        decision = self.fgd.decide(state, request)
        return decision.model_copy(
            update={
                "policy": self.name,
                "explanation": f"fallback to FGD ({why}): {decision.explanation}",
            }
        )
