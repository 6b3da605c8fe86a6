"""Which jobs ``kubesage flink stagger`` drives, and each one's checkpoint profile.

A job is driven when Flink does not checkpoint it periodically itself and its interval
is known (registered by ``kubesage flink submit``, or ``--interval-s``); its profile
comes from its completed checkpoints, or from probe checkpoints when it has none. A job
whose checkpoint settings Flink cannot give (checkpointing disabled, as for a batch job
in the same session cluster: 404) is left out with the reason, unless it was named.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kubesage.adapters.flink.checkpoint_history import (
    completed_entries,
    measure_profiles,
    observed_profile,
)
from kubesage.adapters.flink.checkpoint_settings import periodic_interval_ms
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import FlinkNotFound, FlinkResponseError
from kubesage.adapters.flink.registry import JobRegistry
from kubesage.adapters.flink.stagger import CheckpointProfile


def stagger_profiles(
    client: FlinkClient,
    registry: JobRegistry,
    job_ids: Sequence[str],
    *,
    named: bool,
    interval_ms: int | None,
    probe_rounds: int,
    say: Callable[[str], None],
) -> list[CheckpointProfile]:
    """Profiles of the jobs the coordinator can drive; ``say`` tells why each other job
    is left out.

    When the jobs were ``named`` (``--job``), one whose checkpoint settings Flink cannot
    give (checkpointing off: 404) is an error; among every running job it is only left
    out, with the reason.
    """
    profiles: list[CheckpointProfile] = []
    to_probe: list[tuple[str, int]] = []
    for job_id in job_ids:
        try:
            planned = _candidate(client, registry, job_id, interval_ms, probe_rounds, say)
        except (FlinkNotFound, FlinkResponseError) as exc:
            if named:
                raise
            say(f"job {job_id}: checkpoint settings not available ({exc}); skipped")
            continue
        if isinstance(planned, CheckpointProfile):
            profiles.append(planned)
        elif planned is not None:
            to_probe.append((job_id, planned))
    for job_id, interval in to_probe:
        profiles += measure_profiles(client, [job_id], interval, rounds=probe_rounds)
    return profiles


def _candidate(
    client: FlinkClient,
    registry: JobRegistry,
    job_id: str,
    interval_ms: int | None,
    probe_rounds: int,
    say: Callable[[str], None],
) -> CheckpointProfile | int | None:
    """One job's profile from its history, its interval when it must be probed first, or
    None (left out, with the reason printed)."""
    periodic = periodic_interval_ms(client, job_id)
    if periodic is not None:
        say(
            f"job {job_id}: Flink checkpoints it every {periodic} ms itself; not driven "
            "(resubmit with `kubesage flink submit --drive`)"
        )
        return None
    run = registry.find(job_id)
    interval = (run.checkpoint_interval_ms if run else None) or interval_ms
    if interval is None:
        say(f"job {job_id}: no checkpoint interval known; skipped")
        return None
    entries = completed_entries(client.checkpoints(job_id))
    if entries or probe_rounds == 0:
        if not entries:
            say(f"job {job_id}: no completed checkpoint yet; assuming the default duration")
        return observed_profile(job_id, interval, entries)
    return interval
