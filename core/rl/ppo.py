"""PPO: generalised advantage estimation and the clipped update, in the style of CleanRL's ppo.py.

A batch holds ``T`` steps: observations (``candidates``, ``mask``, ``request``,
``global_raw``), ``actions``, their ``logprobs`` and ``values`` when taken,
``rewards`` and ``dones`` (1 where the episode ended after that step), plus the
value of the state after the last step (``last_value``; 0 when it ended).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from kubesage.core.arrays import FloatArray
from kubesage.core.rl.network import PlacementNetwork

OBSERVATION_KEYS = ("candidates", "mask", "request", "global_raw")


def gae(
    rewards: FloatArray,
    values: FloatArray,
    dones: FloatArray,
    last_value: float,
    *,
    gamma: float,
    lam: float,
) -> tuple[FloatArray, FloatArray]:
    """Advantages and returns by GAE(γ, λ); a done step does not look past itself."""
    steps = len(rewards)
    advantages = np.zeros(steps)
    running = 0.0
    for t in reversed(range(steps)):
        next_value = last_value if t == steps - 1 else values[t + 1]
        alive = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * alive - values[t]
        running = delta + gamma * lam * alive * running
        advantages[t] = running
    return advantages, advantages + values


@dataclass(frozen=True)
class PpoSettings:
    gamma: float = 0.999
    lam: float = 0.95
    clip: float = 0.2
    epochs: int = 4
    minibatches: int = 4
    learning_rate: float = 1e-3
    entropy_coef: float = 0.001
    value_coef: float = 0.5
    max_grad_norm: float = 0.5


def tensors(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {key: torch.as_tensor(value) for key, value in batch.items()}


def update(
    network: PlacementNetwork,
    optimiser: torch.optim.Optimizer,
    batch: dict[str, np.ndarray],
    advantages: FloatArray,
    returns: FloatArray,
    settings: PpoSettings,
    generator: torch.Generator,
) -> dict[str, float]:
    """Minibatch epochs of the clipped objective; namespaced metrics of the last epoch."""
    data = tensors(batch)
    adv = torch.as_tensor(advantages, dtype=torch.float32)
    ret = torch.as_tensor(returns, dtype=torch.float32)
    size = len(adv)
    minibatch = max(1, size // settings.minibatches)
    clipped_fractions: list[float] = []
    stats: dict[str, float] = {}
    for _ in range(settings.epochs):
        order = torch.randperm(size, generator=generator)
        for start in range(0, size, minibatch):
            index = order[start : start + minibatch]
            logits, value = network(*(data[k][index] for k in OBSERVATION_KEYS))
            log_policy = torch.log_softmax(logits, dim=-1)
            logprob = log_policy.gather(1, data["actions"][index][:, None]).squeeze(1)
            ratio = (logprob - data["logprobs"][index]).exp()
            mb_adv = adv[index]
            if len(index) > 1:
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            policy_loss = torch.max(
                -mb_adv * ratio, -mb_adv * ratio.clamp(1 - settings.clip, 1 + settings.clip)
            ).mean()
            value_loss = 0.5 * ((value - ret[index]) ** 2).mean()
            entropy = -(log_policy.exp() * log_policy).sum(-1).mean()
            loss = policy_loss + settings.value_coef * value_loss - settings.entropy_coef * entropy
            optimiser.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(network.parameters(), settings.max_grad_norm)
            optimiser.step()
            with torch.no_grad():
                log_ratio = logprob - data["logprobs"][index]
                approx_kl = ((ratio - 1) - log_ratio).mean().item()
                clipped_fractions.append(((ratio - 1).abs() > settings.clip).float().mean().item())
            stats = {
                "losses/policy_loss": policy_loss.item(),
                "losses/value_loss": value_loss.item(),
                "losses/entropy": entropy.item(),
                "losses/approx_kl": approx_kl,
            }
    stats["losses/clipfrac"] = float(np.mean(clipped_fractions))
    variance = float(np.var(returns))
    stats["losses/explained_variance"] = (
        float("nan") if variance == 0 else 1 - float(np.var(returns - batch["values"])) / variance
    )
    return stats
