"""A Gymnasium environment over the simulator: place each arriving pod on one of 64 candidates.

An episode is one run on a workload, in either of the simulator's modes:

- ``fgd`` — the FGD paper's protocol: pods shuffled by the episode's seed and
  inflated to ``tune`` × the cluster's GPU capacity
  (:func:`kubesage.core.sim.protocol.fgd_arrivals`), each placed as it arrives and
  never leaving;
- ``replay`` — the trace's own times: pods arrive at their creation time and leave
  at their deletion time (departures free their resources before the next
  decision; :func:`kubesage.core.sim.engine.replay_events` orders the events).

A pod with no feasible node fails and is skipped (no decision is asked); the
episode ends after the last arrival.

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
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.policy.base import PolicyContext
from kubesage.core.policy.fgd import FgdPolicy
from kubesage.core.rl.cluster_summary import ClusterSummary
from kubesage.core.rl.features import (
    CANDIDATE_FEATURES,
    GLOBAL_RAW,
    MAX_CANDIDATES,
    REQUEST_FEATURES,
    Observation,
    observe,
)
from kubesage.core.sim.engine import EventKind, replay_events
from kubesage.core.sim.protocol import DEFAULT_TUNE, fgd_arrivals
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import NodeSpec, Placement, PodRequest

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
        mode: Literal["fgd", "replay"] = "fgd",
    ):
        if not workloads or not all(workloads):
            raise InputError("the environment needs at least one non-empty workload")
        self.nodes = list(nodes)
        self.workloads = [list(w) for w in workloads]
        self.tune = tune
        self.shaping = shaping
        if mode not in ("fgd", "replay"):
            raise InputError(f"mode must be 'fgd' or 'replay', got '{mode}'")
        self.mode = mode
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
        self.summary = ClusterSummary()
        self._pods: list[PodRequest] = []
        self._events: list[tuple[float, EventKind, int]] = []
        self._event = 0
        self._placed: dict[int, Placement] = {}
        self.arrived = 0
        self._current: Observation | None = None
        self.failed = 0

    # -- gymnasium API ----------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(2**31))
        workload = self.workloads[int(self.np_random.integers(len(self.workloads)))]
        if options and "policy_seed" in options:
            # The seed of FGD's tie order and of the arrival shuffle, to line an
            # episode up with a Simulator run of FGD under that seed.
            episode_seed = int(options["policy_seed"])
        self.state = ClusterState(self.nodes)
        self.ranker = FgdPolicy(PolicyContext(seed=episode_seed, workload=workload))
        if self.mode == "fgd":
            self._pods = fgd_arrivals(
                workload, gpu_capacity_milli=self.capacity, seed=episode_seed, tune=self.tune
            )
            self._events = [(float(i), EventKind.ARRIVAL, i) for i in range(len(self._pods))]
        else:
            self._pods = workload
            self._events = replay_events(workload)
        self._event = 0
        self._placed = {}
        self.arrived = 0
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
        index = self._events[self._event][2]
        pod = self._pods[index]
        node = int(current.nodes[action])
        before = self._fragment(node)
        placement = self.ranker.placement_on(self.state, node, pod)
        self.state.allocate(pod, placement)
        self._placed[index] = placement
        change = self._fragment(node) - before
        reward = 100.0 * (pod.total_gpu_milli - self.shaping * change) / self.capacity
        self._event += 1
        self._advance()
        done = self._current is None
        observation = as_dict(self._current) if self._current is not None else as_dict(current)
        return observation, float(reward), done, False, self._info()

    # -- internals --------------------------------------------------------------------

    def _fragment(self, node: int) -> float:
        # FGD's per-node cache: scoring this step's candidates already computed it.
        return float(self.ranker.fragments(self.state, np.array([node], dtype=np.int64))[0])

    def _advance(self) -> None:
        """Apply departures and fail pods that fit nowhere, up to the next decision."""
        while self._event < len(self._events):
            _, kind, index = self._events[self._event]
            pod = self._pods[index]
            if kind != EventKind.ARRIVAL:
                placement = self._placed.pop(index, None)
                if placement is not None:  # a pod that failed has nothing to free
                    self.state.release(pod, placement)
                self._event += 1
                continue
            self.arrived += 1
            observation = observe(self.state, pod, self.ranker, summary=self.summary)
            if observation.mask.any():
                self._current = observation
                return
            self.failed += 1
            self._event += 1
        self._current = None

    def _info(self) -> dict[str, Any]:
        return {
            "allocation_pct": 100.0 * self.state.gpu_allocation_ratio,
            "arrived": self.arrived,
            "failed": self.failed,
        }
