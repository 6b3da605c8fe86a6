"""``flink-autoscaler``: the autoscaler's decision per registered job, as a reconciler of
the control loop — actions, notes and memory through ``reconcile(view)``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kubesage.adapters.flink.autoscaler import AutoscalerSettings, decide
from kubesage.adapters.flink.loop_observe import JobProblem, ObservedJob, RegisteredJobs
from kubesage.adapters.flink.loop_scaling import (
    FlinkAutoscaler,
    JobScaling,
    rescale_action,
    scaling_step,
)
from kubesage.adapters.flink.observation import Observation, VertexObservation
from kubesage.core.loop.actions import ActionKind, FlinkRescale
from kubesage.core.loop.forecasts import ForecastPanel
from kubesage.core.loop.reconciler import Reconciled, Reconciler
from kubesage.core.loop.view import WorldView
from kubesage.core.perception import Snapshot
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import NodeSpec

SOURCE, SLOW, SINK = "src", "slow", "sink"
JM = "http://jm-a:8081"
SETTINGS = AutoscalerSettings(exclude=frozenset({"Source"}), stable_observations=2)
STATE = ClusterState([NodeSpec(name="node-0", cpu_milli=8_000, memory_mib=16_000)])


def observation(
    *,
    job_id: str = "job-a",
    time_s: float = 100.0,
    slow_parallelism: int = 1,
    rate: float = 40.0,
    running_since_s: float = 0.0,
) -> Observation:
    """source → slow → sink; ``slow`` handles 20 rec/s per subtask and the source offers
    ``rate``: more than it takes shows as backlog growth (a backpressured job)."""
    capacity = 20.0 * slow_parallelism
    throughput = min(rate, capacity)
    vertices = (
        VertexObservation(
            SOURCE,
            "Source",
            1,
            128,
            records_in_per_s=0.0,
            records_out_per_s=throughput,
            busy_ms_per_s=100.0,
            pending_records=0.0,
            pending_growth_per_s=rate - throughput,
        ),
        VertexObservation(
            SLOW,
            "slow",
            slow_parallelism,
            128,
            inputs=(SOURCE,),
            records_in_per_s=throughput,
            records_out_per_s=throughput,
            busy_ms_per_s=1000.0 * throughput / capacity,
        ),
        VertexObservation(
            SINK,
            "sink",
            1,
            128,
            inputs=(SLOW,),
            records_in_per_s=throughput,
            records_out_per_s=0.0,
            busy_ms_per_s=5.0,
        ),
    )
    return Observation(job_id, time_s, "RUNNING", running_since_s, 20.0, vertices, 16, 15)


def jobs(*observations: Observation, **problems: tuple[JobProblem, ...]) -> RegisteredJobs:
    observed = tuple(
        ObservedJob(f"key-{o.job_id}", JM if o.job_id == "job-a" else "http://jm-b:8081", o)
        for o in observations
    )
    return RegisteredJobs(observed, **problems)


def view(
    data: RegisteredJobs | None,
    memory: Mapping[str, Any] | None = None,
    *,
    stale: str | None = None,
) -> WorldView:
    snapshots = {}
    if data is not None:
        snapshots["flink"] = Snapshot(data, 100.0, stale=stale is not None, reason=stale)
    return WorldView(
        tick=1,
        now_s=100.0,
        state=STATE.copy(),
        pods={},
        topology=None,
        forecasts=ForecastPanel(),
        snapshots=snapshots,
        data_age_s=0.0,
        memory=dict(memory or {}),
    )


def keys(answer: Reconciled) -> list[str]:
    return [action.key for action in answer.actions]


def test_it_is_a_reconciler_named_flink_autoscaler() -> None:
    reconciler = FlinkAutoscaler()
    assert isinstance(reconciler, Reconciler)
    assert reconciler.name == "flink-autoscaler"


def test_a_backpressured_job_is_rescaled_once_the_proposal_is_stable() -> None:
    reconciler = FlinkAutoscaler(SETTINGS)
    first = reconciler.reconcile(view(jobs(observation(time_s=100.0))))
    assert first.actions == ()  # one proposal; the guard rail wants two equal ones
    second = reconciler.reconcile(view(jobs(observation(time_s=105.0)), first.memory))
    # The same pure decision, run by hand, explains the action.
    decision, memory = decide(observation(time_s=100.0), None, SETTINGS)
    decision, _ = decide(observation(time_s=105.0), memory, SETTINGS)
    [action] = second.actions
    assert isinstance(action, FlinkRescale) and action.kind is ActionKind.FLINK_RESCALE
    assert (action.jobmanager, action.job_id, dict(action.parallelism)) == (
        JM,
        "job-a",
        {SLOW: 3},  # ceil(40 / 20 / 0.8)
    )
    assert action.reconciler == "flink-autoscaler"
    assert action.explanation == decision.describe()
    assert action.target == "flink/job-a"


def test_the_same_world_asks_for_the_same_actions_and_a_repeat_counts_once() -> None:
    reconciler = FlinkAutoscaler(SETTINGS)
    first = reconciler.reconcile(view(jobs(observation(time_s=100.0))))
    world = view(jobs(observation(time_s=105.0)), first.memory)
    again = reconciler.reconcile(world)
    assert keys(again) and keys(reconciler.reconcile(world)) == keys(again)
    # The collector's last snapshot repeated (stale): the same ask, no step of the guard
    # rails, and a note that says why the data is old.
    repeat = reconciler.reconcile(
        view(jobs(observation(time_s=105.0)), again.memory, stale="JobManager down")
    )
    assert keys(repeat) == keys(again)
    assert repeat.memory == again.memory
    assert repeat.notes == ("Flink data is stale: JobManager down",)


def test_a_stale_repeat_does_not_make_a_proposal_stable() -> None:
    reconciler = FlinkAutoscaler(SETTINGS)
    first = reconciler.reconcile(view(jobs(observation(time_s=100.0))))
    repeat = reconciler.reconcile(view(jobs(observation(time_s=100.0)), first.memory, stale="x"))
    assert repeat.actions == ()


def test_a_parallelism_change_is_a_rescale_the_guard_rails_remember() -> None:
    settings = replace(SETTINGS, stable_observations=1, scale_down_delay_s=0.0)
    reconciler = FlinkAutoscaler(settings)
    asked = reconciler.reconcile(view(jobs(observation(time_s=100.0))))
    assert [dict(a.parallelism) for a in asked.actions if isinstance(a, FlinkRescale)] == [
        {SLOW: 3}
    ]
    # The job now runs at 3 (restarted at 110 s); the demand has fallen to 10 rec/s, so
    # the rule wants 1 — a reversal within the oscillation window is held.
    rescaled = observation(time_s=200.0, slow_parallelism=3, rate=10.0, running_since_s=110.0)
    after = reconciler.reconcile(view(jobs(rescaled), asked.memory))
    scaling = after.memory["jobs"]["job-a"]
    assert isinstance(scaling, JobScaling)
    remembered = scaling.guard_rails.of(SLOW)
    assert (remembered.last_rescale_s, remembered.last_direction) == (200.0, 1)
    assert after.actions == ()
    assert scaling.decision is not None
    assert "would reverse the rescale" in scaling.decision.describe()


def test_the_step_notices_a_rescale_it_did_not_ask_for() -> None:
    _, scaling = scaling_step(observation(time_s=100.0, slow_parallelism=4), None, SETTINGS)
    _, scaling = scaling_step(
        observation(time_s=160.0, slow_parallelism=2, running_since_s=150.0), scaling, SETTINGS
    )
    assert scaling.guard_rails.of(SLOW).last_direction == -1
    assert scaling.parallelism == {SOURCE: 1, SLOW: 2, SINK: 1}


def test_skipped_unread_and_stopped_jobs_are_noted_and_their_memory_kept() -> None:
    reconciler = FlinkAutoscaler(SETTINGS)
    first = reconciler.reconcile(
        view(jobs(observation(job_id="job-a"), observation(job_id="job-b")))
    )
    assert set(first.memory["jobs"]) == {"job-a", "job-b"}
    settling = observation(job_id="job-a", time_s=110.0, running_since_s=100.0)
    down = JobProblem("key-job-b", "job-b", "http://jm-b:8081", "the JobManager did not answer")
    gone = JobProblem("key-job-c", "job-c", JM, "CANCELED")
    answer = reconciler.reconcile(
        view(jobs(settling, failed=(down,), not_running=(gone,)), first.memory)
    )
    assert answer.actions == ()
    assert answer.notes == (
        "job key-job-a (job-a): skipped: job (re)started 10 s ago; metrics count after 20 s",
        "skipped job key-job-b (job-b) at http://jm-b:8081: the JobManager did not answer",
        f"skipped job key-job-c (job-c) at {JM}: CANCELED",
    )
    # The unread job keeps its guard rails; a job no longer listed is forgotten.
    assert answer.memory["jobs"]["job-b"] == first.memory["jobs"]["job-b"]
    later = reconciler.reconcile(view(jobs(settling), answer.memory))
    assert set(later.memory["jobs"]) == {"job-a"}


def test_without_a_flink_snapshot_it_says_so_and_keeps_its_memory() -> None:
    reconciler = FlinkAutoscaler(SETTINGS)
    first = reconciler.reconcile(view(jobs(observation())))
    answer = reconciler.reconcile(view(None, first.memory))
    assert answer.actions == ()
    assert answer.notes == ("no snapshot from the 'flink' collector yet",)
    assert answer.memory == first.memory


def test_each_job_is_decided_on_its_own_at_its_own_jobmanager() -> None:
    settings = replace(SETTINGS, stable_observations=1)
    answer = FlinkAutoscaler(settings).reconcile(
        view(jobs(observation(job_id="job-b", rate=80.0), observation(job_id="job-a")))
    )
    asked = [
        (a.job_id, a.jobmanager, dict(a.parallelism))
        for a in answer.actions
        if isinstance(a, FlinkRescale)
    ]
    assert asked == [("job-a", JM, {SLOW: 3}), ("job-b", "http://jm-b:8081", {SLOW: 5})]


def test_a_hold_or_skip_asks_for_nothing() -> None:
    settled = observation(slow_parallelism=3)
    hold, _ = decide(settled, None, SETTINGS)
    skip, _ = decide(replace(settled, job_state="CREATED"), None, SETTINGS)
    assert (hold.action, skip.action) == ("hold", "skip")
    assert rescale_action(hold, jobmanager=JM) is None
    assert rescale_action(skip, jobmanager=JM) is None
