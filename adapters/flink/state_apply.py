"""``kubesage flink state --apply``: carry a state-tiering recommendation out on a running job.

A job's state backend is fixed when its tasks start, so a new backend means a restart
from a savepoint. On a session cluster that is a resubmission: kubesage resubmits the
job with the ``flink run`` arguments the job registry recorded at ``kubesage flink
submit`` (a job not in the registry is refused: nothing else knows how to start it).
The steps, each named in an error together with where the job was left:

1. ``check``: the job is registered and RUNNING;
2. ``savepoint``: stop-with-savepoint (``POST /jobs/<id>/stop``, no drain, canonical
   format, the only one another backend can restore), polled until Flink reports it;
3. ``restart``: ``flink run -s <savepoint> -Dkey=value …``, the recorded settings with
   the recommended ones on top; the job must be RUNNING with every vertex RUNNING (its
   state restored) and stay so for ``settle_s``, within ``running_timeout_s``;
4. ``rollback``, only when step 3 fails: the new job is cancelled and the job is
   resubmitted from the same savepoint with its recorded settings.

Both resubmissions restore the parallelism each vertex ran at before the stop (the
autoscaler's in-place rescales, not the submitted parallelism): read in step 1, set in
the new job's resource requirements as soon as it has a JobMaster, and awaited after
step 3 (:mod:`~kubesage.adapters.flink.vertex_parallelism`).

The savepoint path is in every outcome and every error after step 2, so the state is
never lost: ``flink run -s <path> …`` restores it by hand. The registry records the new
run (job id, settings).

What Flink 2.3 can restore, and so what is applied (:func:`plan_apply`):

- ForSt restores a canonical savepoint only with heap timers (otherwise
  ``UnsupportedOperationException: Not support restoring yet for ForStStateBackend``):
  ``state.backend.forst.timer-service.factory: HEAP`` goes with every move to ForSt;
- a state TTL cannot be switched on for state kept without one (``StateMigrationException``
  on restore): ``table.exec.state.ttl`` is applied only to a job submitted with a TTL
  already (a new duration is compatible), and left out, with the reason, otherwise;
  a TTL shorter than the job's is never applied either (it expires state the job keeps,
  which changes its results): a note says so, and a longer one says old → new.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.flink_duration import flink_duration_ms
from kubesage.adapters.flink.registry import JobRegistry, RunRecord
from kubesage.adapters.flink.run_arguments import local_files
from kubesage.adapters.flink.submit import (
    Runner,
    flink_environment,
    flink_run_command,
    parse_job_id,
    run_flink,
)
from kubesage.adapters.flink.vertex_parallelism import (
    ParallelismRequest,
    ParallelismRestore,
    VertexParallelism,
    confirm_parallelism,
    request_parallelism,
    vertex_parallelism,
)
from kubesage.core.errors import InputError

log = logging.getLogger(__name__)

BACKEND_KEY = "state.backend.type"
PRIMARY_DIR_KEY = "state.backend.forst.primary-dir"
TTL_KEY = "table.exec.state.ttl"
FORST_RESTORE_CONF = {"state.backend.forst.timer-service.factory": "HEAP"}
"""What ForSt needs to restore a canonical savepoint (module docstring)."""
BACKEND_CLASSES = {
    "hashmap": "HashMapStateBackend",
    "rocksdb": "EmbeddedRocksDBStateBackend",
    "forst": "ForStStateBackend",
}
"""``state.backend.type`` → the class ``/jobs/<id>/checkpoints/config`` names."""
TERMINAL_STATES = frozenset({"FINISHED", "CANCELED", "FAILED"})
DEFAULT_RUNNING_TIMEOUT_S = 120.0
DEFAULT_SAVEPOINT_TIMEOUT_S = 300.0
DEFAULT_SETTLE_S = 5.0
POLL_S = 0.5


class StateApplyError(FlinkError):
    """A step of ``state --apply`` failed: which, where the job was left, the savepoint."""

    def __init__(
        self, step: str, message: str, *, job_state: str, savepoint: str | None = None
    ) -> None:
        where = f"; savepoint {savepoint} (restore it with `flink run -s`)" if savepoint else ""
        super().__init__(f"step '{step}' failed: {message}; the job is {job_state}{where}")
        self.step = step
        self.job_state = job_state
        self.savepoint = savepoint


@dataclass(frozen=True)
class ApplyPlan:
    """What :func:`apply_plan` will do to one job; ``settings`` go on top of ``run.conf``."""

    job_id: str
    run: RunRecord
    settings: dict[str, str]
    notes: tuple[str, ...] = ()
    savepoint_dir: str | None = None

    @property
    def new_conf(self) -> dict[str, str]:
        return self.run.conf | self.settings

    def steps(self) -> list[str]:
        """The steps in words (``--dry-run`` prints them)."""
        target = self.savepoint_dir or "Flink's execution.checkpointing.savepoint-dir"
        flags = " ".join(f"-D{key}={value}" for key, value in self.settings.items())
        return [
            f"savepoint: stop job {self.job_id} with a savepoint in {target} (no drain)",
            f"restart: flink run -s <savepoint> {flags} … (the registered job "
            f"'{self.run.job_key}', its own arguments and settings otherwise), each vertex "
            "at the parallelism it runs at now (the adaptive scheduler's resource requirements)",
            "wait: every vertex RUNNING, then steady for a few seconds",
            "rollback if it does not run: cancel it, resubmit from the same savepoint with "
            "the registered settings",
        ]


@dataclass(frozen=True)
class ApplyOutcome:
    """A job after ``--apply``: running with the new settings, or rolled back to the old."""

    old_job_id: str
    savepoint: str
    job_id: str
    applied: bool
    conf: dict[str, str]
    failure: str | None = None
    """Why the restart with the new settings failed (``applied`` False)."""
    notes: list[str] = field(default_factory=list)
    parallelism: ParallelismRestore | None = None
    """The per-vertex parallelism before the stop, and what the new job runs at."""

    def describe(self) -> str:
        if self.applied:
            head = f"job {self.old_job_id} → {self.job_id}: running with the new settings"
        else:
            head = (
                f"job {self.old_job_id} → {self.job_id}: restart failed ({self.failure}); "
                "rolled back, running with the old settings"
            )
        restored = f"; {self.parallelism.describe()}" if self.parallelism else ""
        return f"{head}; savepoint {self.savepoint}{restored}"


def plan_apply(
    job_id: str,
    settings: Mapping[str, str],
    registry: JobRegistry,
    *,
    savepoint_dir: str | None = None,
) -> ApplyPlan:
    """The settings to apply to ``job_id`` (rules: module docstring); InputError when not."""
    run = registry.find(job_id)
    if run is None or not run.flink_args:
        why = "is not in the job registry" if run is None else "has no recorded arguments"
        raise InputError(
            f"job {job_id} {why} ({registry.path}): --apply restarts a job by resubmitting "
            "its `flink run` arguments, which `kubesage flink submit` records; submit it "
            "with `kubesage flink submit --jobmanager URL -- <flink run arguments>` first"
        )
    missing = [path for path in local_files(run.flink_args) if not Path(path).exists()]
    if missing:
        raise InputError(
            f"job {job_id}: its program's files are not here ({', '.join(missing)}): --apply "
            "would stop the job and fail to resubmit it; run it where `flink submit` ran, "
            "or where those paths exist"
        )
    wanted = dict(settings)
    notes: list[str] = []
    if wanted.get(BACKEND_KEY) == "forst":
        if not wanted.get(PRIMARY_DIR_KEY):
            raise InputError(
                f"job {job_id}: ForSt keeps its state in a remote primary directory: give "
                "--remote-dir (a DFS URI such as s3://bucket/forst, or a local directory)"
            )
        for key, value in FORST_RESTORE_CONF.items():
            if wanted.setdefault(key, value) == value:
                notes.append(f"{key}: {value} (ForSt restores a savepoint only with heap timers)")
    if TTL_KEY in wanted:
        why_not = _ttl_refusal(run.conf.get(TTL_KEY), wanted[TTL_KEY])
        if why_not is not None:
            notes.append(why_not)
            del wanted[TTL_KEY]
        elif run.conf.get(TTL_KEY) != wanted[TTL_KEY]:
            notes.append(f"{TTL_KEY}: {run.conf[TTL_KEY]} → {wanted[TTL_KEY]}")
    changes = {key: value for key, value in wanted.items() if run.conf.get(key) != value}
    return ApplyPlan(job_id, run, changes, tuple(notes), savepoint_dir)


def _ttl_refusal(current: str | None, proposed: str) -> str | None:
    """Why a job run with state TTL ``current`` (None: none) is not given ``proposed``;
    None when it may be. A TTL cannot be switched on for state kept without one, and a
    shorter one drops state the job keeps now (its results change): neither is done
    without the user."""
    now_ms = None if current is None else flink_duration_ms(current)
    if current is None or now_ms == 0:
        return (
            f"{TTL_KEY} not applied: Flink cannot add a TTL to state kept without one "
            "(StateMigrationException on restore); set it when the job starts afresh"
        )
    wanted_ms = flink_duration_ms(proposed)
    if now_ms is None or wanted_ms is None:
        return f"{TTL_KEY} not applied: '{current}' or '{proposed}' is not a Flink duration"
    if wanted_ms < now_ms:
        return (
            f"{TTL_KEY} kept at {current}: the recommended {proposed} is shorter, and a "
            "shorter TTL expires state the job keeps now, which changes its results; set "
            "it yourself if that is intended"
        )
    return None


@dataclass
class StateApplier:
    """Runs :class:`ApplyPlan` s against one JobManager; injected runner and clock for tests."""

    client: FlinkClient
    registry: JobRegistry
    flink_home: Path
    runner: Runner = run_flink
    running_timeout_s: float = DEFAULT_RUNNING_TIMEOUT_S
    savepoint_timeout_s: float = DEFAULT_SAVEPOINT_TIMEOUT_S
    settle_s: float = DEFAULT_SETTLE_S
    on_step: Callable[[str], None] = log.info
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def apply(self, plan: ApplyPlan) -> ApplyOutcome:
        """Savepoint, restart with the new settings, roll back on failure (module docstring)."""
        before = self._check(plan.job_id)
        savepoint = self._stop_with_savepoint(plan)
        self.on_step(f"savepoint: {savepoint}")
        self._wait_ended(plan.job_id, savepoint)
        try:
            job_id, request = self._start(plan, plan.new_conf, savepoint, before)
        except _RestartError as exc:
            failure = str(exc)
            self.on_step(f"restart failed: {failure}; rolling back")
        else:
            restore = self._confirm_parallelism(job_id, request)
            notes = [*self._check_backend(job_id, plan.new_conf), *restore.notes]
            why = f"state settings applied; {restore.describe()}"
            self._register(plan, job_id, plan.new_conf, savepoint, why)
            return ApplyOutcome(
                plan.job_id, savepoint, job_id, True, plan.new_conf, None, notes, restore
            )
        try:
            job_id, request = self._start(plan, plan.run.conf, savepoint, before)
        except _RestartError as exc:
            raise StateApplyError(
                "rollback",
                f"the restart failed ({failure}) and so did the rollback ({exc})",
                job_state="not running",
                savepoint=savepoint,
            ) from exc
        restore = self._confirm_parallelism(job_id, request)
        why = f"rolled back: {failure}; {restore.describe()}"
        self._register(plan, job_id, plan.run.conf, savepoint, why)
        return ApplyOutcome(
            plan.job_id,
            savepoint,
            job_id,
            False,
            plan.run.conf,
            failure,
            list(restore.notes),
            restore,
        )

    def _check(self, job_id: str) -> tuple[VertexParallelism, ...]:
        """The job RUNNING (else a ``check`` error); its vertices at their parallelism now."""
        try:
            detail = self.client.job(job_id)
        except FlinkError as exc:
            state = f"unknown ({exc})"
            raise StateApplyError("check", f"job {job_id} is {state}", job_state=state) from exc
        if detail.state != "RUNNING":
            raise StateApplyError(
                "check", f"job {job_id} is {detail.state}", job_state=detail.state
            )
        return vertex_parallelism(detail)

    def _state(self, job_id: str) -> str:
        try:
            return self.client.job(job_id).state
        except FlinkError as exc:
            return f"unknown ({exc})"

    def _stop_with_savepoint(self, plan: ApplyPlan) -> str:
        try:
            request_id = self.client.stop_with_savepoint(plan.job_id, plan.savepoint_dir)
        except FlinkError as exc:
            raise StateApplyError(
                "savepoint", str(exc), job_state=self._state(plan.job_id)
            ) from exc
        self.on_step(f"savepoint: stopping job {plan.job_id} (request {request_id})")
        deadline = self.clock() + self.savepoint_timeout_s
        while True:
            try:
                trigger = self.client.savepoint_status(plan.job_id, request_id)
            except FlinkError as exc:
                log.info("job %s: savepoint status (%s)", plan.job_id, exc)
            else:
                if trigger.succeeded and trigger.location:
                    return trigger.location
                if trigger.status == "COMPLETED":
                    raise StateApplyError(
                        "savepoint",
                        f"Flink wrote no savepoint: {trigger.failure_cause or 'no cause given'}",
                        job_state=self._state(plan.job_id),
                    )
            if self.clock() > deadline:
                raise StateApplyError(
                    "savepoint",
                    f"no savepoint within {self.savepoint_timeout_s:.0f} s (request "
                    f"{request_id}; it may still complete)",
                    job_state=self._state(plan.job_id),
                )
            self.sleep(POLL_S)

    def _wait_ended(self, job_id: str, savepoint: str) -> None:
        """Until the stopped job has ended: its slots are free for the restart, and no
        two copies of it write to the same sinks. StateApplyError when it does not end."""
        deadline = self.clock() + self.savepoint_timeout_s
        while True:
            try:
                state = self.client.job(job_id).state
            except FlinkError as exc:  # gone from the JobManager: ended too
                log.info("job %s: %s", job_id, exc)
                return
            if state in TERMINAL_STATES:
                return
            if self.clock() > deadline:
                raise StateApplyError(
                    "savepoint",
                    f"the stopped job has not ended within {self.savepoint_timeout_s:.0f} s: "
                    "not resubmitted (two copies would write to the same sinks)",
                    job_state=state,
                    savepoint=savepoint,
                )
            self.sleep(POLL_S)

    def _start(
        self,
        plan: ApplyPlan,
        conf: Mapping[str, str],
        savepoint: str,
        before: tuple[VertexParallelism, ...],
    ) -> tuple[str, ParallelismRequest]:
        """Resubmit from ``savepoint`` with ``conf``, each vertex asked for its parallelism
        ``before`` the stop; the job id once it runs steadily, and that request."""
        run = plan.run
        command = flink_run_command(
            self.flink_home,
            run.jobmanager,
            run.parallelism,
            dict(conf),
            ["-s", savepoint, *run.flink_args],
        )
        self.on_step("submit: " + " ".join(command))
        try:
            done = self.runner(command, flink_environment(self.flink_home))
        except (OSError, subprocess.SubprocessError) as exc:
            raise _RestartError(f"flink run did not finish: {exc}") from exc
        output = (done.stdout or "") + (done.stderr or "")
        if done.returncode != 0:
            raise _RestartError(f"flink run exited {done.returncode}: {_tail(output)}")
        try:
            job_id = parse_job_id(output)
        except FlinkError as exc:
            raise _RestartError(str(exc)) from exc
        request = request_parallelism(
            self.client,
            job_id,
            before,
            timeout_s=self.running_timeout_s,
            clock=self.clock,
            sleep=self.sleep,
        )
        first_running: dict[str, int] = {}
        failure = self._wait_steady(job_id, first_running)
        if failure is not None:
            self._cancel(job_id)
            raise _RestartError(f"job {job_id} {failure}")
        return job_id, replace(request, first_running=first_running)

    def _wait_steady(self, job_id: str, first_running: dict[str, int]) -> str | None:
        """None once every vertex has run for ``settle_s``; else what the job did instead.
        ``first_running`` gets the parallelism (vertex id → p) the job first ran at."""
        deadline = self.clock() + self.running_timeout_s
        steady_since: float | None = None
        last = "not seen yet"
        while self.clock() <= deadline:
            try:
                detail = self.client.job(job_id)
            except FlinkError as exc:
                detail, last = None, f"not reachable ({exc})"
            if detail is not None:
                vertices = sorted({v.status for v in detail.vertices})
                last = f"{detail.state} (vertices {', '.join(vertices)})"
                if detail.state in TERMINAL_STATES:
                    return f"ended {last}"
                if detail.state == "RUNNING" and vertices == ["RUNNING"]:
                    if not first_running:
                        first_running.update({v.id: v.parallelism for v in detail.vertices})
                    steady_since = steady_since if steady_since is not None else self.clock()
                    if self.clock() - steady_since >= self.settle_s:
                        return None
                else:
                    steady_since = None
            self.sleep(POLL_S)
        return f"not running steadily within {self.running_timeout_s:.0f} s: {last}"

    def _confirm_parallelism(self, job_id: str, request: ParallelismRequest) -> ParallelismRestore:
        restore = confirm_parallelism(
            self.client,
            job_id,
            request,
            timeout_s=self.running_timeout_s,
            clock=self.clock,
            sleep=self.sleep,
        )
        self.on_step(restore.describe())
        return restore

    def _cancel(self, job_id: str) -> None:
        if self._state(job_id) in TERMINAL_STATES:
            return
        try:
            self.client.cancel(job_id)
        except FlinkError as exc:
            log.warning("job %s: cancel after a failed restart: %s", job_id, exc)

    def _check_backend(self, job_id: str, conf: Mapping[str, str]) -> list[str]:
        """A note when the job runs another backend than asked (its code may set one)."""
        wanted = BACKEND_CLASSES.get(conf.get(BACKEND_KEY, ""))
        try:
            running = self.client.checkpoint_config(job_id).state_backend
        except FlinkError as exc:
            return [f"state backend not confirmed ({exc})"]
        if wanted and running != wanted:
            return [f"the job runs {running}, not {wanted}: does its code set a backend?"]
        return []

    def _register(
        self, plan: ApplyPlan, job_id: str, conf: Mapping[str, str], savepoint: str, why: str
    ) -> None:
        run = plan.run.model_copy(
            update={
                "job_id": job_id,
                "submitted_at_ms": int(time.time() * 1000),
                "conf": dict(conf),
                "running_since_ms": None,
                "reasons": [f"restarted from {savepoint} (job {plan.job_id}): {why}"],
            }
        )
        self.registry.add(RunRecord.model_validate(run.model_dump()))


class _RestartError(Exception):
    """A resubmission that did not end in a steadily running job (the message says how)."""


def _tail(output: str, lines: int = 5) -> str:
    return " | ".join(line.strip() for line in output.strip().splitlines()[-lines:])
