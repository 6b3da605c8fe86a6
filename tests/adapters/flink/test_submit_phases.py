"""``kubesage flink submit`` places a new job's checkpoint phase beside the jobs already
on its JobManager: those running or starting, and those other submits are placing at
the same time (phase reservations in the registry)."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.registry import JobRegistry, PhaseReservation
from kubesage.adapters.flink.submit import FlinkSubmitError, SubmitOutcome, SubmitRequest, submit

from .conftest import recorded
from .test_submit import FLINK_OUTPUT, JM, JOB, fake_flink_home, request, run, succeeds

OTHER = "0" * 31 + "1"


def driven_request(tmp_path: Path) -> SubmitRequest:
    """A driven job checkpointing every 10 s, not waited for long to run."""
    return request(
        checkpoint_interval_ms=10_000,
        driven=True,
        flink_home=fake_flink_home(tmp_path),
        wait_running_s=0.1,
    )


def submits_other(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A ``flink run`` that submits the job ``OTHER``."""
    return subprocess.CompletedProcess(list(command), 0, FLINK_OUTPUT.replace(JOB, OTHER), "")


@pytest.mark.parametrize(("state", "beside"), [("INITIALIZING", 1), ("CANCELED", 0)])
def test_a_registered_job_still_starting_keeps_its_phase(
    tmp_path: Path, replay_client: Callable[..., FlinkClient], state: str, beside: int
) -> None:
    """A job submitted a moment ago is INITIALIZING or CREATED, not RUNNING yet: its
    checkpoints are about to follow its phase, so a new job's phase goes beside it."""
    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    registry.add(run(JOB, checkpoint_interval_ms=10_000, phase_ms=0, driven=True))
    overview = copy.deepcopy(recorded("jobs_overview"))
    overview["body"]["jobs"][0]["state"] = state
    outcome = submit(
        driven_request(tmp_path),
        registry,
        runner=submits_other,
        client_factory=lambda url: replay_client("job_running", **{"GET /jobs/overview": overview}),
    )
    assert any(f"beside {beside} running job(s)" in reason for reason in outcome.reasons)
    assert (outcome.run.phase_ms != 0) == bool(beside)


def test_a_phase_reservation_counts_for_its_jobmanager_until_it_expires(tmp_path: Path) -> None:
    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    reservation = PhaseReservation(
        token="a",
        jobmanager=JM,
        checkpoint_interval_ms=10_000,
        phase_ms=0,
        checkpoint_duration_ms=500,
        expires_at_ms=1_000,
    )
    assert registry.reserve_phase(JM, lambda beside: reservation, now_ms=0, since_ms=0) == "a"
    seen: list[list[str]] = []

    def look(beside: list[PhaseReservation]) -> None:
        seen.append([r.token for r in beside])

    registry.reserve_phase(f"{JM}/", look, now_ms=999, since_ms=999)  # the same JobManager
    registry.reserve_phase("http://flink-2:8081", look, now_ms=999, since_ms=999)  # another one
    registry.reserve_phase(JM, look, now_ms=1_000, since_ms=1_000)  # expired: dropped
    assert seen == [["a"], [], []]
    assert registry.load().reservations == []


def test_submits_started_together_place_their_phases_beside_each_other(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    """A second submit while the first's ``flink run`` is still going (a deploy script
    submitting jobs in parallel): the first's job is not registered yet, but the phase
    it reserved is, so the second does not pick the same one. Registering the job ends
    the reservation; a submit that fails ends its own."""
    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    seen: list[SubmitOutcome] = []

    def first(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        assert [r.phase_ms for r in registry.load().reservations] == [0]
        seen.append(submit(together, registry, runner=submits_other, client_factory=client))
        return succeeds(command, env)

    def client(url: str) -> FlinkClient:
        return replay_client("jobs_overview")  # neither job is seen running in time

    together = driven_request(tmp_path)
    outcome = submit(together, registry, runner=first, client_factory=client)
    (inner,) = seen
    assert outcome.run.phase_ms == 0
    assert inner.run.phase_ms not in (None, 0)
    assert any("beside 0 running job(s) and 1 being submitted" in r for r in inner.reasons)
    assert registry.load().reservations == []

    def fails(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(command), 1, "", "no JobManager")

    with pytest.raises(FlinkSubmitError, match="flink run exited 1"):
        submit(together, registry, runner=fails, client_factory=client)
    assert registry.load().reservations == []


def test_a_job_registered_while_the_running_jobs_were_read_keeps_its_phase(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    """Submit A ends (its job registered, its reservation gone) while submit B reads the
    running jobs, too late for that reading: B still sees A's phase, as a run registered
    since it began reading."""
    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    now = [1_000.0]

    def client(url: str) -> FlinkClient:
        flink = replay_client("jobs_overview")  # A's job is not listed yet
        listed = flink.jobs

        def jobs() -> object:
            now[0] += 1
            registry.add(
                run(OTHER, submitted_at_ms=int(now[0] * 1000), checkpoint_interval_ms=10_000,
                    phase_ms=0, driven=True)
            )  # fmt: skip
            return listed()

        flink.jobs = jobs  # type: ignore[method-assign]
        return flink

    outcome = submit(
        driven_request(tmp_path),
        registry,
        runner=succeeds,
        client_factory=client,
        clock=lambda: now[0],
    )
    assert any("and 1 being submitted" in reason for reason in outcome.reasons), outcome.reasons
    assert outcome.run.phase_ms not in (None, 0)
