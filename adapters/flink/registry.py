"""The local registry of Flink jobs kubesage submitted: one YAML file in the user cache.

``kubesage flink submit`` records every run (job, JobManager, parallelism, checkpoint
interval, phase and whether the coordinator drives it); later submissions of the same
job read it to start at the parallelism the previous run ended at, and the stagger
command reads the intervals of the jobs it drives. The file is small and local on
purpose: it is history for one user, not cluster state (the JobManager is the truth
for that). Writes are atomic (temp file + rename) under an advisory lock, so two
commands never interleave their updates. A submit also reserves the phase it chose
(``reservations``) until its job is registered, so submits started together place
their phases beside each other instead of on the same one.

File: ``$KUBESAGE_CACHE_DIR/flink-jobs.yaml`` (else ``$XDG_CACHE_HOME/kubesage`` or
``~/.cache/kubesage``)::

    apiVersion: kubesage/v1
    kind: FlinkJobRegistry
    runs:
      - job_id: 9aded9ac8efe51c3ef64efea868b2721
        job_key: clicks-enrich
        jobmanager: http://flink-jm:8081
        submitted_at_ms: 1796005191615
        parallelism: 4
        …
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kubesage.adapters.flink.client import rest_url_key
from kubesage.core.errors import ConfigError
from kubesage.core.field_errors import config_error, yaml_error
from kubesage.core.paths import cache_dir

REGISTRY_FILE = "flink-jobs.yaml"


class RunRecord(BaseModel):
    """One submission of a job."""

    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(min_length=1)
    job_key: str = Field(min_length=1)
    """Identity of the job across runs (``--name``, else the program file)."""
    jobmanager: str
    submitted_at_ms: int
    parallelism: int | None = Field(None, ge=1)
    """Parallelism it was submitted with (None: Flink's default)."""
    final_parallelism: int | None = Field(None, ge=1)
    """Highest vertex parallelism last seen at the JobManager (after any autoscaling)."""
    checkpoint_interval_ms: int | None = Field(None, gt=0)
    phase_ms: int | None = Field(None, ge=0)
    """Phase of its checkpoints since the Unix epoch, modulo the interval."""
    phase_window_ms: int | None = Field(None, gt=0)
    """Width of the window the phase lands in (jobs Flink checkpoints itself)."""
    driven: bool = False
    """True: Flink does not checkpoint it periodically; the coordinator triggers it."""
    checkpoint_duration_ms: int | None = Field(None, ge=0)
    checkpoint_size_bytes: int | None = Field(None, ge=0)
    running_since_ms: int | None = None
    reasons: list[str] = Field(default_factory=list)
    flink_args: list[str] = Field(default_factory=list)
    """The user's own ``flink run`` arguments (after ``--``): what a restart resubmits."""
    conf: dict[str, str] = Field(default_factory=dict)
    """The ``-D`` settings kubesage submitted it with (``flink state --apply`` adds to them)."""


class PhaseReservation(BaseModel):
    """A checkpoint phase chosen by a submit whose job is not registered yet (its
    ``flink run`` is still going): a submit beside it places its phase around it too."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1)
    jobmanager: str
    checkpoint_interval_ms: int = Field(gt=0)
    phase_ms: int = Field(ge=0)
    checkpoint_duration_ms: int | None = Field(None, ge=0)
    """None: not measured (the default guess is planned with)."""
    expires_at_ms: int
    """When it no longer counts (a submit that died without releasing it)."""


class RegistryDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    apiVersion: Literal["kubesage/v1"] = "kubesage/v1"  # noqa: N815 - the YAML key
    kind: Literal["FlinkJobRegistry"] = "FlinkJobRegistry"
    runs: list[RunRecord] = Field(default_factory=list)
    reservations: list[PhaseReservation] = Field(default_factory=list)


def default_registry_path() -> Path:
    return cache_dir() / REGISTRY_FILE


class JobRegistry:
    """Reads and updates the registry file at ``path`` (created on first write)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_registry_path()

    def load(self) -> RegistryDocument:
        """The whole file; a missing file is an empty registry."""
        if not self.path.exists():
            return RegistryDocument()
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read the job registry: {exc}", path=self.path) from exc
        if not text.strip():
            # every write replaces the file whole: an empty one was cut short (a crash)
            raise ConfigError(
                "the job registry is empty: it was cut short; restore it from a backup, or "
                "remove it to start an empty one (the jobs' history is lost)",
                path=self.path,
            )
        try:
            data: Any = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise yaml_error(exc, path=self.path) from exc
        try:
            return RegistryDocument.model_validate(data)
        except ValidationError as exc:
            raise config_error(exc, path=self.path) from exc

    def runs(self, *, job_key: str | None = None, jobmanager: str | None = None) -> list[RunRecord]:
        """Runs, oldest first, optionally of one job and/or one JobManager (the same
        cluster however its URL is spelled:
        :func:`~kubesage.adapters.flink.client.rest_url_key`)."""
        wanted = None if jobmanager is None else rest_url_key(jobmanager)
        return [
            run
            for run in self.load().runs
            if (job_key is None or run.job_key == job_key)
            and (jobmanager is None or rest_url_key(run.jobmanager) == wanted)
        ]

    def find(self, job_id: str) -> RunRecord | None:
        return next((run for run in reversed(self.load().runs) if run.job_id == job_id), None)

    def add(self, run: RunRecord, *, releasing: str | None = None) -> None:
        """Register ``run`` (replacing a run of the same job id); ``releasing``: the token
        of the phase reservation it takes the place of."""
        with self._locked() as document:
            document.runs = [r for r in document.runs if r.job_id != run.job_id] + [run]
            document.reservations = [r for r in document.reservations if r.token != releasing]

    def reserve_phase(
        self,
        jobmanager: str,
        choose: Callable[[list[PhaseReservation]], PhaseReservation | None],
        *,
        now_ms: int,
        since_ms: int,
    ) -> str | None:
        """Under the registry's lock, so concurrent submits see each other's choice:
        ``choose`` gets the unexpired reservations of ``jobmanager`` (expired ones are
        dropped), and as reservations too the runs registered there since ``since_ms``
        (when the caller last read the running jobs: a submit that ended meanwhile took
        its reservation away); it returns the new one to keep, or None; its token."""
        wanted = rest_url_key(jobmanager)
        with self._locked() as document:
            document.reservations = [r for r in document.reservations if r.expires_at_ms > now_ms]
            beside = [r for r in document.reservations if rest_url_key(r.jobmanager) == wanted]
            beside += [
                PhaseReservation(
                    token=run.job_id,
                    jobmanager=run.jobmanager,
                    checkpoint_interval_ms=run.checkpoint_interval_ms,
                    phase_ms=run.phase_ms,
                    checkpoint_duration_ms=run.checkpoint_duration_ms,
                    expires_at_ms=now_ms,
                )
                for run in document.runs
                if run.submitted_at_ms >= since_ms
                and rest_url_key(run.jobmanager) == wanted
                and run.checkpoint_interval_ms
                and run.phase_ms is not None
            ]
            reservation = choose(beside)
            if reservation is None:
                return None
            document.reservations.append(reservation)
            return reservation.token

    def release(self, token: str) -> None:
        """Drop the phase reservation ``token`` (its submit failed)."""
        with self._locked() as document:
            document.reservations = [r for r in document.reservations if r.token != token]

    def update(self, job_id: str, **changes: Any) -> RunRecord | None:
        """Set fields of the run of ``job_id`` (validated); None if it is not registered."""
        with self._locked() as document:
            for index, run in enumerate(document.runs):
                if run.job_id == job_id:
                    updated = RunRecord.model_validate(run.model_dump() | changes)
                    document.runs[index] = updated
                    return updated
        return None

    @contextmanager
    def _locked(self) -> Iterator[RegistryDocument]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_suffix(".lock")
        with lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            document = self.load()
            yield document
            # no empty `reservations`: a registry without them reads in older versions too
            dumped = document.model_dump(
                mode="json", exclude={"reservations"} if not document.reservations else None
            )
            text = yaml.safe_dump(dumped, sort_keys=False)
            handle, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".flink-jobs-")
            try:
                with os.fdopen(handle, "w") as out:
                    out.write(text)
                    out.flush()
                    os.fsync(out.fileno())  # on disk before it replaces the old file
                if self.path.exists():  # keep the file's mode (mkstemp's is 0600)
                    os.chmod(temp, self.path.stat().st_mode & 0o7777)
                os.replace(temp, self.path)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
