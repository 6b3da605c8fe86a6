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

Nothing waits on Ray without a bound:

- each worker takes one CPU, so more workers than the cluster's CPUs are refused
  (:class:`InputError`) before any actor is created;
- connecting to ``ray_address`` first opens a TCP connection to it (5 s), then lets Ray
  try :data:`CONNECT_ATTEMPTS` times (about 40 s each; ``RAY_gcs_server_port_wait_time_s``
  set by the operator takes precedence) — a :class:`DependencyError` naming the address;
- every call to the workers has a deadline (:func:`worker_timeout_s`): the
  ``worker_timeout_s`` setting when given, otherwise :data:`STARTUP_TIMEOUT_S` for the
  start-up (actors placed and started, the PCA walk) and the first iteration, then ten
  times the first iteration's collection, at least :data:`MIN_ITERATION_TIMEOUT_S`.

A worker that dies or misses its deadline ends training with a :class:`WorkerError`
naming the workers and carrying the network as of the last completed iteration, which
the caller can still save; the actors are killed on the way out.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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

STARTUP_TIMEOUT_S = 300.0
"""Deadline of the first calls to the workers: actors placed and started, the PCA walk,
the first iteration."""
MIN_ITERATION_TIMEOUT_S = 120.0
"""The least deadline of a later iteration's collection (ten times the first one's)."""
ITERATION_TIMEOUT_FACTOR = 10.0
CONNECT_PROBE_S = 5.0
CONNECT_ATTEMPTS = 2
"""Ray's attempts to reach a cluster's GCS (about 40 s each) before ``ray.init`` fails."""
_GCS_WAIT = "RAY_gcs_server_port_wait_time_s"
_HOST_PORT = re.compile(r"^(?:ray://)?(?P<host>\[[^\]]+\]|[^:/\[\]]+):(?P<port>\d+)/?$")


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
    worker_timeout_s: float | None = None
    """Deadline of every call to the workers; None: :func:`worker_timeout_s` chooses."""
    ppo: PpoSettings = field(default_factory=PpoSettings)


class TrainingStoppedError(DependencyError):
    """Training ended before its last iteration; holds the training done until then."""

    def __init__(
        self,
        message: str,
        *,
        network: PlacementNetwork | None = None,
        history: Sequence[dict[str, float]] = (),
    ):
        super().__init__(message)
        self.network = network
        """The network after the last completed iteration (None before the first one)."""
        self.history = list(history)
        """The metrics of the completed iterations."""


class WorkerError(TrainingStoppedError):
    """Ray workers died or missed their deadline."""


class TrainingInterruptedError(TrainingStoppedError):
    """The user stopped training (Ctrl-C, SIGINT)."""


def worker_timeout_s(settings: TrainSettings, first_collection_s: float | None) -> float:
    """The deadline of the next call to the workers, given the first iteration's
    collection time (None until it is known)."""
    if settings.worker_timeout_s is not None:
        return settings.worker_timeout_s
    if first_collection_s is None:
        return STARTUP_TIMEOUT_S
    return max(MIN_ITERATION_TIMEOUT_S, ITERATION_TIMEOUT_FACTOR * first_collection_s)


def check_workers(workers: int, cpus: float, where: str) -> None:
    """InputError when ``workers`` (one CPU each) cannot all be placed on ``cpus``."""
    if workers > cpus:
        raise InputError(
            f"{workers} workers need {workers} CPUs (one each) but {where} has {cpus:g}: "
            f"use at most {int(cpus)} workers"
        )


def _probe(address: str) -> None:
    """DependencyError when a host:port address does not accept a TCP connection."""
    match = _HOST_PORT.match(address.strip())
    if match is None:
        return  # "auto", "local", ...: Ray resolves these itself
    host = match.group("host").strip("[]")
    try:
        with socket.create_connection((host, int(match.group("port"))), CONNECT_PROBE_S):
            pass
    except OSError as exc:
        raise DependencyError(f"cannot reach the Ray cluster at {address}: {exc}") from exc


@contextmanager
def _connect_attempts() -> Iterator[None]:
    """Bound Ray's retries to reach a cluster, unless the operator set their own."""
    if _GCS_WAIT in os.environ:
        yield
        return
    os.environ[_GCS_WAIT] = str(CONNECT_ATTEMPTS)
    try:
        yield
    finally:
        os.environ.pop(_GCS_WAIT, None)


def start_ray(address: str | None) -> Any:
    """Import and start Ray (local by default); DependencyError when it cannot."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        import ray
    except ImportError as exc:
        raise DependencyError(f"Ray is not installed ({exc}); use workers=0") from exc
    if ray.is_initialized():
        return ray
    try:
        if address:
            _probe(address)
            with _connect_attempts():
                ray.init(address=address, log_to_driver=False)
        else:
            ray.init(
                num_cpus=os.cpu_count() or 1,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
    except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
        where = f"connect to the Ray cluster at {address}" if address else "start a local Ray"
        raise DependencyError(f"could not {where}: {_first_line(exc)}") from exc
    return ray


def _first_line(exc: BaseException, limit: int = 300) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _numbers(indices: Sequence[int]) -> str:
    return ("worker " if len(indices) == 1 else "workers ") + ", ".join(map(str, indices))


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
        self.actors: list[Any] = []
        self.started = False
        """Whether the workers answered their first call."""
        self.where = (
            f"the Ray cluster at {settings.ray_address}" if settings.ray_address else "local Ray"
        )
        if settings.workers == 0:
            self.ray = None
            self.local = [RolloutWorker(nodes, workloads, seeds[0], **options)]
            return
        if not settings.ray_address and not _ray_running():
            check_workers(settings.workers, os.cpu_count() or 1, "this machine")
        self.ray = start_ray(settings.ray_address)
        check_workers(settings.workers, self.ray.cluster_resources().get("CPU", 0), self.where)
        actor = self.ray.remote(num_cpus=1)(RolloutWorker)
        self.actors = [actor.remote(nodes, workloads, s, **options) for s in seeds]

    def call(self, method: str, *args: Any, timeout_s: float) -> list[Any]:
        """Every worker's ``method(*args)``; WorkerError when one dies or is late."""
        if self.ray is None:
            return [getattr(w, method)(*args) for w in self.local]
        ray = self.ray
        refs = [getattr(a, method).remote(*args) for a in self.actors]
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        results: list[Any] = []
        dead: list[tuple[int, BaseException]] = []
        for index, ref in enumerate(refs):
            if ref in pending:
                continue
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                dead.append((index, exc))
        problems = []
        if dead:
            problems.append(
                f"Ray {_numbers([i for i, _ in dead])} of {len(refs)} died during "
                f"'{method}' ({_first_line(dead[0][1])})"
            )
        if pending:
            late = [i for i, ref in enumerate(refs) if ref in pending]
            problems.append(
                f"Ray {_numbers(late)} of {len(refs)} did not return '{method}' within "
                f"{timeout_s:g} s ({self.where}: {_free_cpus(ray)} CPU(s) free): Ray could "
                "not place them or they are stuck; if iterations are this slow, raise the "
                "worker timeout (--worker-timeout)"
            )
        if problems:
            raise WorkerError("; ".join(problems))
        return results

    def close(self) -> None:
        """Kill the actors (a late one would otherwise keep its CPU)."""
        if self.ray is not None:
            for actor in self.actors:
                with contextlib.suppress(Exception):  # never hide the error that got us here
                    self.ray.kill(actor)


def _free_cpus(ray: Any) -> str:
    try:
        return f"{ray.available_resources().get('CPU', 0):g}"
    except Exception:  # Ray itself unreachable: the error must still say what was late
        return "unknown"


def _ray_running() -> bool:
    try:
        import ray
    except ImportError:
        return False
    return bool(ray.is_initialized())


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
    """Train a placement network; returns it and the per-iteration metrics.

    WorkerError when a Ray worker dies or misses its deadline (module docstring); it
    carries the network as of the last completed iteration."""
    if settings.iterations < 1 or settings.steps_per_worker < 2:
        raise InputError("training needs at least one iteration of at least two steps")
    if settings.worker_timeout_s is not None and not settings.worker_timeout_s > 0:
        raise InputError(f"the worker timeout must be positive, got {settings.worker_timeout_s}")
    torch.manual_seed(settings.seed)
    network = PlacementNetwork()
    history: list[dict[str, float]] = []
    pool = _Pool(nodes, workloads, settings)
    completed: list[dict[str, torch.Tensor]] = []
    """The weights after the last completed iteration (an interrupt may come mid-update)."""

    def iterated(iteration: int, stats: dict[str, float]) -> None:
        completed[:] = [{k: v.detach().clone() for k, v in network.state_dict().items()}]
        if on_iteration is not None:
            on_iteration(iteration, stats)

    try:
        _iterate(pool, network, settings, history, metrics_path, iterated)
    except KeyboardInterrupt:
        if completed:
            network.load_state_dict(completed[0])
        raise TrainingInterruptedError(
            f"interrupted after {len(history)} of {settings.iterations} iterations",
            network=network if completed else None,
            history=history,
        ) from None
    except WorkerError as exc:
        done = len(history)
        where = (
            f"in iteration {done + 1} of {settings.iterations}"
            if pool.started
            else "while starting the workers"
        )
        raise WorkerError(
            f"{exc}, {where}",
            network=network if done else None,
            history=history,
        ) from exc
    finally:
        pool.close()
    return network, history


def _iterate(
    pool: _Pool,
    network: PlacementNetwork,
    settings: TrainSettings,
    history: list[dict[str, float]],
    metrics_path: Path | None,
    on_iteration: ProgressCallback | None,
) -> None:
    """The iterations; ``network`` and ``history`` are updated as they complete."""
    timeout_s = worker_timeout_s(settings, None)
    states = np.concatenate(
        pool.call("first_candidate_states", settings.pca_steps, timeout_s=timeout_s)
    )
    pool.started = True
    network.set_pca(*fit_pca(states))
    optimiser = torch.optim.Adam(network.parameters(), lr=settings.ppo.learning_rate, eps=1e-5)
    generator = torch.Generator().manual_seed(settings.seed)
    episodes: list[float] = []
    if metrics_path is not None:
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text("")
    for iteration in range(1, settings.iterations + 1):
        started = time.perf_counter()
        results = pool.call(
            "collect", weights_of(network), settings.steps_per_worker, timeout_s=timeout_s
        )
        collected = time.perf_counter() - started
        if iteration == 1:
            timeout_s = worker_timeout_s(settings, collected)
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
