"""Flink settings that decide when a job checkpoints: driven by kubesage, or by Flink.

A job the coordinator drives keeps checkpointing enabled but never periodic
(:func:`driven_conf`). A job Flink checkpoints itself gets submit-time configuration
instead (:func:`submit_time_conf`). Flink 2.x has no key that sets a checkpoint
phase: the ``execution.checkpointing.*`` keys are interval, min-pause, timeout, mode,
max-concurrent, unaligned, …, but no initial delay. What Flink does (2.3,
``CheckpointCoordinator.getRandomCheckpointInitDelay``) is draw the first
checkpoint's delay uniformly from ``[min-pause, interval]`` after the job turns
RUNNING, then trigger every ``interval`` from that first trigger. So setting
``min-pause = interval − w`` confines the first checkpoint, and with it the phase,
to a window of width ``w`` that ends one interval after the job turns RUNNING; with
``w ≥`` the checkpoint duration the min-pause never delays a later trigger, so the
phase then holds. The phase is therefore realised to within ``w``, by when the job
turns RUNNING — exactly only by the coordinator.
"""

from __future__ import annotations

from kubesage.adapters.flink.checkpoint_coordinator import CheckpointClient
from kubesage.adapters.flink.errors import StaggerInputError

PERIODIC_OFF_MS = 2**63 - 1
"""What ``/checkpoints/config`` reports as the interval of a job without periodic checkpoints."""


def periodic_interval_ms(client: CheckpointClient, job_id: str) -> int | None:
    """The job's periodic checkpoint interval; None when Flink does not checkpoint it."""
    interval = client.checkpoint_config(job_id).interval_ms
    return None if interval <= 0 or interval >= PERIODIC_OFF_MS else interval


def driven_conf() -> dict[str, str]:
    """``-D`` options for a job the coordinator drives: checkpointing on (exactly-once, so
    a requested checkpoint honours the job's unaligned setting) but never periodic.

    Leaving checkpointing off instead makes Flink run requested checkpoints
    at-least-once and aligned; ``PERIODIC_OFF_MS`` is Flink's own "no periodic
    checkpoints" interval (checked on Flink 2.3: ``/checkpoints/config`` then reports
    ``exactly_once`` and that interval).
    """
    return {"execution.checkpointing.interval": f"{PERIODIC_OFF_MS} ms"}


def submit_time_conf(interval_ms: int, phase_window_ms: int) -> dict[str, str]:
    """``-D`` options for a job Flink checkpoints itself, with its phase in a window.

    ``min-pause = interval − window`` makes Flink's random first delay fall in the last
    ``window`` ms of the first interval after RUNNING (see the module docstring).
    """
    if interval_ms <= 0:
        raise StaggerInputError(f"checkpoint interval must be positive, got {interval_ms} ms")
    if not 0 < phase_window_ms <= interval_ms:
        raise StaggerInputError(
            f"phase window must be in (0, interval={interval_ms}] ms, got {phase_window_ms}"
        )
    return {
        "execution.checkpointing.interval": f"{interval_ms} ms",
        "execution.checkpointing.min-pause": f"{interval_ms - phase_window_ms} ms",
    }
