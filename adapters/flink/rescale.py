"""In-place rescale through the adaptive scheduler's resource-requirements API.

``rescale_in_place`` sets the upper parallelism bound of the given vertices, then
waits until the job is RUNNING with every vertex at its requested parallelism (and
RUNNING, or FINISHED where its bounded input has ended). If
Flink refuses the request (unknown vertex, a bound above max parallelism) nothing
changed and the outcome says why. If the job does not get there in time (too few task
slots, a task that keeps failing), the previous requirements are put back and the
job is awaited at its previous parallelism. Either way the outcome reports what
happened; this function only raises when Flink cannot be reached at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import FlinkError, FlinkUnavailable
from kubesage.adapters.flink.observation import SETTLED_STATUSES
from kubesage.adapters.flink.rest_models import JobDetail, ParallelismBounds

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RescaleOutcome:
    succeeded: bool
    requested: dict[str, int]
    previous: dict[str, ParallelismBounds]
    parallelism: dict[str, int]
    """Vertex id → parallelism the job runs at when the call returns."""
    restored: bool
    """The previous requirements were put back."""
    message: str
    elapsed_s: float
    errors: tuple[str, ...] = field(default=())
    refused: bool = False
    """Flink refused the request: nothing changed, the job keeps its parallelism."""


def _running_at(job: JobDetail, wanted: Mapping[str, int]) -> bool:
    if job.state != "RUNNING" or any(v.status not in SETTLED_STATUSES for v in job.vertices):
        return False
    current = {v.id: v.parallelism for v in job.vertices}
    return all(current.get(vertex_id) == p for vertex_id, p in wanted.items())


def _wait(
    client: FlinkClient,
    job_id: str,
    wanted: Mapping[str, int],
    timeout_s: float,
    poll_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> tuple[bool, dict[str, int]]:
    deadline = clock() + timeout_s
    parallelism: dict[str, int] = {}
    while True:
        try:
            job = client.job(job_id)
            parallelism = {v.id: v.parallelism for v in job.vertices}
            if _running_at(job, wanted):
                return True, parallelism
        except FlinkUnavailable:
            raise
        except FlinkError as exc:  # a transient 4xx mid-restart: keep polling
            log.info("polling %s during rescale: %s", job_id, exc)
        if clock() >= deadline:
            return False, parallelism
        sleep(poll_s)


def rescale_in_place(
    client: FlinkClient,
    job_id: str,
    parallelism: Mapping[str, int],
    *,
    timeout_s: float = 90.0,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RescaleOutcome:
    """Rescales ``job_id``'s vertices to ``parallelism``; see the module docstring."""
    started = clock()
    requested = dict(parallelism)
    previous = client.resource_requirements(job_id)
    before = {v.id: v.parallelism for v in client.job(job_id).vertices}
    updated = dict(previous)
    for vertex_id, upper in requested.items():
        old = previous.get(vertex_id)
        lower = min(old.lower, upper) if old is not None else 1
        updated[vertex_id] = ParallelismBounds(lower=max(lower, 1), upper=upper)

    def outcome(
        parallelism: dict[str, int],
        message: str,
        *errors: str,
        succeeded: bool = False,
        refused: bool = False,
    ) -> RescaleOutcome:
        return RescaleOutcome(
            succeeded=succeeded,
            requested=requested,
            previous=previous,
            parallelism=parallelism,
            restored=not succeeded and not errors,
            message=message,
            elapsed_s=clock() - started,
            errors=errors,
            refused=refused,
        )

    try:
        client.set_resource_requirements(job_id, updated)
    except FlinkUnavailable:
        raise
    except FlinkError as exc:
        return outcome(
            before,
            f"Flink refused the rescale: {exc}; the job keeps its parallelism",
            str(exc),
            refused=True,
        )
    reached, now = _wait(client, job_id, requested, timeout_s, poll_s, clock, sleep)
    if reached:
        return outcome(
            now, f"RUNNING at the new parallelism after {clock() - started:.1f} s", succeeded=True
        )
    log.warning(
        "job %s did not reach %s within %.0f s (at %s); restoring",
        job_id,
        requested,
        timeout_s,
        now,
    )
    errors: list[str] = []
    try:
        client.set_resource_requirements(job_id, previous)
    except FlinkError as exc:
        errors.append(f"restoring the previous requirements failed: {exc}")
    back = {vertex_id: before[vertex_id] for vertex_id in requested if vertex_id in before}
    restored, after = _wait(client, job_id, back, timeout_s, poll_s, clock, sleep)
    state = "RUNNING at its previous parallelism" if restored else f"at {after}"
    return outcome(
        after,
        f"the job did not reach {requested} within {timeout_s:.0f} s (it got to {now}); "
        f"previous requirements restored, job {state}",
        *errors,
    )
