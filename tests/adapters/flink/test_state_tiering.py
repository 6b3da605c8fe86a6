"""Hot/cold state recommendations: the tier rules, TTL, snippet, and observing a real job."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.state_tiering import (
    GIB,
    MIB,
    MIN_TTL_MS,
    StateObservation,
    StateSample,
    growth_per_hour,
    hot_fraction,
    observe_state,
    recommend,
)
from kubesage.core.errors import InputError

from .conftest import recorded

JOB = "fdb4749fec8f525bb194110b606c1048"
HOUR_MS = 3_600_000


def steady(
    state: int, written: int, count: int = 5, *, growth_per_checkpoint: int = 0
) -> tuple[StateSample, ...]:
    """Checkpoints one minute apart: whole state and bytes each wrote."""
    return tuple(
        StateSample(i * 60_000, state + i * growth_per_checkpoint, written) for i in range(count)
    )


@pytest.mark.parametrize(
    ("samples", "parallelism", "tier", "backend"),
    [
        (steady(100 * MIB, 100 * MIB), 1, "heap", "hashmap"),
        (steady(2 * GIB, 2 * GIB), 4, "local-disk", "rocksdb"),  # 512 MiB each, hot unknown
        (steady(2 * GIB, 1 * GIB), 1, "local-disk", "rocksdb"),
        (steady(40 * GIB, 2 * GIB), 4, "disaggregated", "forst"),
        (steady(40 * GIB, 20 * GIB), 4, "local-disk", "rocksdb"),  # mostly hot
        (steady(1 * GIB, 10 * MIB), 1, "local-disk", "rocksdb"),  # cold but small
    ],
)
def test_tier_rules(
    samples: tuple[StateSample, ...], parallelism: int, tier: str, backend: str
) -> None:
    observation = StateObservation(JOB, samples, parallelism=parallelism, interval_ms=60_000)
    per_subtask = samples[-1].state_bytes // parallelism
    advice = recommend(observation)
    assert advice.tier == tier
    assert advice.config["state.backend.type"] == backend
    assert advice.bytes_per_subtask == per_subtask
    if backend != "hashmap":
        assert advice.config["execution.checkpointing.incremental"] == "true"


@pytest.mark.parametrize(
    ("version", "tier", "incremental_key"),
    [
        ("2.3.0", "disaggregated", "execution.checkpointing.incremental"),
        ("1.20.1", "local-disk", "execution.checkpointing.incremental"),
        ("1.19.1", "local-disk", "state.backend.incremental"),
        ("", "disaggregated", "execution.checkpointing.incremental"),  # unknown: today's
    ],
)
def test_keys_and_backends_follow_the_jobmanagers_flink_version(
    version: str, tier: str, incremental_key: str
) -> None:
    observation = StateObservation(
        JOB, steady(40 * GIB, 2 * GIB), parallelism=4, flink_version=version
    )
    advice = recommend(observation)
    assert advice.tier == tier
    assert advice.config[incremental_key] == "true"
    if tier == "local-disk":  # cold and large, but ForSt exists from Flink 2.0 only
        assert any(f"ForSt needs Flink 2.0 (this cluster runs {version})" in reason
                   for reason in advice.reasons)  # fmt: skip


def test_disaggregated_cache_is_sized_to_the_hot_set() -> None:
    observation = StateObservation(JOB, steady(40 * GIB, 2 * GIB), parallelism=4)
    advice = recommend(observation, remote_dir="s3://bucket/forst", local_dir="/mnt/ssd")
    # 10 GiB per subtask, 5 % hot, × 1.5 headroom = 768 MiB.
    assert advice.hot_fraction == pytest.approx(0.05)
    assert advice.config["state.backend.forst.cache.size-based-limit"] == "768mb"
    assert advice.config["state.backend.forst.primary-dir"] == "s3://bucket/forst"
    assert advice.config["state.backend.forst.cache.dir"] == "/mnt/ssd"
    assert advice.config["state.backend.forst.sync.enforce-local"] == "false"


def test_missing_remote_dir_is_a_reason_not_a_guess() -> None:
    advice = recommend(StateObservation(JOB, steady(40 * GIB, 2 * GIB), parallelism=4))
    assert "state.backend.forst.primary-dir" not in advice.config
    assert any("primary-dir" in reason for reason in advice.reasons)


def test_growing_state_gets_a_ttl() -> None:
    # 1 GiB growing 100 MiB a minute; 5 % rewritten per 60 s checkpoint.
    samples = steady(GIB, 50 * MIB, growth_per_checkpoint=100 * MIB)
    advice = recommend(StateObservation(JOB, samples, interval_ms=60_000))
    assert advice.growth_bytes_per_hour == pytest.approx(100 * MIB * 60)
    hot = advice.hot_fraction
    assert hot is not None
    assert advice.ttl_ms == max(MIN_TTL_MS, round(4 * 60_000 / hot))
    assert advice.config["table.exec.state.ttl"] == f"{advice.ttl_ms} ms"


def test_flat_state_gets_no_ttl_and_latency_tracking_when_unmeasured() -> None:
    advice = recommend(StateObservation(JOB, steady(GIB, 50 * MIB)))
    assert advice.ttl_ms is None and "table.exec.state.ttl" not in advice.config
    assert advice.config["state.latency-track.keyed-state-enabled"] == "true"
    measured = recommend(StateObservation(JOB, steady(GIB, 50 * MIB), read_latency_p99_ms=3.0))
    assert "state.latency-track.keyed-state-enabled" not in measured.config
    assert any("p99 state read 3.00 ms" in reason for reason in measured.reasons)


def test_snippet_is_yaml_with_reasons_as_comments() -> None:
    advice = recommend(StateObservation(JOB, steady(40 * GIB, 2 * GIB), parallelism=4))
    snippet = advice.snippet()
    assert yaml.safe_load(snippet) == advice.config
    assert snippet.count("\n# ") >= len(advice.reasons)


def test_estimates() -> None:
    assert growth_per_hour([]) == 0.0
    assert growth_per_hour([StateSample(0, 1, 1), StateSample(0, 5, 5)]) == 0.0
    assert growth_per_hour([StateSample(0, 0, 0), StateSample(HOUR_MS, 10, 10)]) == (
        pytest.approx(10)
    )
    assert hot_fraction(steady(100, 100)) is None  # full checkpoints: unknown
    assert hot_fraction(steady(100, 20)) == pytest.approx(0.2)


def test_bad_input() -> None:
    with pytest.raises(InputError, match="no completed checkpoint"):
        recommend(StateObservation(JOB, ()))
    with pytest.raises(InputError, match="parallelism"):
        StateObservation(JOB, (), parallelism=0)


def test_observe_a_recorded_job(replay_client: Callable[..., FlinkClient]) -> None:
    client = replay_client("checkpoints", "job_running", "checkpoint_config", "metric_names_source")
    observation = observe_state(client, JOB)
    assert [s.time_ms for s in observation.samples] == sorted(
        s.time_ms for s in observation.samples
    )
    assert len(observation.samples) == 5
    assert observation.parallelism == 1
    assert observation.interval_ms == 10_000
    assert observation.state_backend == "HashMapStateBackend"
    assert observation.read_latency_p99_ms is None  # the job does not track latency
    advice = recommend(observation)
    assert advice.tier == "heap"


def _keyed_aggregation_beside_a_wide_map() -> tuple[dict[str, Any], dict[str, Any], int]:
    """The recorded job with 1 GiB of state in a p=1 vertex beside a stateless p=8 one:
    its ``/jobs/<id>`` and ``/checkpoints`` replies and the latest checkpoint's id."""
    job = copy.deepcopy(recorded("job_running"))
    for vertex, parallelism in zip(job["body"]["vertices"], (1, 8, 1), strict=True):
        vertex["parallelism"] = parallelism
    checkpoints = copy.deepcopy(recorded("checkpoints"))
    for entry in checkpoints["body"]["history"]:
        entry["state_size"] = entry["checkpointed_size"] = GIB
    latest = max(checkpoints["body"]["history"], key=lambda e: e["trigger_timestamp"])["id"]
    return job, checkpoints, latest


def test_the_size_per_subtask_comes_from_the_stateful_vertex(
    replay_client: Callable[..., FlinkClient],
) -> None:
    job, checkpoints, latest = _keyed_aggregation_beside_a_wide_map()
    source, mapper, aggregate = (v["id"] for v in job["body"]["vertices"])
    task = {"id": latest, "status": "COMPLETED", "checkpointed_size": 0, "end_to_end_duration": 9}
    details = {
        "status": 200,
        "body": {
            "className": "completed",
            "id": latest,
            "status": "COMPLETED",
            "is_savepoint": False,
            "state_size": GIB,
            "checkpointed_size": GIB,
            "num_subtasks": 10,
            "tasks": {
                source: {**task, "state_size": 0, "num_subtasks": 1},
                mapper: {**task, "state_size": 0, "num_subtasks": 8},
                aggregate: {**task, "state_size": GIB, "num_subtasks": 1},
            },
        },
    }
    client = replay_client(
        "checkpoint_config",
        "metric_names_source",
        **{
            f"GET /jobs/{JOB}": job,
            f"GET /jobs/{JOB}/checkpoints": checkpoints,
            f"GET /jobs/{JOB}/checkpoints/details/{latest}": details,
        },
    )
    advice = recommend(observe_state(client, JOB))
    assert advice.bytes_per_subtask == GIB
    assert advice.tier == "local-disk"
    assert advice.config["state.backend.type"] == "rocksdb"
    assert "vertex 'sink: Writer': 1.0 GiB over 1 subtask(s) = 1.0 GiB each" in advice.reasons[0]


def test_without_per_vertex_sizes_the_narrowest_vertex_is_assumed_to_hold_it(
    replay_client: Callable[..., FlinkClient],
) -> None:
    job, checkpoints, _ = _keyed_aggregation_beside_a_wide_map()
    client = replay_client(
        "checkpoint_config",
        "metric_names_source",
        **{f"GET /jobs/{JOB}": job, f"GET /jobs/{JOB}/checkpoints": checkpoints},
    )
    observation = observe_state(client, JOB)
    assert observation.vertex_states == ()  # the details endpoint answered 404
    assert observation.parallelism == 1
    assert recommend(observation).tier != "heap"
