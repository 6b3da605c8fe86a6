"""Hot/cold state: a per-job state-backend and TTL recommendation from checkpoint metrics.

What Flink tells us over REST, per completed checkpoint: ``state_size`` (the whole
state) and ``checkpointed_size`` (what that checkpoint wrote — with incremental
checkpoints, only what changed since the last one). From their history:

- size per subtask = the largest ``state_size ÷ num_subtasks`` over the vertices of the
  latest completed checkpoint (``GET /jobs/<id>/checkpoints/details/<id>``, its
  ``tasks``): the state sits in the stateful vertices, often narrower than a stateless
  map beside them; when Flink gives no per-vertex sizes, the latest ``state_size`` ÷ the
  smallest vertex parallelism (an upper estimate: the narrowest vertex may hold it all);
- growth = least-squares slope of ``state_size`` over time (bytes/hour);
- hot fraction = median ``checkpointed_size / state_size`` (incremental backends only):
  the share of the state rewritten per interval, an upper estimate of the hot set;
- read latency: the p99 of the keyed-state ``…GetLatency`` metrics when the job runs
  with ``state.latency-track.keyed-state-enabled`` (absent otherwise).

Rules (thresholds are the named constants below):

- up to ``HEAP_MAX_BYTES`` per subtask → ``hashmap`` (heap): fastest, fits in memory;
- above it, with a hot fraction under ``COLD_MAJORITY`` and at least
  ``DISAGGREGATED_MIN_BYTES`` per subtask → ``forst`` with its primary storage on a
  remote file system and a local cache sized to the hot set (×``CACHE_HEADROOM``):
  cold state lives remotely, the local disk only holds what is touched;
- otherwise → ``rocksdb`` on local disk; with incremental checkpoints in both cases;
- state growing by more than ``GROWTH_ALERT`` of itself per hour → a state TTL:
  ``4 × interval / hot fraction`` when the hot fraction is known (keys untouched for
  four turnovers are cold), else the age of the oldest state at the current growth
  rate (state ÷ growth), at least ``MIN_TTL_MS``.

Every key emitted exists in Flink 2.3 (checked against its ``*Options`` classes):
``state.backend.type``, ``execution.checkpointing.incremental``,
``state.backend.forst.primary-dir``, ``state.backend.forst.cache.dir``,
``state.backend.forst.cache.size-based-limit``, ``state.backend.forst.sync.enforce-local``,
``state.backend.rocksdb.memory.managed``,
``state.backend.rocksdb.localdir``, ``state.latency-track.keyed-state-enabled``,
``table.exec.state.ttl`` (Table/SQL jobs; DataStream jobs set ``StateTtlConfig`` in code).
On an older JobManager (its ``flink-version``): before 1.20 incremental checkpoints are
``state.backend.incremental`` (the newer key is ignored there), and before 2.0 there is
no ForSt, so cold state stays on RocksDB, with the reason.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import yaml

from kubesage.adapters.flink.checkpoint_history import completed_entries
from kubesage.adapters.flink.checkpoint_settings import periodic_interval_ms
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import FlinkError
from kubesage.core.errors import InputError

log = logging.getLogger(__name__)

MIB = 1 << 20
GIB = 1 << 30
HEAP_MAX_BYTES = 256 * MIB
DISAGGREGATED_MIN_BYTES = 2 * GIB
COLD_MAJORITY = 0.25
CACHE_HEADROOM = 1.5
GROWTH_ALERT = 0.10
MIN_TTL_MS = 3_600_000
HIGH_READ_LATENCY_MS = 1.0

Tier = Literal["heap", "local-disk", "disaggregated"]


@dataclass(frozen=True)
class StateSample:
    """One completed checkpoint: when, whole state, bytes it wrote."""

    time_ms: int
    state_bytes: int
    checkpointed_bytes: int


@dataclass(frozen=True)
class VertexState:
    """The state one vertex held in a checkpoint, over its subtasks."""

    name: str
    state_bytes: int
    subtasks: int

    @property
    def per_subtask(self) -> int:
        return self.state_bytes // max(self.subtasks, 1)


@dataclass(frozen=True)
class StateObservation:
    job_id: str
    samples: tuple[StateSample, ...]
    parallelism: int = 1
    """What the whole state is divided by when ``vertex_states`` are unknown."""
    vertex_states: tuple[VertexState, ...] = ()
    """Per vertex, from the latest completed checkpoint (empty: Flink gave none)."""
    interval_ms: int | None = None
    state_backend: str = ""
    read_latency_p99_ms: float | None = None
    flink_version: str = ""
    """The JobManager's ``flink-version`` ("" when unknown: today's keys are used)."""

    def __post_init__(self) -> None:
        if self.parallelism < 1:
            raise InputError(f"job {self.job_id}: parallelism must be ≥ 1")

    @property
    def incremental(self) -> bool:
        """Some checkpoint wrote less than the whole state: the backend is incremental."""
        return any(s.checkpointed_bytes < s.state_bytes for s in self.samples)


@dataclass(frozen=True)
class TieringRecommendation:
    job_id: str
    tier: Tier
    state_bytes: int
    bytes_per_subtask: int
    hot_fraction: float | None
    growth_bytes_per_hour: float
    ttl_ms: int | None
    config: dict[str, str]
    reasons: tuple[str, ...]

    def snippet(self) -> str:
        """The config as ``config.yaml`` lines, the reasons as comments above them."""
        header = "".join(f"# {reason}\n" for reason in self.reasons)
        return f"# job {self.job_id}: {self.tier} state\n{header}" + yaml.safe_dump(
            self.config, sort_keys=False
        )


def growth_per_hour(samples: Sequence[StateSample]) -> float:
    """Least-squares slope of state size over time, bytes/hour (0 with < 2 samples)."""
    if len(samples) < 2:
        return 0.0
    hours = np.array([s.time_ms for s in samples], dtype=np.float64) / 3.6e6
    sizes = np.array([s.state_bytes for s in samples], dtype=np.float64)
    if float(np.ptp(hours)) == 0.0:
        return 0.0
    slope = np.polyfit(hours - hours.mean(), sizes, 1)[0]
    return float(slope)


def hot_fraction(samples: Sequence[StateSample]) -> float | None:
    """Median share of the state a checkpoint rewrote; None unless incremental."""
    ratios = [
        s.checkpointed_bytes / s.state_bytes
        for s in samples
        if s.state_bytes > 0 and s.checkpointed_bytes < s.state_bytes
    ]
    return float(statistics.median(ratios)) if ratios else None


def recommend(
    observation: StateObservation,
    *,
    remote_dir: str | None = None,
    local_dir: str | None = None,
) -> TieringRecommendation:
    """The tier, TTL and config for one job, with the reasons (rules: module docstring)."""
    samples = sorted(observation.samples, key=lambda s: s.time_ms)
    if not samples:
        raise InputError(f"job {observation.job_id}: no completed checkpoint to judge its state by")
    state = samples[-1].state_bytes
    hot = hot_fraction(samples)
    growth = growth_per_hour(samples)
    stateful = [v for v in observation.vertex_states if v.state_bytes > 0]
    if stateful:
        largest = max(stateful, key=lambda v: v.per_subtask)
        per_subtask = largest.per_subtask
        reasons = [
            f"state {_size(state)}, from {len(samples)} checkpoint(s); the largest share "
            f"per subtask is in vertex '{largest.name}': {_size(largest.state_bytes)} over "
            f"{largest.subtasks} subtask(s) = {_size(per_subtask)} each"
        ]
    else:
        per_subtask = state // observation.parallelism
        reasons = [
            f"state {_size(state)} over {observation.parallelism} subtask(s) = "
            f"{_size(per_subtask)} each, from {len(samples)} checkpoint(s)"
        ]
    config: dict[str, str] = {}
    if hot is None:
        reasons.append(
            "hot fraction unknown: checkpoints are full, not incremental"
            if not observation.incremental
            else "hot fraction unknown"
        )
    else:
        reasons.append(f"each checkpoint rewrites {hot:.0%} of the state (hot set ≤ that)")
    tier: Tier
    if per_subtask <= HEAP_MAX_BYTES:
        tier = "heap"
        config["state.backend.type"] = "hashmap"
        reasons.append(f"≤ {_size(HEAP_MAX_BYTES)} per subtask: the heap backend is fastest")
    elif (
        hot is not None
        and hot < COLD_MAJORITY
        and per_subtask >= DISAGGREGATED_MIN_BYTES
        and _has_forst(observation.flink_version, reasons)
    ):
        tier = "disaggregated"
        cache = math.ceil(per_subtask * hot * CACHE_HEADROOM / MIB)
        config["state.backend.type"] = "forst"
        config[_incremental_key(observation.flink_version)] = "true"
        if remote_dir:
            config["state.backend.forst.primary-dir"] = remote_dir
        else:
            reasons.append("set state.backend.forst.primary-dir to a remote file system (DFS)")
        if local_dir:
            config["state.backend.forst.cache.dir"] = local_dir
        config["state.backend.forst.cache.size-based-limit"] = f"{cache}mb"
        # By default ForSt keeps the state of synchronous operators (all SQL and most
        # DataStream operators) local and uses the primary dir for async ones only.
        config["state.backend.forst.sync.enforce-local"] = "false"
        reasons.append(
            f"{1 - hot:.0%} of the state is cold and ≥ {_size(DISAGGREGATED_MIN_BYTES)} per "
            f"subtask: ForSt keeps it remote, with a local cache of {cache} MiB "
            f"(hot set × {CACHE_HEADROOM})"
        )
    else:
        tier = "local-disk"
        config["state.backend.type"] = "rocksdb"
        config[_incremental_key(observation.flink_version)] = "true"
        config["state.backend.rocksdb.memory.managed"] = "true"
        if local_dir:
            config["state.backend.rocksdb.localdir"] = local_dir
        reasons.append(
            f"> {_size(HEAP_MAX_BYTES)} per subtask and mostly hot or not yet large: "
            "RocksDB on local disk with incremental checkpoints"
        )
    latency = observation.read_latency_p99_ms
    if latency is None:
        config["state.latency-track.keyed-state-enabled"] = "true"
        reasons.append("no state access latency metrics: enable latency tracking to see them")
    elif latency > HIGH_READ_LATENCY_MS and tier != "heap":
        reasons.append(
            f"p99 state read {latency:.2f} ms > {HIGH_READ_LATENCY_MS} ms: give the "
            "cache more memory (taskmanager.memory.managed.fraction)"
        )
    ttl = _ttl_ms(state, growth, hot, observation.interval_ms)
    if ttl is not None:
        config["table.exec.state.ttl"] = f"{ttl} ms"
        reasons.append(
            f"state grows {_size(int(growth))}/h ({growth / max(state, 1):.0%} of itself): "
            f"expire keys idle > {ttl / 3.6e6:.1f} h (StateTtlConfig in DataStream code)"
        )
    return TieringRecommendation(
        job_id=observation.job_id,
        tier=tier,
        state_bytes=state,
        bytes_per_subtask=per_subtask,
        hot_fraction=hot,
        growth_bytes_per_hour=growth,
        ttl_ms=ttl,
        config=config,
        reasons=tuple(reasons),
    )


def _ttl_ms(state: int, growth: float, hot: float | None, interval_ms: int | None) -> int | None:
    if state <= 0 or growth <= GROWTH_ALERT * state:
        return None
    # Four turnovers of the hot set, else the age of the oldest state at this growth.
    ttl = 4 * interval_ms / hot if hot and interval_ms else state / growth * 3.6e6
    return max(MIN_TTL_MS, math.ceil(ttl))


def _size(count: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if abs(count) >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _version(text: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a ``flink-version`` such as ``1.19.1`` (None: unknown)."""
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _incremental_key(flink_version: str) -> str:
    """Incremental checkpoints' key: renamed in Flink 1.20 (the old one is ignored after,
    the new one before)."""
    version = _version(flink_version)
    if version is not None and version < (1, 20):
        return "state.backend.incremental"
    return "execution.checkpointing.incremental"


def _has_forst(flink_version: str, reasons: list[str]) -> bool:
    """ForSt (disaggregated state) exists from Flink 2.0; say so where it does not."""
    version = _version(flink_version)
    if version is None or version >= (2, 0):
        return True
    reasons.append(f"ForSt needs Flink 2.0 (this cluster runs {flink_version}): RocksDB instead")
    return False


def observe_state(client: FlinkClient, job_id: str) -> StateObservation:
    """Checkpoint history, per-vertex state, backend and (if tracked) read latency of a job."""
    entries = completed_entries(client.checkpoints(job_id))
    detail = client.job(job_id)
    backend = ""
    interval = None
    try:
        backend = client.checkpoint_config(job_id).state_backend
        interval = periodic_interval_ms(client, job_id)
    except FlinkError as exc:
        log.info("job %s: no checkpoint config (%s)", job_id, exc)
    names = {v.id: v.name for v in detail.vertices}
    try:
        version = client.overview().flink_version
    except FlinkError as exc:
        log.info("no Flink version (%s): today's config keys", exc)
        version = ""
    return StateObservation(
        job_id=job_id,
        samples=tuple(
            StateSample(e.trigger_timestamp_ms, e.state_size_bytes, e.checkpointed_size_bytes)
            for e in entries
        ),
        parallelism=min((v.parallelism for v in detail.vertices), default=1),
        vertex_states=_vertex_states(client, job_id, entries[-1].id, names) if entries else (),
        interval_ms=interval,
        state_backend=backend,
        read_latency_p99_ms=_read_latency_p99(client, job_id, list(names)),
        flink_version=version,
    )


def _vertex_states(
    client: FlinkClient, job_id: str, checkpoint_id: int, names: dict[str, str]
) -> tuple[VertexState, ...]:
    """The state per vertex in checkpoint ``checkpoint_id`` (empty when Flink gives none)."""
    try:
        tasks = client.checkpoint_details(job_id, checkpoint_id).tasks
    except FlinkError as exc:
        log.info("job %s: no per-vertex state of checkpoint %d (%s)", job_id, checkpoint_id, exc)
        return ()
    return tuple(
        VertexState(names.get(vertex_id, vertex_id), task.state_size_bytes, task.num_subtasks)
        for vertex_id, task in tasks.items()
        if task.num_subtasks > 0
    )


def _read_latency_p99(client: FlinkClient, job_id: str, vertex_ids: list[str]) -> float | None:
    """Worst p99 of the keyed-state get-latency metrics (ns → ms); None when not tracked."""
    worst: float | None = None
    for vertex_id in vertex_ids:
        try:
            names = [n for n in client.metric_names(job_id, vertex_id) if "GetLatency_p99" in n]
            metrics = client.subtask_metrics(job_id, vertex_id, names)
        except FlinkError as exc:
            log.info("job %s vertex %s: no state latency metrics (%s)", job_id, vertex_id, exc)
            continue
        for metric in metrics.values():
            value = metric.max / 1e6
            worst = value if worst is None else max(worst, value)
    return worst
