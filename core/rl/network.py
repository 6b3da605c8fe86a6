"""The PPO network: a permutation-equivariant candidate scorer with a shared critic.

The global monitoring vector (256 quantiles) is compressed by a fixed PCA (mean
and 128 components, fitted on states seen in training, stored with the weights)
and joined with the request's features into a context. Every candidate is scored
by the same MLP on (its features, the context): reordering the candidates
reorders the logits and nothing else. A learnable prior favours the candidates
FGD scores best (FGD's integer scores tie often; FGD breaks the tie at random), so
an untrained policy behaves like FGD, and learning only has to find which of the
tied nodes, or which small step away from them, serves later pods better.
The critic reads the context and the mean of the candidates' hidden vectors.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from kubesage.core.rl.features import CANDIDATE_FEATURES, GLOBAL_RAW, REQUEST_FEATURES

PCA_DIM = 128
HIDDEN = 64
BEST_PRIOR = 6.0
MASKED = -1e9
BEST_GAP = CANDIDATE_FEATURES.index("fgd_gap_to_best")


def fit_pca(samples: np.ndarray, dim: int = PCA_DIM) -> tuple[np.ndarray, np.ndarray]:
    """Mean and the top ``dim`` principal directions (as columns) of ``samples``."""
    mean = samples.mean(axis=0)
    _, _, vt = np.linalg.svd(samples - mean, full_matrices=False)
    components = np.zeros((samples.shape[1], dim), dtype=np.float64)
    found = vt[:dim].T
    components[:, : found.shape[1]] = found
    return mean.astype(np.float32), components.astype(np.float32)


class PlacementNetwork(nn.Module):
    pca_mean: torch.Tensor
    pca_components: torch.Tensor

    def __init__(self, hidden: int = HIDDEN, pca_dim: int = PCA_DIM):
        super().__init__()
        self.register_buffer("pca_mean", torch.zeros(GLOBAL_RAW))
        self.register_buffer("pca_components", torch.zeros(GLOBAL_RAW, pca_dim))
        self.context = nn.Sequential(nn.Linear(pca_dim + len(REQUEST_FEATURES), hidden), nn.Tanh())
        self.candidate = nn.Sequential(
            nn.Linear(len(CANDIDATE_FEATURES) + hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
        )
        self.logit = nn.Linear(hidden, 1)
        self.best_prior = nn.Parameter(torch.tensor(BEST_PRIOR))
        self.critic = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        nn.init.zeros_(self.logit.weight)
        nn.init.zeros_(self.logit.bias)

    def set_pca(self, mean: np.ndarray, components: np.ndarray) -> None:
        self.pca_mean.copy_(torch.as_tensor(mean))
        self.pca_components.copy_(torch.as_tensor(components))

    def logits(
        self,
        candidates: torch.Tensor,
        mask: torch.Tensor,
        request: torch.Tensor,
        global_raw: torch.Tensor,
    ) -> torch.Tensor:
        """Masked logits ``(B, K)`` alone: a decision needs no value (the same numbers
        as :meth:`forward`'s, without the critic's cost)."""
        return self._actor(candidates, mask, request, global_raw)[0]

    def forward(
        self,
        candidates: torch.Tensor,
        mask: torch.Tensor,
        request: torch.Tensor,
        global_raw: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked logits ``(B, K)`` and values ``(B,)``."""
        logits, hidden, context = self._actor(candidates, mask, request, global_raw)
        weights = mask.to(hidden.dtype)[..., None]
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        value = self.critic(torch.cat([pooled, context], dim=-1)).squeeze(-1)
        return logits, value

    def _actor(
        self,
        candidates: torch.Tensor,
        mask: torch.Tensor,
        request: torch.Tensor,
        global_raw: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Masked logits, the candidates' hidden vectors and the context."""
        compressed = (global_raw - self.pca_mean) @ self.pca_components
        context = self.context(torch.cat([compressed, request], dim=-1))
        k = candidates.shape[1]
        hidden = self.candidate(
            torch.cat([candidates, context[:, None, :].expand(-1, k, -1)], dim=-1)
        )
        logits = self.logit(hidden).squeeze(-1)
        # The prior follows a feature, not the position: still equivariant.
        best = (candidates[..., BEST_GAP] == 0) & mask
        logits = logits + self.best_prior * best.to(logits.dtype)
        logits = torch.where(mask, logits, torch.full_like(logits, MASKED))
        return logits, hidden, context
