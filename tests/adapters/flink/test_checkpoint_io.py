"""Checkpoint write rate and duration p95 from Flink's checkpoint history."""

from __future__ import annotations

from typing import Any

import pytest

from kubesage.adapters.flink.checkpoint_io import (
    CheckpointWrite,
    checkpoint_writes,
    duration_quantile,
    history_writes,
    peak_write_rate,
    write_rate,
)
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import StaggerInputError
from kubesage.adapters.flink.rest_models import CheckpointStats

from .conftest import recorded, replay


def entry(checkpoint_id: int, trigger: int, ack: int, size: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": checkpoint_id,
        "status": "COMPLETED",
        "is_savepoint": False,
        "trigger_timestamp": trigger,
        "latest_ack_timestamp": ack,
        "end_to_end_duration": max(0, ack - trigger),
        "checkpointed_size": size,
        "state_size": size * 10,
        "persisted_data": 0,
    } | extra


def stats(*entries: dict[str, Any]) -> CheckpointStats:
    return CheckpointStats.model_validate({"counts": {}, "history": list(entries)})


def test_recorded_history_gives_one_write_per_completed_checkpoint() -> None:
    history = CheckpointStats.model_validate(recorded("checkpoints")["body"])
    writes = checkpoint_writes("job", history)
    assert [w.checkpoint_id for w in writes] == [1, 2, 3, 4, 5]  # oldest first
    assert writes[2] == CheckpointWrite("job", 3, 1796005365102, 1796005365401, 33660)
    assert [w.duration_ms for w in writes] == [318, 90, 299, 198, 55]
    assert duration_quantile(w.duration_ms for w in writes) == 318
    # Checkpoint 5: 38715 B over 55 ms is the densest (~704 kB/s); alone on its grid steps.
    assert peak_write_rate(writes, step_ms=1) == pytest.approx(38715 / 0.055)


def test_history_is_filtered_by_trigger_time_and_skips_failures_and_savepoints() -> None:
    history = stats(
        entry(1, 1_000, 1_200, 100),
        entry(2, 2_000, 2_100, 100, status="FAILED"),
        entry(3, 3_000, 3_100, 100, is_savepoint=True),
        entry(4, 4_000, 4_100, 100),
        entry(5, 5_000, -1, 100, end_to_end_duration=300),  # no ack time reported
    )
    writes = checkpoint_writes("j", history, since_ms=1_001)
    assert [(w.checkpoint_id, w.start_ms, w.end_ms) for w in writes] == [
        (4, 4_000, 4_100),
        (5, 5_000, 5_300),
    ]
    assert [w.checkpoint_id for w in checkpoint_writes("j", history, until_ms=4_000)] == [1]


def test_aligned_checkpoints_add_up_and_staggered_ones_do_not() -> None:
    # Three jobs writing 1 MB each over 200 ms: 5 MB/s apiece.
    aligned = [CheckpointWrite(j, 1, 10_000, 10_200, 1_000_000) for j in "abc"]
    staggered = [
        CheckpointWrite(j, 1, 10_000 + 300 * i, 10_200 + 300 * i, 1_000_000)
        for i, j in enumerate("abc")
    ]
    assert peak_write_rate(aligned) == pytest.approx(15e6)
    assert peak_write_rate(staggered) == pytest.approx(5e6)
    timeline = write_rate(staggered)
    assert timeline.total_bytes == pytest.approx(3e6)
    assert (timeline.start_ms, timeline.step_ms, timeline.peak_at_ms) == (10_000, 10, 10_000)
    assert len(timeline.bytes_per_s) == (10_800 - 10_000) // 10
    assert timeline.bytes_per_s[25] == 0.0  # 10 250 ms: between the first and the second


def test_partial_overlap_and_coarse_steps() -> None:
    writes = [
        CheckpointWrite("a", 1, 0, 100, 1_000),  # 10 kB/s
        CheckpointWrite("b", 1, 50, 150, 3_000),  # 30 kB/s
    ]
    assert peak_write_rate(writes, step_ms=10) == pytest.approx(40_000)
    timeline = write_rate(writes, step_ms=1_000)  # one step: the mean over a second
    assert timeline.bytes_per_s.tolist() == pytest.approx([4_000])
    fine = write_rate(writes, step_ms=10)
    assert fine.peak_over(1_000) == pytest.approx(4_000)  # all 4 kB within one second
    assert fine.peak_over(100) == pytest.approx(3_500 / 0.1)  # [50, 150): 500 B + 3 kB
    assert fine.peak_over(1) == pytest.approx(fine.peak_bytes_per_s)


def test_a_fast_lone_checkpoint_peaks_higher_on_the_fine_grid_but_not_per_second() -> None:
    # Staggered: each 4 MB checkpoint alone, in 100 ms, 1 s apart. Aligned: three at once,
    # sharing the machine, 600 ms each.
    lone = [
        CheckpointWrite(j, 1, 1_000 * i, 1_000 * i + 100, 4_000_000) for i, j in enumerate("abc")
    ]
    together = [CheckpointWrite(j, 1, 0, 600, 4_000_000) for j in "abc"]
    assert peak_write_rate(lone) == pytest.approx(40e6)
    assert peak_write_rate(together) == pytest.approx(20e6)
    assert write_rate(lone).peak_over(1_000) == pytest.approx(4e6)
    assert write_rate(together).peak_over(1_000) == pytest.approx(12e6)


def test_instant_checkpoint_counts_as_one_millisecond() -> None:
    timeline = write_rate([CheckpointWrite("a", 1, 5, 5, 100)], step_ms=10)
    assert timeline.total_bytes == pytest.approx(100)
    assert timeline.peak_bytes_per_s == pytest.approx(100 / 0.01)


def test_empty_and_invalid_inputs() -> None:
    assert peak_write_rate([]) == 0.0
    assert write_rate([]).peak_at_ms is None
    assert duration_quantile([]) is None
    assert duration_quantile(range(1, 101)) == 95
    assert duration_quantile([7], 0.5) == 7
    with pytest.raises(StaggerInputError):
        write_rate([], step_ms=0)
    with pytest.raises(StaggerInputError):
        duration_quantile([1], 0.0)
    with pytest.raises(StaggerInputError):
        write_rate([]).peak_over(0)
    assert write_rate([]).peak_over(1_000) == 0.0


def test_history_writes_reads_every_job_over_rest() -> None:
    body = recorded("checkpoints")
    transport = replay({("GET", "/jobs/a/checkpoints"): body, ("GET", "/jobs/b/checkpoints"): body})
    with FlinkClient("http://flink", transport=transport) as client:
        writes = history_writes(client, ["a", "b"], since_ms=1796005375102)
    assert [(w.job_id, w.checkpoint_id) for w in writes] == [("a", 4), ("a", 5), ("b", 4), ("b", 5)]
