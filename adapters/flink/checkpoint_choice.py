"""Where a newly submitted Flink job's checkpoints go: its interval and phase beside the
jobs already running (:func:`choose_checkpointing`), and what a registered job's
checkpoints really look like now (:func:`landed_checkpoints`: where a job Flink
checkpoints itself lands, how long and how large each job's checkpoints are)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kubesage.adapters.flink.checkpoint_history import (
    DEFAULT_DURATION_MS,
    completed_entries,
    observed_profile,
)
from kubesage.adapters.flink.checkpoint_settings import driven_conf, submit_time_conf
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.registry import PhaseReservation, RunRecord
from kubesage.adapters.flink.stagger import CheckpointProfile, best_phase

log = logging.getLogger(__name__)

DEFAULT_PHASE_RESOLUTION_MS = 100


@dataclass(frozen=True)
class CheckpointChoice:
    interval_ms: int | None
    phase_ms: int | None
    phase_window_ms: int | None
    duration_ms: int
    conf: dict[str, str]
    reason: str
    duration_measured: bool = True
    """False: ``duration_ms`` is the default guess (not recorded as a measurement)."""


def choose_checkpointing(
    requested_interval_ms: int | None,
    driven: bool,
    history: Sequence[RunRecord],
    running: Sequence[RunRecord],
    *,
    reserved: Sequence[PhaseReservation] = (),
    resolution_ms: int = DEFAULT_PHASE_RESOLUTION_MS,
) -> CheckpointChoice:
    """Interval, phase and ``-D`` options for the new job beside the ``running`` ones and
    the phases ``reserved`` by submits still going: ``requested_interval_ms``
    (--checkpoint-interval-s) else its last run's; ``driven``: the coordinator triggers
    its checkpoints (else Flink does, in a phase window)."""
    interval = requested_interval_ms
    source = "--checkpoint-interval-s"
    if interval is None:
        interval = next(
            (r.checkpoint_interval_ms for r in reversed(history) if r.checkpoint_interval_ms),
            None,
        )
        source = "the job's last run"
    if interval is None:
        return CheckpointChoice(
            None, None, None, 0, {}, "no checkpoint interval given or known: left to the job"
        )
    measured = next(
        (
            r.checkpoint_duration_ms
            for r in reversed(history)
            if r.checkpoint_duration_ms is not None
        ),
        None,
    )
    duration = min(DEFAULT_DURATION_MS if measured is None else measured, interval)
    fixed = [
        (
            CheckpointProfile(
                r.job_id,
                r.checkpoint_interval_ms,
                min(r.checkpoint_duration_ms or DEFAULT_DURATION_MS, r.checkpoint_interval_ms),
                r.checkpoint_size_bytes or 0,
            ),
            r.phase_ms,
        )
        for r in running
        if r.checkpoint_interval_ms and r.phase_ms is not None
    ]
    placed = len(fixed)
    fixed += [
        (
            CheckpointProfile(
                f"being submitted ({r.token})",
                r.checkpoint_interval_ms,
                min(r.checkpoint_duration_ms or DEFAULT_DURATION_MS, r.checkpoint_interval_ms),
            ),
            r.phase_ms,
        )
        for r in reserved
    ]
    new = CheckpointProfile("new", interval, duration)
    phase, peak, _ = best_phase(fixed, new, resolution_ms=resolution_ms)
    where = f"phase {phase} ms of {interval} ms ({source}) beside {placed} running job(s)"
    if reserved:
        where += f" and {len(reserved)} being submitted"
    if driven:
        return CheckpointChoice(
            interval,
            phase,
            None,
            duration,
            driven_conf(),
            f"{where}, peak {peak} concurrent; driven by `kubesage flink stagger` "
            "(no periodic checkpoints from Flink: the job checkpoints only while stagger "
            "runs, so keep it running; --no-drive lets Flink checkpoint it)",
            duration_measured=measured is not None,
        )
    window = min(interval, max(resolution_ms, 2 * duration))
    return CheckpointChoice(
        interval,
        phase,
        window,
        duration,
        submit_time_conf(interval, window),
        f"{where} (a goal, not enforced: Flink has no phase option); Flink checkpoints it, "
        f"its first checkpoint confined by min-pause to the {window} ms before one interval "
        "after RUNNING, where the phase is read once it runs and again at every submit",
        duration_measured=measured is not None,
    )


@dataclass(frozen=True)
class LandedCheckpoints:
    """A registered job's checkpoints as its history shows them now."""

    phase_ms: int | None
    """Where a job Flink checkpoints itself lands: its latest completed checkpoint's
    trigger time mod its interval (None for a driven job: its phase is the plan's)."""
    duration_ms: int
    """The longest completed checkpoint in the history (as the stagger plans with)."""
    size_bytes: int
    """The median bytes a completed checkpoint wrote."""


def landed_checkpoints(client: FlinkClient, run: RunRecord) -> LandedCheckpoints | None:
    """What ``run``'s completed checkpoints show now, or None when its history has none
    (or cannot be read). Every (re)start of a job Flink checkpoints — a failover, an
    in-place rescale — draws Flink's first-checkpoint delay again, so the phase recorded
    at submit time goes stale; and a job's checkpoints grow or shrink with its state, so
    the duration recorded at submit time (the previous run's, or none) does too."""
    if not run.checkpoint_interval_ms:
        return None
    try:
        entries = completed_entries(client.checkpoints(run.job_id))
    except FlinkError as exc:
        log.info("job %s: no checkpoint history (%s)", run.job_id, exc)
        return None
    if not entries:
        return None
    profile = observed_profile(run.job_id, run.checkpoint_interval_ms, entries)
    phase = None
    if not run.driven:
        phase = max(e.trigger_timestamp_ms for e in entries) % run.checkpoint_interval_ms
    return LandedCheckpoints(phase, profile.duration_ms, profile.size_bytes)
