"""The PPO network's actor for one decision at a time, in numpy.

:class:`~kubesage.core.rl.network.PlacementNetwork` is a PyTorch module because it is
trained; a scheduling decision only needs its logits for one request, a single
batch of at most 64 candidates through 64-wide layers. At that size PyTorch's
per-operation dispatch costs more than the arithmetic (about 0.2 ms a decision,
measured at 10,000 nodes), so :class:`DecisionActor` holds a copy of the actor's
weights as float32 arrays and computes the same layers with numpy: the candidates'
MLP runs on the real candidates only, not the padding.

The arithmetic is the module's, in the same dtype, but not the same kernels: a
logit may differ from PyTorch's in its last bits (a test bounds the difference on
the shipped model; decisions on a whole trace replay are the same). A copy is
taken once, when the policy loads its model: a network trained further afterwards
needs a new copy (:meth:`DecisionActor.of`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kubesage.core.arrays import BoolArray, Float32Array
from kubesage.core.rl.network import BEST_GAP, MASKED, PlacementNetwork


def _array(tensor: torch.Tensor) -> Float32Array:
    return np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype=np.float32)


@dataclass(frozen=True)
class DecisionActor:
    """The actor's weights as arrays; :meth:`logits` is the module's ``logits`` for a
    batch of one."""

    pca_mean: Float32Array
    pca_components: Float32Array
    context_weight: Float32Array
    """Transposed, ``(in, out)``, as every weight here: ``x @ weight + bias``."""
    context_bias: Float32Array
    hidden_weights: tuple[Float32Array, Float32Array]
    hidden_biases: tuple[Float32Array, Float32Array]
    logit_weight: Float32Array
    logit_bias: Float32Array
    best_prior: np.float32

    @classmethod
    def of(cls, network: PlacementNetwork) -> DecisionActor:
        context = network.context[0]
        first, second = network.candidate[0], network.candidate[2]
        if not (
            isinstance(context, torch.nn.Linear)
            and isinstance(first, torch.nn.Linear)
            and isinstance(second, torch.nn.Linear)
        ):
            raise TypeError("the network's layers are not the ones DecisionActor computes")
        return cls(
            pca_mean=_array(network.pca_mean),
            pca_components=_array(network.pca_components),
            context_weight=_array(context.weight).T.copy(),
            context_bias=_array(context.bias),
            hidden_weights=(_array(first.weight).T.copy(), _array(second.weight).T.copy()),
            hidden_biases=(_array(first.bias), _array(second.bias)),
            logit_weight=_array(network.logit.weight).T.copy(),
            logit_bias=_array(network.logit.bias),
            best_prior=np.float32(network.best_prior.detach().item()),
        )

    def logits(
        self,
        candidates: Float32Array,
        mask: BoolArray,
        request: Float32Array,
        global_raw: Float32Array,
    ) -> Float32Array:
        """Logits ``(K,)`` of one decision's candidate table ``(K, F)``: :data:`MASKED`
        where ``mask`` is false."""
        compressed = (global_raw - self.pca_mean) @ self.pca_components
        joined = np.concatenate([compressed, request])
        context = np.tanh(joined @ self.context_weight + self.context_bias)
        real = np.flatnonzero(mask)
        rows = candidates[real]
        # The first layer reads (candidate, context): the context's part is one row,
        # shared by every candidate.
        first = self.hidden_weights[0]
        shared = context @ first[rows.shape[1] :] + self.hidden_biases[0]
        hidden = np.tanh(rows @ first[: rows.shape[1]] + shared)
        hidden = np.tanh(hidden @ self.hidden_weights[1] + self.hidden_biases[1])
        scored = (hidden @ self.logit_weight)[:, 0] + self.logit_bias[0]
        scored = scored + self.best_prior * (rows[:, BEST_GAP] == 0).astype(np.float32)
        logits = np.full(mask.shape, MASKED, dtype=np.float32)
        logits[real] = scored
        return logits
