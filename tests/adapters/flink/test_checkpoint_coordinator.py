"""The checkpoint coordinator, the history analysis and the Flink settings, over recorded
Flink replies: outcomes, errors, profiles, conf."""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kubesage.adapters.flink.checkpoint_coordinator import (
    CheckpointCoordinator,
    CheckpointRecord,
    CoordinatorReport,
    single_job_plan,
)
from kubesage.adapters.flink.checkpoint_history import (
    completed_entries,
    history_peak_concurrent,
    history_windows,
    measure_profiles,
    observed_profile,
    profile_from_records,
)
from kubesage.adapters.flink.checkpoint_settings import periodic_interval_ms, submit_time_conf
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import FlinkError, StaggerInputError
from kubesage.adapters.flink.stagger import (
    CheckpointProfile,
    plan_stagger,
)

from .conftest import path_of, recorded

JOB = "fdb4749fec8f525bb194110b606c1048"
TRIGGER = f"POST /jobs/{JOB}/checkpoints"
STATUS = f"GET {path_of('checkpoint_trigger_completed')}"
HISTORY = f"GET /jobs/{JOB}/checkpoints"

Build = Callable[..., FlinkClient]


def completed_as(checkpoint_id: int) -> dict[str, Any]:
    """The recorded COMPLETED trigger reply, pointing at a checkpoint of the recorded history."""
    reply = copy.deepcopy(recorded("checkpoint_trigger_completed"))
    reply["body"]["operation"]["checkpointId"] = checkpoint_id
    return reply


class SteppedTime(threading.Event):
    """A clock that moves only while the coordinator waits: as the coordinator's ``stop``,
    ``wait(t)`` advances it by ``t`` (whole milliseconds) at once. The slots a window
    holds are then exact, however loaded the machine."""

    def __init__(self, start_ms: int = 1_000_050) -> None:
        super().__init__()
        self.now_ms = start_ms

    def clock(self) -> float:
        return (self.now_ms + 0.5) / 1000  # half a millisecond in: no float rounding down

    def wait(self, timeout: float | None = None) -> bool:
        self.now_ms += round((timeout or 0) * 1000)
        return self.is_set()


def one_job_coordinator(client: FlinkClient, **kwargs: Any) -> CheckpointCoordinator:
    return CheckpointCoordinator(client, single_job_plan(JOB, 10_000), poll_s=0.001, **kwargs)


def test_a_completed_checkpoint_is_timed_from_the_history(replay_client: Build) -> None:
    client = replay_client(
        "checkpoint_trigger",
        "checkpoints",
        **{STATUS: [recorded("checkpoint_trigger_in_progress"), completed_as(4)]},
    )
    record = one_job_coordinator(client).checkpoint_now(JOB, poll_s=0.001)
    assert record.outcome == "completed"
    assert record.checkpoint_id == 4
    # Checkpoint 4 of the recorded history: triggered at …375102, 198 ms end to end.
    assert (record.start_ms, record.end_ms) == (1796005375102, 1796005375300)
    assert record.duration_ms == 198
    assert record.size_bytes == 39726


def test_completed_without_checkpoint_id_is_a_failure_with_its_cause(
    replay_client: Build,
) -> None:
    # The failed reply was recorded for another request id: served for ours.
    failed = recorded("checkpoint_trigger_failed")
    client = replay_client("checkpoint_trigger", "checkpoints", **{STATUS: failed})
    record = one_job_coordinator(client).checkpoint_now(JOB, poll_s=0.001)
    assert record.outcome == "failed"
    assert record.checkpoint_id is None
    assert "Not all required tasks are currently running" in record.detail


def test_a_checkpoint_missing_from_the_history_is_kept_without_times(
    replay_client: Build,
) -> None:
    client = replay_client("checkpoint_trigger", "checkpoints", **{STATUS: completed_as(99)})
    record = one_job_coordinator(client).checkpoint_now(JOB, poll_s=0.001, timing_wait_s=0.05)
    assert record.outcome == "completed"
    assert record.start_ms is None and "not in the checkpoint history" in record.detail


def test_a_history_that_lags_is_read_again(replay_client: Build) -> None:
    # Flink's REST cache serves the older history first, then the one with checkpoint 9.
    lagging = [recorded("checkpoints"), recorded("checkpoints_after_restart")]
    client = replay_client("checkpoint_trigger", **{STATUS: completed_as(9), HISTORY: lagging})
    seen: list[CheckpointRecord] = []
    coordinator = one_job_coordinator(client, on_record=seen.append)
    record = coordinator.checkpoint_now(JOB, poll_s=0.01)
    assert (record.start_ms, record.duration_ms) == (1796005401858, 168)
    assert seen == [record]


def test_flink_errors_are_counted_and_never_stop_the_loop(replay_client: Build) -> None:
    # Unknown job: every trigger is a 404 (Flink's recorded body); the loop goes on.
    client = replay_client()
    plan = plan_stagger([CheckpointProfile(JOB, 100, 10), CheckpointProfile("other", 100, 10)])
    seen: list[CheckpointRecord] = []
    time = SteppedTime()
    coordinator = CheckpointCoordinator(
        client, plan, poll_s=0.005, on_record=seen.append, clock=time.clock
    )
    report = coordinator.run(duration_s=0.45, stop=time)
    # both jobs' slots at 100, 200, 300 and 400 ms: the window starts 50 ms past one
    assert report.count("trigger-error") == 8
    assert report.flink_errors == report.count("trigger-error")
    assert {r.job_id for r in seen} == {JOB, "other"}
    assert all("not found" in r.detail for r in seen)


class LateTime(SteppedTime):
    """Every wait ends 20 ms late, as on a loaded machine."""

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait((timeout or 0) + 0.020)


def test_a_slot_of_the_window_reached_late_is_still_triggered(replay_client: Build) -> None:
    """The window [1,000,006, 1,001,006) ms holds one slot, at 1,001,000; the loop wakes
    for it 20 ms late, past the window's end, and triggers it all the same."""
    time = LateTime(start_ms=1_000_006)
    coordinator = CheckpointCoordinator(
        replay_client(), single_job_plan(JOB, 1_000), poll_s=0.005, clock=time.clock
    )
    report = coordinator.run(duration_s=1.0, stop=time, drain_s=0)
    assert [(r.outcome, r.scheduled_ms) for r in report.records] == [("trigger-error", 1_001_000)]


def test_the_loop_triggers_on_the_plan_and_skips_a_slot_still_in_flight(
    replay_client: Build,
) -> None:
    client = replay_client(
        "checkpoint_trigger", "checkpoints", **{STATUS: recorded("checkpoint_trigger_in_progress")}
    )
    time = SteppedTime()  # 50 ms past a slot: the window holds the slots at 100, 200, 300
    coordinator = CheckpointCoordinator(
        client, single_job_plan(JOB, 100), poll_s=0.005, trigger_timeout_s=10, clock=time.clock
    )
    report = coordinator.run(duration_s=0.35, drain_s=0.05, stop=time)
    outcomes = [r.outcome for r in report.records]
    assert outcomes == ["skipped", "skipped", "timed-out"]
    scheduled = [r.scheduled_ms for r in report.records if r.outcome == "skipped"]
    assert all(b - a == 100 for a, b in itertools.pairwise(scheduled))


class _StallingClient:
    """Answers every trigger with a Flink error; the first call takes 30 s of the
    coordinator's clock (a JobManager failover). Stops the loop once it has seen
    enough (``stop``), so a coordinator that fires overdue slots cannot run on."""

    def __init__(self, offset: list[float], stop: threading.Event) -> None:
        self.offset, self.stop = offset, stop
        self.triggers: list[str] = []

    def trigger_checkpoint(self, job_id: str) -> str:
        self.triggers.append(job_id)
        if len(self.triggers) == 1:
            self.offset[0] += 30.0
        if len(self.triggers) > 6:
            self.stop.set()
        raise FlinkError("trigger failed")

    def checkpoint_trigger_status(self, job_id: str, request_id: str) -> Any:
        raise AssertionError("no trigger succeeded")

    def checkpoints(self, job_id: str) -> Any:
        raise AssertionError("no checkpoint completed")

    def checkpoint_config(self, job_id: str) -> Any:
        raise AssertionError("no trigger is pending")


def test_slots_a_stall_made_late_are_skipped_not_fired_together() -> None:
    """After a 30 s stall every job's slots are overdue: firing them would start the
    three jobs' checkpoints together, as the plan exists to prevent. Each job skips to
    its next slot on the plan instead, and the skip is recorded with why."""
    offset = [0.0]
    stop = threading.Event()
    client = _StallingClient(offset, stop)
    plan = plan_stagger([CheckpointProfile(job, 10_000, 1_000) for job in ("a", "b", "c")])
    assert len(set(plan.phases_ms.values())) == 3
    skipped: list[CheckpointRecord] = []

    def seen(record: CheckpointRecord) -> None:
        if record.outcome == "skipped":
            skipped.append(record)
            if len(skipped) == 3:
                stop.set()

    base = time.time()  # read once: run() must start in the same millisecond as the epoch
    coordinator = CheckpointCoordinator(
        client,
        plan,
        epoch_ms=int(base * 1000) - min(plan.phases_ms.values()),
        poll_s=0.005,
        clock=lambda: base + offset[0],
        on_record=seen,
    )
    coordinator.run(duration_s=120, stop=stop, drain_s=0)
    assert client.triggers == [min(plan.phases_ms, key=plan.phases_ms.__getitem__)]
    assert sorted(r.job_id for r in skipped) == ["a", "b", "c"]
    assert all("ms late (a call stalled)" in r.detail for r in skipped)
    assert all("3 slot(s) skipped" in r.detail for r in skipped if r.job_id != client.triggers[0])


def test_a_trigger_is_given_up_only_past_the_jobs_own_checkpoint_timeout(
    replay_client: Build,
) -> None:
    # Flink keeps writing a checkpoint until execution.checkpointing.timeout (the
    # recorded job's 10 min): a slot given up sooner would queue the next trigger behind
    # it, off the plan. Without the job's config, the coordinator's own timeout holds.
    in_progress = {STATUS: recorded("checkpoint_trigger_in_progress")}
    timeouts = {}
    for names in (("checkpoint_trigger", "checkpoints", "checkpoint_config"),
                  ("checkpoint_trigger", "checkpoints")):  # fmt: skip
        time = SteppedTime()
        coordinator = CheckpointCoordinator(
            replay_client(*names, **in_progress),
            single_job_plan(JOB, 100),
            poll_s=0.005,
            trigger_timeout_s=0.05,
            clock=time.clock,
        )
        report = coordinator.run(duration_s=0.3, drain_s=0.02, stop=time)
        timeouts[len(names)] = [r.detail for r in report.records if r.outcome == "timed-out"]
    assert not any("trigger timeout" in detail for detail in timeouts[3]), timeouts
    assert any("trigger timeout" in detail for detail in timeouts[2]), timeouts


def test_stop_event_ends_the_loop(replay_client: Build) -> None:
    stop = threading.Event()
    stop.set()
    report = one_job_coordinator(replay_client()).run(stop=stop)
    assert report.records == []


def test_profiles_from_history_take_the_longest_duration_and_median_size(
    replay_client: Build,
) -> None:
    client = replay_client("checkpoints_after_restart")
    stats = client.checkpoints(JOB)
    entries = completed_entries(stats)
    assert [e.id for e in entries] == sorted(e.id for e in entries)
    assert all(e.status == "COMPLETED" for e in entries)  # checkpoint 11 FAILED is left out
    profile = observed_profile(JOB, 10_000, entries)
    assert profile.duration_ms == max(e.end_to_end_duration_ms for e in entries)
    assert observed_profile(JOB, 10_000, []).duration_ms == 1_000
    with pytest.raises(StaggerInputError):
        observed_profile(JOB, 10_000, entries, duration_quantile=0)


def test_measure_profiles_probe_each_job(replay_client: Build) -> None:
    client = replay_client("checkpoint_trigger", "checkpoints", **{STATUS: completed_as(3)})
    [profile] = measure_profiles(client, [JOB], 5_000, rounds=2, poll_s=0.001)
    assert profile == CheckpointProfile(JOB, 5_000, 299, 33660)


def test_profile_from_records_without_timings_uses_the_default() -> None:
    record = CheckpointRecord(JOB, "failed", 0, detail="x")
    assert profile_from_records(JOB, 5_000, [record]).duration_ms == 1_000


def test_periodic_interval(replay_client: Build) -> None:
    assert periodic_interval_ms(replay_client("checkpoint_config"), JOB) == 10_000
    off = copy.deepcopy(recorded("checkpoint_config"))
    off["body"]["interval"] = 2**63 - 1
    client = replay_client(**{f"GET /jobs/{JOB}/checkpoints/config": off})
    assert periodic_interval_ms(client, JOB) is None
    with pytest.raises(FlinkError):
        periodic_interval_ms(replay_client(), JOB)


def test_report_windows_and_peak() -> None:
    report = CoordinatorReport(
        [
            CheckpointRecord("a", "completed", 0, 0, 1, 0, 10),
            CheckpointRecord("b", "completed", 0, 0, 1, 5, 15),
            CheckpointRecord("c", "completed", 0, 0, 1, 10, 20),
            CheckpointRecord("d", "failed", 0),
        ]
    )
    assert report.windows() == [(0, 10), (5, 15), (10, 20)]
    assert report.peak_concurrent() == 2


def test_submit_time_conf_confines_the_first_checkpoint() -> None:
    assert submit_time_conf(60_000, 5_000) == {
        "execution.checkpointing.interval": "60000 ms",
        "execution.checkpointing.min-pause": "55000 ms",
    }
    with pytest.raises(StaggerInputError, match="phase window"):
        submit_time_conf(60_000, 0)
    with pytest.raises(StaggerInputError, match="interval"):
        submit_time_conf(0, 10)


def test_history_peak_concurrent_counts_overlaps_across_jobs(replay_client: Build) -> None:
    other = "0" * 32
    same_history = recorded("checkpoints_after_restart")
    client = replay_client(
        "checkpoints_after_restart", **{f"GET /jobs/{other}/checkpoints": same_history}
    )
    assert history_peak_concurrent(client, [JOB]) == 1  # 10 s apart, ≤ 250 ms each
    assert history_peak_concurrent(client, [JOB, other]) == 2  # the same instants
    # Only completed checkpoints triggered in [since, until) count.
    first, second = 1796005451117, 1796005461117
    windows = history_windows(client, [JOB], since_ms=first, until_ms=second + 1)
    assert windows == [(first, first + 97), (second, second + 109)]
    assert history_peak_concurrent(client, [JOB, other], since_ms=1796005481118) == 0
