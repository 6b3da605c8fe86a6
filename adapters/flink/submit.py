"""``kubesage flink submit``: choose parallelism and checkpoint phase, run ``flink run``, register.

Initial parallelism, first match wins:

1. ``-p``/``--parallelism`` (or ``-Dparallelism.default``) in the user's own ``flink run``
   arguments (theirs, untouched);
2. ``--parallelism``;
3. a forecast: ``⌈forecast_rate / (subtask_rate · target_utilisation)⌉``;
4. history: the parallelism the job's latest run ended at (refreshed from the
   JobManager, so a run the autoscaler resized counts at its final size);
5. none: Flink's default (``parallelism.default``).

Checkpoints: with an interval (``--checkpoint-interval-s``, else the job's last run),
the new job's phase is placed beside the phases of the registered jobs still running
or starting on that JobManager (:func:`~kubesage.adapters.flink.stagger.best_phase`)
and of the submits to it still going: each reserves its phase in the registry, under
its lock, until its job is registered. A *driven*
job is submitted without periodic checkpoints; ``kubesage flink stagger`` triggers it
at its phase. Otherwise Flink checkpoints it and the phase is realised through
``min-pause`` to within a window (see
:mod:`~kubesage.adapters.flink.checkpoint_settings`): the registry records where
that window landed once the job is RUNNING.

GPUs: ``--taskmanager-gpus`` asks for them per TaskManager in the ``--devices`` form
(device plugin by default, or a DRA claim in the TaskManager pod template; see
:mod:`~kubesage.adapters.flink.taskmanager_gpus`).
"""

from __future__ import annotations

import logging
import math
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from kubesage.adapters.flink.checkpoint_choice import (
    CheckpointChoice,
    choose_checkpointing,
    landed_checkpoints,
)
from kubesage.adapters.flink.checkpoint_settings import (
    periodic_interval_ms,
)
from kubesage.adapters.flink.client import FlinkClient, check_rest_url
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.flink_home import find_flink_home
from kubesage.adapters.flink.registry import JobRegistry, PhaseReservation, RunRecord
from kubesage.adapters.flink.run_arguments import (
    parallelism_set,
    program_name,
    with_absolute_files,
)
from kubesage.adapters.flink.taskmanager_gpus import taskmanager_gpus, write_files
from kubesage.core.dra.claims import DeviceMode
from kubesage.core.errors import InputError

log = logging.getLogger(__name__)

JOB_ID = re.compile(r"JobID\s+([0-9a-f]{32})")
TARGET_UTILISATION = 0.8
FLINK_RUN_TIMEOUT_S = 300
"""How long ``flink run`` may take (a JobID printed before it ends still counts)."""
RESERVATION_MS = 2 * FLINK_RUN_TIMEOUT_S * 1000
"""How long a submit's phase reservation counts if the submit never ends it."""
LIVE_STATES = frozenset({"INITIALIZING", "CREATED", "RUNNING", "RESTARTING", "RECONCILING"})
"""Flink job states whose checkpoints are, or are about to be, on the JobManager's
schedule: a new job's phase is placed beside the registered jobs in them."""
Runner = Callable[[Sequence[str], dict[str, str]], "subprocess.CompletedProcess[str]"]


class FlinkSubmitError(FlinkError):
    """``flink run`` failed or printed no job id (its output's tail is in the message)."""


@dataclass(frozen=True)
class SubmitRequest:
    """What the user asked for; ``flink_args`` are theirs, after ``--``."""

    flink_args: tuple[str, ...]
    jobmanager: str
    name: str | None = None
    parallelism: int | None = None
    forecast_rate: float | None = None
    """Records/s the job is expected to receive."""
    subtask_rate: float | None = None
    """Records/s one subtask of its bottleneck handles."""
    checkpoint_interval_ms: int | None = None
    driven: bool = True
    flink_home: Path | None = None
    wait_running_s: float = 60.0
    taskmanager_gpus: int = 0
    """GPUs per TaskManager (0: none asked for)."""
    devices: DeviceMode = DeviceMode.device_plugin
    """How the TaskManagers ask for their GPUs."""
    template_dir: Path = Path("kubesage-flink")
    """Where DRA's TaskManager pod template and claim template are written."""

    def __post_init__(self) -> None:
        if not self.flink_args:
            raise InputError("give the `flink run` arguments after '--' (e.g. -py job.py)")
        if self.taskmanager_gpus < 0:
            raise InputError(f"--taskmanager-gpus must be ≥ 0, got {self.taskmanager_gpus}")
        if self.devices is DeviceMode.dra and not self.taskmanager_gpus:
            raise InputError("--devices dra is for GPU TaskManagers: give --taskmanager-gpus")
        if self.parallelism is not None and self.parallelism < 1:
            raise InputError(f"--parallelism must be ≥ 1, got {self.parallelism}")
        if (self.forecast_rate is None) != (self.subtask_rate is None):
            raise InputError("--forecast-rate and --subtask-rate go together")
        for option, value in (
            ("--forecast-rate", self.forecast_rate),
            ("--subtask-rate", self.subtask_rate),
        ):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise InputError(f"{option} must be a positive number, got {value}")
        if self.checkpoint_interval_ms is not None and self.checkpoint_interval_ms <= 0:
            raise InputError("--checkpoint-interval-s must be positive")
        check_rest_url(self.jobmanager)


MAX_PARALLELISM = 32_768
"""Flink's largest parallelism (its maximum number of key groups, 2^15)."""


@dataclass(frozen=True)
class ParallelismChoice:
    parallelism: int | None
    reason: str


@dataclass(frozen=True)
class SubmitOutcome:
    job_id: str
    command: list[str]
    run: RunRecord
    reasons: list[str] = field(default_factory=list)


def job_key(request: SubmitRequest) -> str:
    """``--name``, else the program: the ``-py`` file, the ``-pym`` module, the ``-c``
    class or the jar (:func:`~kubesage.adapters.flink.run_arguments.program_name`)."""
    if request.name:
        return request.name
    name = program_name(request.flink_args)
    if name is None:
        raise InputError("cannot tell which program this is: pass --name")
    return name


def choose_parallelism(request: SubmitRequest, history: Sequence[RunRecord]) -> ParallelismChoice:
    """The initial parallelism and why (rules in the module docstring)."""
    theirs = parallelism_set(request.flink_args)
    if theirs is not None:
        return ParallelismChoice(None, f"parallelism {theirs} from your own flink run arguments")
    if request.parallelism is not None:
        return ParallelismChoice(request.parallelism, "parallelism from --parallelism")
    if request.forecast_rate is not None and request.subtask_rate is not None:
        needed = request.forecast_rate / (request.subtask_rate * TARGET_UTILISATION)
        if needed > MAX_PARALLELISM:
            raise InputError(
                f"--forecast-rate {request.forecast_rate:g} at --subtask-rate "
                f"{request.subtask_rate:g} needs parallelism {needed:.3g}, over Flink's "
                f"maximum of {MAX_PARALLELISM}"
            )
        chosen = max(1, math.ceil(needed - 1e-9))
        return ParallelismChoice(
            chosen,
            f"parallelism {chosen} = ⌈{request.forecast_rate:g} rec/s forecast ÷ "
            f"({request.subtask_rate:g} rec/s per subtask × {TARGET_UTILISATION:.0%} target)⌉",
        )
    for run in reversed(history):
        final = run.final_parallelism or run.parallelism
        if final is not None:
            return ParallelismChoice(
                final,
                f"parallelism {final}: where run {run.job_id[:8]} of this job "
                f"{'ended' if run.final_parallelism else 'started'}",
            )
    return ParallelismChoice(None, "no history or forecast: Flink's default parallelism")


def flink_run_command(
    flink_home: Path,
    jobmanager: str,
    parallelism: int | None,
    conf: dict[str, str],
    flink_args: Sequence[str],
) -> list[str]:
    """``bin/flink run -d -m host:port [-p N] -Dk=v … <user args>`` (user args last)."""
    parts = urlsplit(jobmanager)
    port = parts.port or (443 if parts.scheme == "https" else 80)  # as the REST client
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    # Through bash: a wheel's copy of bin/flink may have lost its executable bit.
    script = str(flink_home / "bin" / "flink")
    command = ["bash", script, "run", "-d", "-m", f"{host}:{port}"]
    if parallelism is not None:
        command += ["-p", str(parallelism)]
    command += [f"-D{key}={value}" for key, value in conf.items()]
    return [*command, *flink_args]


def parse_job_id(output: str) -> str:
    """The job id from ``flink run``'s "Job has been submitted with JobID <id>"."""
    match = JOB_ID.search(output)
    if match is None:
        raise FlinkSubmitError(f"flink run printed no JobID:\n{output[-3000:]}")
    return match.group(1)


def run_flink(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command),
        env=env,
        capture_output=True,
        text=True,
        timeout=FLINK_RUN_TIMEOUT_S,
        check=False,
    )


def _text(captured: bytes | str | None) -> str:
    """What a timed-out process had printed (bytes or text, as subprocess kept it)."""
    if isinstance(captured, bytes):
        return captured.decode("utf-8", "replace")
    return captured or ""


def flink_environment(flink_home: Path) -> dict[str, str]:
    """The caller's environment, with ``bin`` of the venv the Flink home is in (pyflink's
    ``<venv>/lib/python3.x/site-packages/pyflink``: the folder holding ``pyvenv.cfg``)
    first on PATH, so a ``-py`` job's client runs the Python that has pyflink."""
    env = dict(os.environ)
    venv = next((p for p in flink_home.resolve().parents if (p / "pyvenv.cfg").is_file()), None)
    if venv is not None and (venv / "bin" / "python").exists():
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def resolve_flink_home(explicit: Path | None) -> Path:
    """``--flink-home``, else ``$FLINK_HOME``, else the Flink venv (``make services``; see
    :mod:`~kubesage.adapters.flink.flink_home`)."""
    home = explicit or (Path(os.environ["FLINK_HOME"]) if os.environ.get("FLINK_HOME") else None)
    if home is None:
        return find_flink_home()
    if not (home / "bin" / "flink").is_file():
        raise InputError(f"no bin/flink under the Flink home '{home}'")
    return home


def submit(
    request: SubmitRequest,
    registry: JobRegistry,
    *,
    runner: Runner = run_flink,
    client_factory: Callable[[str], FlinkClient] = FlinkClient,
    clock: Callable[[], float] = time.time,
) -> SubmitOutcome:
    """Choose, run ``flink run``, register the job; raises FlinkSubmitError on failure."""
    key = job_key(request)
    history = registry.runs(job_key=key, jobmanager=request.jobmanager)
    reasons: list[str] = []
    with client_factory(request.jobmanager) as client:
        read_ms = int(clock() * 1000)  # runs registered from here on are not in `running`
        running = _refresh(client, registry, request.jobmanager, reasons)
        history = registry.runs(job_key=key, jobmanager=request.jobmanager)
        parallelism = choose_parallelism(request, history)
        chosen: list[CheckpointChoice] = []

        def choose(beside: list[PhaseReservation]) -> PhaseReservation | None:
            listed = {run.job_id for run in running}  # a run read live and registered since
            reserved = [r for r in beside if r.token not in listed]
            choice = choose_checkpointing(
                request.checkpoint_interval_ms, request.driven, history, running, reserved=reserved
            )
            chosen.append(choice)
            if choice.interval_ms is None or choice.phase_ms is None:
                return None
            return PhaseReservation(
                token=uuid.uuid4().hex,
                jobmanager=request.jobmanager,
                checkpoint_interval_ms=choice.interval_ms,
                phase_ms=choice.phase_ms,
                checkpoint_duration_ms=choice.duration_ms,
                expires_at_ms=int(clock() * 1000) + RESERVATION_MS,
            )

        token = registry.reserve_phase(
            request.jobmanager, choose, now_ms=int(clock() * 1000), since_ms=read_ms
        )
        (checkpointing,) = chosen
        reasons += [parallelism.reason, checkpointing.reason]
        try:
            run, command = _run_and_register(
                request, registry, key, parallelism, checkpointing, reasons, runner, clock, token
            )
        except BaseException:
            if token is not None:
                registry.release(token)
            raise
        run = _after_running(client, registry, run, request.wait_running_s, reasons)
    return SubmitOutcome(run.job_id, command, run, reasons)


def _run_and_register(
    request: SubmitRequest,
    registry: JobRegistry,
    key: str,
    parallelism: ParallelismChoice,
    checkpointing: CheckpointChoice,
    reasons: list[str],
    runner: Runner,
    clock: Callable[[], float],
    token: str | None,
) -> tuple[RunRecord, list[str]]:
    """Run ``flink run`` with the choices and register the job it submitted in place of
    the phase reservation ``token``; the run and the command."""
    conf = dict(checkpointing.conf)
    if request.taskmanager_gpus:
        gpus = taskmanager_gpus(
            request.taskmanager_gpus,
            request.devices,
            job=key,
            template_dir=request.template_dir,
        )
        write_files(gpus, request.template_dir)
        conf |= gpus.conf
        reasons.append(gpus.reason)
    flink_home = resolve_flink_home(request.flink_home)
    command = flink_run_command(
        flink_home,
        request.jobmanager,
        parallelism.parallelism,
        conf,
        request.flink_args,
    )
    try:
        done = runner(command, flink_environment(flink_home))
    except subprocess.TimeoutExpired as exc:
        # detached: a JobID printed before the hang means the job was submitted
        output = _text(exc.stdout) + _text(exc.stderr)
        if JOB_ID.search(output) is None:
            raise FlinkSubmitError(
                f"flink run did not finish within {exc.timeout:g} s and printed no "
                f"JobID:\n{output[-3000:]}"
            ) from exc
        reasons.append(f"flink run did not exit within {exc.timeout:g} s after submitting")
    except OSError as exc:
        raise FlinkSubmitError(f"cannot run flink ({command[1]}): {exc}") from exc
    else:
        output = (done.stdout or "") + (done.stderr or "")
        if done.returncode != 0:
            raise FlinkSubmitError(f"flink run exited {done.returncode}:\n{output[-3000:]}")
    job_id = parse_job_id(output)
    others = sorted(set(JOB_ID.findall(output)) - {job_id})
    if others:
        reasons.append(
            f"the program submitted {len(others) + 1} jobs; only the first ({job_id}) is "
            f"registered, not {', '.join(others)}: submit each job on its own"
        )
    run = RunRecord(
        job_id=job_id,
        job_key=key,
        jobmanager=request.jobmanager,
        submitted_at_ms=int(clock() * 1000),
        # what it was submitted with: kubesage's -p, else the user's own
        parallelism=parallelism.parallelism or parallelism_set(request.flink_args),
        checkpoint_interval_ms=checkpointing.interval_ms,
        phase_ms=checkpointing.phase_ms,
        phase_window_ms=checkpointing.phase_window_ms,
        driven=request.driven and checkpointing.interval_ms is not None,
        checkpoint_duration_ms=(
            checkpointing.duration_ms if checkpointing.duration_measured else None
        ),
        reasons=reasons,
        # absolute, so a restart (`flink state --apply`) resubmits from anywhere
        flink_args=with_absolute_files(request.flink_args, Path.cwd()),
        conf=conf,
    )
    registry.add(run, releasing=token)
    return run, command


def _refresh(
    client: FlinkClient, registry: JobRegistry, jobmanager: str, reasons: list[str]
) -> list[RunRecord]:
    """Update registered runs' final parallelism and what their checkpoint history shows
    (:func:`landed_checkpoints`); the registered runs still live (:data:`LIVE_STATES`)."""
    try:
        states = {job.job_id: job.state for job in client.jobs()}
    except FlinkError as exc:
        reasons.append(f"JobManager not reachable for history ({exc}); using the registry only")
        return []
    running = []
    for run in registry.runs(jobmanager=jobmanager):
        if run.job_id not in states:
            continue
        try:
            detail = client.job(run.job_id)
        except FlinkError as exc:
            log.info("job %s: no detail (%s)", run.job_id, exc)
            continue
        final = max((v.parallelism for v in detail.vertices), default=None)
        if final is not None and final != run.final_parallelism:
            run = registry.update(run.job_id, final_parallelism=final) or run
        landed = landed_checkpoints(client, run)
        if landed is not None:
            changes: dict[str, object] = {
                "checkpoint_duration_ms": landed.duration_ms,
                "checkpoint_size_bytes": landed.size_bytes,
            }
            if landed.phase_ms is not None:
                changes["phase_ms"] = landed.phase_ms
            if any(getattr(run, name) != value for name, value in changes.items()):
                run = registry.update(run.job_id, **changes) or run
        if states[run.job_id] in LIVE_STATES:
            running.append(run)
    return running


def _after_running(
    client: FlinkClient,
    registry: JobRegistry,
    run: RunRecord,
    wait_s: float,
    reasons: list[str],
) -> RunRecord:
    """Wait for RUNNING; record when, where a Flink-checkpointed phase landed, and drive."""
    deadline = time.monotonic() + wait_s
    since = None
    while time.monotonic() < deadline:
        try:
            detail = client.job(run.job_id)
        except FlinkError as exc:
            log.info("job %s: waiting for RUNNING (%s)", run.job_id, exc)
            detail = None
        if detail is not None and detail.state == "RUNNING" and detail.running_since_ms:
            since = detail.running_since_ms
            break
        time.sleep(0.5)
    if since is None:
        reasons.append(f"job not RUNNING within {wait_s:g} s: phase not confirmed")
        return registry.update(run.job_id, reasons=list(reasons)) or run
    changes: dict[str, object] = {"running_since_ms": since}
    try:
        periodic = periodic_interval_ms(client, run.job_id)
    except FlinkError as exc:
        periodic = None
        log.info("job %s: no checkpoint config (%s)", run.job_id, exc)
    planned = run.checkpoint_interval_ms
    if periodic is not None and (run.driven or periodic != planned):
        # Flink checkpoints this job at its own interval (raised to min-pause when
        # shorter: Flink's CheckpointCoordinator), from a first checkpoint it draws at
        # random. The registry keeps that interval, so the phase later read from the
        # job's history (landed_checkpoints) is taken modulo the interval Flink uses.
        min_pause = planned - (run.phase_window_ms or 0) if planned and not run.driven else 0
        effective = max(periodic, min_pause)
        changes.update(checkpoint_interval_ms=effective, phase_ms=None)
        if run.driven:
            changes["driven"] = False
            reasons.append(
                f"the job enables periodic checkpoints itself (every {periodic} ms): "
                "the coordinator will not drive it"
            )
        else:
            reasons.append(
                f"the job sets its own checkpoint interval ({periodic} ms; code overrides -D): "
                f"with min-pause {min_pause} ms Flink checkpoints every {effective} ms, and "
                "the phase window does not hold"
            )
    elif not run.driven and planned and run.phase_window_ms:
        # First checkpoint in [since + T − w, since + T]: the phase window's start.
        interval = planned
        changes["phase_ms"] = (since + interval - run.phase_window_ms) % interval
        reasons.append(
            f"RUNNING at {since}: phase lands in [{changes['phase_ms']}, "
            f"{changes['phase_ms']} + {run.phase_window_ms}) ms mod {interval} ms"
        )
    changes["reasons"] = reasons
    return registry.update(run.job_id, **changes) or run
