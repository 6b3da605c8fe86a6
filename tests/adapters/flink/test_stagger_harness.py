"""The staggering experiment's set-up (``benchmarks/flink_support/stagger_harness.py``)."""

from __future__ import annotations

import pytest

from benchmarks.flink_support.stagger_harness import equal_interval
from kubesage.adapters.flink.errors import StaggerInputError
from kubesage.adapters.flink.stagger import CheckpointProfile


def test_equal_interval_leaves_room_for_factor_times_the_durations() -> None:
    probed = [CheckpointProfile("a", 10_000, 300, 5), CheckpointProfile("b", 10_000, 450)]
    roomy = equal_interval(probed, 3.0, minimum_ms=1_000, step_ms=100)
    assert {p.interval_ms for p in roomy} == {2_300}  # 3 × 750 ms, rounded up to 100 ms
    assert [(p.job_id, p.duration_ms, p.size_bytes) for p in roomy] == [
        ("a", 300, 5),
        ("b", 450, 0),
    ]
    assert equal_interval(probed, 0.5, minimum_ms=1_000, step_ms=100)[0].interval_ms == 1_000
    with pytest.raises(StaggerInputError):
        equal_interval(probed, 0.0, minimum_ms=1_000, step_ms=100)
