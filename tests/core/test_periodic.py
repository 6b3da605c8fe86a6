"""``every``: repeated work on a daemon thread, stopped by the function it returns."""

from __future__ import annotations

import threading
import time

import pytest

from kubesage.core.periodic import every


def test_work_repeats_until_stopped_and_a_run_in_progress_finishes() -> None:
    runs: list[float] = []
    finished = threading.Event()

    def work() -> None:
        runs.append(time.monotonic())
        if len(runs) == 3:
            time.sleep(0.05)  # the stopper arrives while this run is in progress
            finished.set()

    stop = every(0.01, work, name="test-periodic")
    deadline = time.monotonic() + 5
    while len(runs) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    stop()
    assert finished.is_set()  # the run in progress was not cut short
    count = len(runs)
    assert count >= 3
    time.sleep(0.05)
    assert len(runs) == count  # nothing ran after the stopper returned
    assert not any(t.name == "test-periodic" for t in threading.enumerate())


def test_a_run_that_raises_is_logged_and_the_chore_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs: list[int] = []

    def flaky() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise OSError("the disk went away")

    stop = every(0.01, flaky, name="flaky")
    try:
        deadline = time.monotonic() + 10
        while len(runs) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop()
    assert len(runs) >= 3
    assert "flaky failed" in caplog.text and "the disk went away" in caplog.text
