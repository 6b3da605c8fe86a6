"""The file-system counters of the checkpoint I/O figures (flink_support/io_sampler.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from benchmarks.flink_support.io_sampler import IoTimeline, sample_io


def test_peak_rate_is_taken_over_the_window() -> None:
    timeline = IoTimeline(times_ms=[0, 50, 100, 150, 200, 250], dir_bytes=[0, 0, 0, 500, 500, 500])
    # 500 B landed between 100 and 150 ms: over a 100 ms window, 5 kB/s at most.
    assert timeline.peak_rate(timeline.dir_bytes, window_ms=100) == pytest.approx(5_000)
    assert timeline.peak_rate(timeline.dir_bytes, window_ms=250) == pytest.approx(2_000)
    assert IoTimeline(times_ms=[0], dir_bytes=[9]).peak_rate([9]) == 0.0


def test_directory_growth_counts_new_and_grown_files_not_deletions(tmp_path: Path) -> None:
    old = tmp_path / "chk-1" / "_metadata"
    old.parent.mkdir()
    old.write_bytes(b"x" * 100)  # there before sampling: not counted
    with sample_io(tmp_path, [os.getpid()], period_s=0.01) as timeline:
        state = tmp_path / "chk-2" / "state"
        state.parent.mkdir()
        state.write_bytes(b"y" * 1_000)
        time.sleep(0.05)
        with state.open("ab") as grown:
            grown.write(b"y" * 500)
        old.unlink()
        time.sleep(0.05)
    assert timeline.dir_total == 1_500
    assert len(timeline.times_ms) == len(timeline.dir_bytes) >= 3
    assert timeline.dir_bytes == sorted(timeline.dir_bytes)
    assert timeline.proc_total is not None and timeline.proc_total >= 0
