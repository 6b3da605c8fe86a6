"""Rollout workers: run the environment with the current weights and return a batch.

A worker is a plain class, so it runs in-process (tests, single-core runs) or as
a Ray actor (``ray.remote(RolloutWorker)``) — one per core, the learner in the
driver. Each worker keeps its environment between calls: episodes (thousands of
decisions) span several collections, and the learner bootstraps from
``last_value`` where a batch stops mid-episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from kubesage.core.rl.env import PlacementEnv
from kubesage.core.rl.network import PlacementNetwork
from kubesage.core.rl.ppo import OBSERVATION_KEYS
from kubesage.core.types import NodeSpec, PodRequest


class RolloutWorker:
    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        workloads: Sequence[Sequence[PodRequest]],
        seed: int,
        *,
        shaping: float,
        tune: float,
        mode: Literal["fgd", "replay"] = "fgd",
    ):
        torch.set_num_threads(1)
        self.env = PlacementEnv(nodes, workloads, shaping=shaping, tune=tune, mode=mode)
        self.network = PlacementNetwork()
        self.generator = torch.Generator().manual_seed(seed)
        self.observation, _ = self.env.reset(seed=seed)

    def first_candidate_states(self, steps: int) -> np.ndarray:
        """Global vectors seen while always picking candidate 0 (FGD), for the PCA."""
        seen = []
        for _ in range(steps):
            seen.append(self.observation["global_raw"])
            self._step(0)
        return np.stack(seen)

    def collect(self, weights: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """``steps`` decisions sampled from the policy with ``weights``."""
        self.network.load_state_dict({k: torch.as_tensor(v) for k, v in weights.items()})
        columns: dict[str, list[Any]] = {
            k: [] for k in (*OBSERVATION_KEYS, "actions", "logprobs", "values", "rewards", "dones")
        }
        finished: list[float] = []
        with torch.no_grad():
            for _ in range(steps):
                inputs = [torch.as_tensor(self.observation[k])[None] for k in OBSERVATION_KEYS]
                logits, value = self.network(*inputs)
                log_policy = torch.log_softmax(logits[0], dim=-1)
                action = _sample(log_policy.exp(), self.generator)
                for key in OBSERVATION_KEYS:
                    columns[key].append(self.observation[key])
                columns["actions"].append(action)
                columns["logprobs"].append(float(log_policy[action]))
                columns["values"].append(float(value[0]))
                reward, done, info = self._step(action)
                columns["rewards"].append(reward)
                columns["dones"].append(float(done))
                if done:
                    finished.append(info["allocation_pct"])
            inputs = [torch.as_tensor(self.observation[k])[None] for k in OBSERVATION_KEYS]
            last_value = float(self.network(*inputs)[1][0])
        batch = {k: np.asarray(v) for k, v in columns.items()}
        batch["actions"] = batch["actions"].astype(np.int64)
        return {
            "batch": batch,
            "last_value": 0.0 if columns["dones"][-1] else last_value,
            "episodes": finished,
        }

    def _step(self, action: int) -> tuple[float, bool, dict[str, Any]]:
        observation, reward, done, _, info = self.env.step(action)
        if done:
            observation, _ = self.env.reset()
        self.observation = observation
        return reward, done, info


def _sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator)[0])
