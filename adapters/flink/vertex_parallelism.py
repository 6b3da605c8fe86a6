"""A job's per-vertex parallelism, carried across a resubmission (``state --apply``).

The autoscaler rescales vertices in place, through the adaptive scheduler's resource
requirements, so a job's parallelism drifts from the one it was submitted with. A
resubmission with the recorded ``flink run`` arguments starts every vertex at the
submitted parallelism again, which would silently undo those rescales. So, as soon as
the resubmitted job has a JobMaster (it answers ``GET /jobs/<id>/resource-requirements``
while still CREATED), each vertex's upper bound is set to the parallelism its old
counterpart ran at (:func:`request_parallelism`). The adaptive scheduler starts the job
at it when the bounds arrive while the job still waits for slots; when the slots it
wants are free it starts at once, before ``flink run`` has returned the job id, and then
rescales in place a few seconds later, from the new job's latest checkpoint or the
savepoint (so on the local cluster, every time: one more restart). The job's restore
count (``/jobs/<id>/checkpoints``, kept across the adaptive scheduler's restarts) tells
which happened; :func:`confirm_parallelism` waits for it and says so.

Why not ``pipeline.jobvertex-parallelism-overrides`` at submission (checked on Flink
2.3's local session cluster): the Dispatcher applies it only to a submitted JobGraph,
and Flink 2.3's ``flink run`` submits a StreamGraph to a session cluster (the JobGraph
is built in the JobMaster), so a ``-D`` override changed nothing, with no error.

Vertex ids are hashes of the program's topology: the same program gets the same ids on
resubmission (also checked on 2.3). A vertex whose id changed anyway (the program did)
is matched by its name, when that name is unique, and the outcome says so.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.rest_models import JobDetail, ParallelismBounds

TERMINAL_STATES = frozenset({"FINISHED", "CANCELED", "FAILED"})
POLL_S = 0.5
REQUEST_POLL_S = 0.2
"""Shorter: the bounds must reach the scheduler before it has started the job."""


@dataclass(frozen=True)
class VertexParallelism:
    """One vertex of a job and the parallelism it runs at."""

    id: str
    name: str
    parallelism: int


def vertex_parallelism(job: JobDetail) -> tuple[VertexParallelism, ...]:
    """Each vertex of ``job`` at the parallelism ``GET /jobs/<id>`` reports."""
    return tuple(VertexParallelism(v.id, v.name, v.parallelism) for v in job.vertices)


@dataclass(frozen=True)
class VertexMatch:
    """The old vertices' parallelism keyed by the new job's vertex ids."""

    wanted: dict[str, int]
    """New vertex id → the parallelism its old counterpart ran at."""
    by_name: tuple[str, ...] = ()
    """Vertices whose id changed, matched by (unique) name."""
    unmatched: tuple[str, ...] = ()
    """Old vertices with no counterpart: neither the id nor a unique name is found."""

    def notes(self) -> tuple[str, ...]:
        notes = []
        if self.by_name:
            notes.append(
                "vertex ids changed on resubmission (has the program changed?); matched by "
                f"name: {', '.join(self.by_name)}"
            )
        if self.unmatched:
            notes.append(
                f"no vertex of the new job matches {', '.join(self.unmatched)}: "
                "left at the submitted parallelism"
            )
        return tuple(notes)


def match_vertices(
    before: Iterable[VertexParallelism], after: Iterable[VertexParallelism]
) -> VertexMatch:
    """Pairs the old job's vertices with the new job's: by id, else by a unique name."""
    old, new = tuple(before), tuple(after)
    new_ids = {v.id for v in new}
    name_count = Counter(v.name for v in new)
    id_of_name = {v.name: v.id for v in new}
    wanted = {v.id: v.parallelism for v in old if v.id in new_ids}
    by_name: list[str] = []
    unmatched: list[str] = []
    for vertex in old:
        if vertex.id in new_ids:
            continue
        new_id = id_of_name.get(vertex.name)
        if new_id is None or name_count[vertex.name] > 1 or new_id in wanted:
            unmatched.append(vertex.name)
        else:
            wanted[new_id] = vertex.parallelism
            by_name.append(vertex.name)
    return VertexMatch(wanted, tuple(by_name), tuple(unmatched))


def restored_requirements(
    current: Mapping[str, ParallelismBounds], wanted: Mapping[str, int]
) -> dict[str, ParallelismBounds] | None:
    """The resource requirements with each ``wanted`` vertex's upper bound set; None when
    they already say so. The lower bound stays at most the upper one, as
    :func:`~kubesage.adapters.flink.rescale.rescale_in_place` keeps it."""
    updated = dict(current)
    for vertex_id, parallelism in wanted.items():
        if parallelism < 1:
            raise ValueError(f"vertex {vertex_id}: parallelism {parallelism} is below 1")
        old = current.get(vertex_id)
        if old is not None and old.upper == parallelism:
            continue
        lower = min(old.lower, parallelism) if old is not None else 1
        updated[vertex_id] = ParallelismBounds(lower=max(lower, 1), upper=parallelism)
    return None if updated == dict(current) else updated


@dataclass(frozen=True)
class ParallelismRequest:
    """What :func:`request_parallelism` asked of the new job (or why it could not)."""

    before: tuple[VertexParallelism, ...]
    match: VertexMatch | None = None
    changed: bool = False
    """Some bound had to change: the job was submitted at another parallelism."""
    error: str | None = None
    first_running: dict[str, int] = field(default_factory=dict)
    """Vertex id → the parallelism the job first ran at (filled in by the caller)."""


def request_parallelism(
    client: FlinkClient,
    job_id: str,
    before: tuple[VertexParallelism, ...],
    *,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ParallelismRequest:
    """Sets the resubmitted ``job_id``'s upper bounds to the parallelism ``before`` the
    stop, as soon as its JobMaster answers (module docstring); never raises."""
    deadline = clock() + timeout_s
    while True:
        state = "not known yet"
        try:
            job = client.job(job_id)
            state = job.state
            if state in TERMINAL_STATES:
                return ParallelismRequest(before, error=f"the job is {state}")
            current = client.resource_requirements(job_id)
            if job.vertices:  # else read while the JobMaster was still being made
                break
        except FlinkError as exc:
            # Before the JobMaster is up this fails for a moment; once the job runs, its
            # scheduler has no requirements to set (not the adaptive one).
            if state == "RUNNING" or clock() > deadline:
                return ParallelismRequest(before, error=f"no resource requirements: {exc}")
        else:
            if clock() > deadline:
                return ParallelismRequest(before, error="the job shows no vertices")
        sleep(REQUEST_POLL_S)
    match = match_vertices(before, vertex_parallelism(job))
    updated = restored_requirements(current, match.wanted)
    if updated is None:
        return ParallelismRequest(before, match)
    try:
        client.set_resource_requirements(job_id, updated)
    except FlinkError as exc:
        return ParallelismRequest(before, match, error=f"Flink refused them: {exc}")
    return ParallelismRequest(before, match, changed=True)


@dataclass(frozen=True)
class ParallelismRestore:
    """What became of the old job's per-vertex parallelism in the restarted job."""

    wanted: dict[str, int]
    """Vertex name → the parallelism the old job ran at."""
    running: dict[str, int]
    """Vertex name → the parallelism the new job runs at."""
    how: str
    """How it was restored, or why it was not."""
    notes: tuple[str, ...] = ()

    @property
    def restored(self) -> bool:
        return all(self.running.get(name) == p for name, p in self.wanted.items())

    def describe(self) -> str:
        shown = ", ".join(f"{name} {p}" for name, p in self.running.items())
        if self.restored:
            return f"parallelism {self.how}: {shown}"
        wanted = ", ".join(f"{name} {p}" for name, p in self.wanted.items())
        return f"parallelism not restored ({self.how}): runs at {shown}, ran at {wanted}"


def confirm_parallelism(
    client: FlinkClient,
    job_id: str,
    request: ParallelismRequest,
    *,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ParallelismRestore:
    """Waits until the job runs every vertex at the requested parallelism; never raises."""
    wanted = {v.name: v.parallelism for v in request.before}
    notes = request.match.notes() if request.match else ()
    goal = request.match.wanted if request.match else {}
    deadline = clock() + timeout_s
    running: dict[str, int] = {}
    while True:
        try:
            job = client.job(job_id)
        except FlinkError as exc:
            last = f"not confirmed ({exc})"
        else:
            running = {v.name: v.parallelism for v in job.vertices}
            now = {v.id: v.parallelism for v in job.vertices}
            steady = job.state == "RUNNING" and all(v.status == "RUNNING" for v in job.vertices)
            if steady and all(now.get(vertex_id) == p for vertex_id, p in goal.items()):
                break
            last = f"not reached within {timeout_s:.0f} s (too few free task slots?)"
        if request.error is not None or clock() > deadline:
            how = f"resource requirements not set: {request.error}" if request.error else last
            return ParallelismRestore(wanted, running, how, notes)
        sleep(POLL_S)
    first = request.first_running
    if not request.changed:
        how = "as submitted"
    elif (
        first
        and all(first.get(vertex_id) == p for vertex_id, p in goal.items())
        and _restores(client, job_id) <= 1
    ):
        how = "restored at submission"
    else:
        # The scheduler had started the job before the bounds arrived: with free slots it
        # starts at once, before `flink run` has even returned the job id.
        how = "restored by an in-place rescale right after the restart"
    return ParallelismRestore(wanted, running, how, notes)


def _restores(client: FlinkClient, job_id: str) -> int:
    """How often the job restored its state: 1 from the savepoint, one more per restart
    (an in-place rescale too; the adaptive scheduler keeps the count across them)."""
    try:
        return client.checkpoints(job_id).counts.restored
    except FlinkError:
        return 1  # unknown: the parallelism first seen running decides alone
