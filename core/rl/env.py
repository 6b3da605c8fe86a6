"""A Gymnasium environment over the FGD protocol: place each arriving pod on one of 64 candidates.

An episode is one run of the FGD paper's protocol on a workload: pods shuffled
by the episode's seed and inflated to ``tune`` × the cluster's GPU capacity
(:func:`kubesage.core.sim.protocol.fgd_arrivals`), each placed as it arrives and
never leaving. A pod with no feasible node fails and is skipped (no decision is
asked); the episode ends after the last arrival.

Observation: :class:`kubesage.core.rl.features.Observation` as a dict of arrays
(``candidates``, ``mask``, ``request``, ``global_raw``). Action: a candidate
index; indices the mask marks as padding are rejected.

Reward, in percent of the cluster's GPU capacity, so an episode's undiscounted
return is the final GPU allocation ratio plus the shaping terms:

    r = 100 · (milli-GPU placed) / capacity − β · 100 · ΔF / capacity

where ΔF is the change in FGD's expected fragmentation (milli-GPU) of the chosen
node. The first term is the objective itself (allocation when arrivals stop); the
second is potential-based shaping (Φ = −β·F), which leaves the best policy
unchanged while telling the learner early which placements strand capacity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.policy.base import PolicyContext
from kubesage.core.policy.fgd import FgdPolicy
from kubesage.core.policy.gpu_choice import best_mig_slot
from kubesage.core.rl.features import (
    CANDIDATE_FEATURES,
    GLOBAL_RAW,
    MAX_CANDIDATES,
    REQUEST_FEATURES,
    Observation,
    observe,
)
from kubesage.core.sim.protocol import DEFAULT_TUNE, fgd_arrivals
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import NodeSpec, PodRequest

DEFAULT_SHAPING = 0.5


def as_dict(observation: Observation) -> dict[str, np.ndarray]:
    return {
        "candidates": observation.candidates,
        "mask": observation.mask,
        "request": observation.request,
        "global_raw": observation.global_raw,
    }


class PlacementEnv(gym.Env[dict[str, Any], np.int64]):
    """See the module docstring."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        workloads: Sequence[Sequence[PodRequest]],
        *,
        tune: float = DEFAULT_TUNE,
        shaping: float = DEFAULT_SHAPING,
    ):
        if not workloads or not all(workloads):
            raise InputError("the environment needs at least one non-empty workload")
        self.nodes = list(nodes)
        self.workloads = [list(w) for w in workloads]
        self.tune = tune
        self.shaping = shaping
        self.capacity = ClusterState(self.nodes).gpu_capacity_milli_total
        if self.capacity <= 0:
            raise InputError("the environment needs a cluster with GPUs")
        self.action_space = gym.spaces.Discrete(MAX_CANDIDATES)
        self.observation_space = gym.spaces.Dict(
            {
                "candidates": gym.spaces.Box(
                    -np.inf, np.inf, (MAX_CANDIDATES, len(CANDIDATE_FEATURES)), np.float32
                ),
                "mask": gym.spaces.MultiBinary(MAX_CANDIDATES),
                "request": gym.spaces.Box(-np.inf, np.inf, (len(REQUEST_FEATURES),), np.float32),
                "global_raw": gym.spaces.Box(-np.inf, np.inf, (GLOBAL_RAW,), np.float32),
            }
        )
        self.state = ClusterState(self.nodes)
        self.ranker = FgdPolicy(PolicyContext(workload=self.workloads[0]))
        self.measure = self.ranker.measure(self.state)
        self._arrivals: list[PodRequest] = []
        self._index = 0
        self._current: Observation | None = None
        self.failed = 0

    # -- gymnasium API ----------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(2**31))
        workload = self.workloads[int(self.np_random.integers(len(self.workloads)))]
        self.state = ClusterState(self.nodes)
        self.ranker = FgdPolicy(PolicyContext(seed=episode_seed, workload=workload))
        self.measure = self.ranker.measure(self.state)
        self._arrivals = fgd_arrivals(
            workload, gpu_capacity_milli=self.capacity, seed=episode_seed, tune=self.tune
        )
        self._index = 0
        self.failed = 0
        self._advance()
        if self._current is None:
            raise InputError("no pod of the workload fits the cluster")
        return as_dict(self._current), self._info()

    def step(
        self, action: int | np.int64
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        current = self._current
        if current is None:
            raise InputError("the episode is over; call reset()")
        if not 0 <= action < MAX_CANDIDATES or not current.mask[action]:
            raise InputError(f"action {action} is not a candidate ({int(current.mask.sum())} real)")
        pod = self._arrivals[self._index]
        node = int(current.nodes[action])
        before = self._fragment(node)
        mig_start = None
        if pod.mig is not None:
            gpu, mig_start = best_mig_slot(self.state, node, pod)
            gpus: tuple[int, ...] = (gpu,)
        else:
            gpus = self.ranker.choose_gpus(self.state, node, pod)
        self.state.allocate(pod, self.state.placement(node, gpus, pod, mig_start=mig_start))
        change = self._fragment(node) - before
        reward = 100.0 * (pod.total_gpu_milli - self.shaping * change) / self.capacity
        self._index += 1
        self._advance()
        done = self._current is None
        observation = as_dict(self._current) if self._current is not None else as_dict(current)
        return observation, float(reward), done, False, self._info()

    # -- internals --------------------------------------------------------------------

    def _fragment(self, node: int) -> float:
        s = self.state
        return float(
            self.measure.node_fragment(
                s.cpu_free_milli[node : node + 1],
                s.gpu_free_milli[node : node + 1],
                s.gpu_model_index[node : node + 1],
            )[0]
        )

    def _advance(self) -> None:
        """Move to the next pod that has a candidate; fail the ones that have none."""
        while self._index < len(self._arrivals):
            observation = observe(self.state, self._arrivals[self._index], self.ranker)
            if observation.mask.any():
                self._current = observation
                return
            self.failed += 1
            self._index += 1
        self._current = None

    def _info(self) -> dict[str, Any]:
        return {
            "allocation_pct": 100.0 * self.state.gpu_allocation_ratio,
            "arrived": self._index,
            "failed": self.failed,
        }
