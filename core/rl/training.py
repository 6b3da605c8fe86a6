"""The PPO training loop: rollouts on Ray actors, the learner in the driver.

Each iteration sends the current weights to every worker, each worker returns
``steps_per_worker`` decisions, advantages are computed per worker (their
trajectories are separate), and the network is updated on the union. Before the
first iteration the workers walk FGD's choices to collect global states and the
network's PCA is fitted on them. Metrics are returned (and, with a path, written
as JSON lines) per iteration under namespaced keys: ``losses/…``,
``charts/steps_per_s``, ``charts/episodic_allocation_pct``.

Ray starts locally (``num_cpus`` = the machine's cores, dashboard, usage stats and
token authentication off) unless ``ray_address`` names a running cluster. With
``workers=0`` everything runs in this process, without Ray.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from kubesage.core.errors import DependencyError, InputError
from kubesage.core.rl.env import DEFAULT_SHAPING
from kubesage.core.rl.network import PlacementNetwork, fit_pca
from kubesage.core.rl.ppo import PpoSettings, gae, update
from kubesage.core.rl.rollout import RolloutWorker
from kubesage.core.sim.protocol import DEFAULT_TUNE
from kubesage.core.types import NodeSpec, PodRequest

ProgressCallback = Callable[[int, dict[str, float]], None]


@dataclass(frozen=True)
class TrainSettings:
    iterations: int = 20
    steps_per_worker: int = 1024
    workers: int = 2
    seed: int = 0
    pca_steps: int = 512
    shaping: float = DEFAULT_SHAPING
    tune: float = DEFAULT_TUNE
    mode: Literal["fgd", "replay"] = "fgd"
    ray_address: str | None = None
    ppo: PpoSettings = field(default_factory=PpoSettings)


def start_ray(address: str | None) -> Any:
    """Import and start Ray (local by default); DependencyError when it cannot."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        import ray
    except ImportError as exc:
        raise DependencyError(f"Ray is not installed ({exc}); use workers=0") from exc
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(
                num_cpus=os.cpu_count() or 1,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
    return ray


class _Pool:
    """The workers, in-process or on Ray, behind one call."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        workloads: Sequence[Sequence[PodRequest]],
        settings: TrainSettings,
    ):
        options: dict[str, Any] = {
            "shaping": settings.shaping,
            "tune": settings.tune,
            "mode": settings.mode,
        }
        seeds = [settings.seed * 1000 + i for i in range(max(1, settings.workers))]
        if settings.workers == 0:
            self.ray = None
            self.local = [RolloutWorker(nodes, workloads, seeds[0], **options)]
        else:
            self.ray = start_ray(settings.ray_address)
            actor = self.ray.remote(num_cpus=1)(RolloutWorker)
            self.actors = [actor.remote(nodes, workloads, s, **options) for s in seeds]

    def call(self, method: str, *args: Any) -> list[Any]:
        if self.ray is None:
            return [getattr(w, method)(*args) for w in self.local]
        return list(self.ray.get([getattr(a, method).remote(*args) for a in self.actors]))


def weights_of(network: PlacementNetwork) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in network.state_dict().items()}


def train(
    nodes: Sequence[NodeSpec],
    workloads: Sequence[Sequence[PodRequest]],
    settings: TrainSettings,
    *,
    metrics_path: Path | None = None,
    on_iteration: ProgressCallback | None = None,
) -> tuple[PlacementNetwork, list[dict[str, float]]]:
    """Train a placement network; returns it and the per-iteration metrics."""
    if settings.iterations < 1 or settings.steps_per_worker < 2:
        raise InputError("training needs at least one iteration of at least two steps")
    torch.manual_seed(settings.seed)
    network = PlacementNetwork()
    pool = _Pool(nodes, workloads, settings)
    states = np.concatenate(pool.call("first_candidate_states", settings.pca_steps))
    network.set_pca(*fit_pca(states))
    optimiser = torch.optim.Adam(network.parameters(), lr=settings.ppo.learning_rate, eps=1e-5)
    generator = torch.Generator().manual_seed(settings.seed)
    history: list[dict[str, float]] = []
    episodes: list[float] = []
    if metrics_path is not None:
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text("")
    for iteration in range(1, settings.iterations + 1):
        started = time.perf_counter()
        results = pool.call("collect", weights_of(network), settings.steps_per_worker)
        collected = time.perf_counter() - started
        parts, advantages, returns = [], [], []
        for result in results:
            batch = result["batch"]
            adv, ret = gae(
                batch["rewards"],
                batch["values"],
                batch["dones"],
                result["last_value"],
                gamma=settings.ppo.gamma,
                lam=settings.ppo.lam,
            )
            parts.append(batch)
            advantages.append(adv)
            returns.append(ret)
            episodes += result["episodes"]
        batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        stats = update(
            network,
            optimiser,
            batch,
            np.concatenate(advantages),
            np.concatenate(returns),
            settings.ppo,
            generator,
        )
        stats["charts/steps_per_s"] = len(batch["actions"]) / collected
        stats["charts/first_candidate_share"] = float(np.mean(batch["actions"] == 0))
        stats["charts/mean_reward"] = float(np.mean(batch["rewards"]))
        if episodes:
            stats["charts/episodic_allocation_pct"] = float(np.mean(episodes[-5:]))
        stats["iteration"] = float(iteration)
        history.append(stats)
        if metrics_path is not None:
            with metrics_path.open("a") as stream:
                stream.write(json.dumps(stats) + "\n")
        if on_iteration is not None:
            on_iteration(iteration, stats)
    return network, history
