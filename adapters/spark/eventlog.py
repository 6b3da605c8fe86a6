"""Spark event logs (``spark.eventLog.enabled``) read into stage graphs with shuffle bytes.

A log is JSON lines, one listener event per line. Accepted forms: a single file
(plain, ``.gz`` or ``.zstd`` — Spark 4's default codec), or a rolling log
directory (``eventlog_v2_<app>/events_<n>_<app>[.codec]``, read in ``n`` order).

Used events: application start, executor added, job start (stage parents, also of
stages later skipped), stage completed (latest attempt wins) and task end (per
task: executor, host, shuffle bytes written, shuffle bytes read locally and
remotely, input bytes). Every other event type is skipped and counted in
:attr:`SparkApplication.skipped_events`. A line that is not JSON, or a used event
without a field it needs, is an :class:`EventLogError` naming the file and line;
a last line cut off mid-event says the log is truncated.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubesage.core.errors import InputError


class EventLogError(InputError):
    """A Spark event log that cannot be read; names the file and line."""


@dataclass(frozen=True)
class TaskShuffle:
    """What one successful task moved."""

    task_id: int
    stage_id: int
    executor_id: str
    host: str
    shuffle_write_bytes: int
    shuffle_read_local_bytes: int
    shuffle_read_remote_bytes: int
    input_bytes: int
    duration_ms: int


@dataclass
class Stage:
    stage_id: int
    name: str = ""
    num_tasks: int = 0
    parent_ids: tuple[int, ...] = ()
    rdd_key: int | None = None
    """The stage's last RDD id: stages with equal keys compute the same thing (a stage
    listed as a parent may be skipped because another stage already wrote its shuffle)."""
    completed: bool = False
    tasks: list[TaskShuffle] = field(default_factory=list)

    @property
    def shuffle_write_bytes(self) -> int:
        return sum(t.shuffle_write_bytes for t in self.tasks)

    @property
    def shuffle_read_bytes(self) -> int:
        return sum(t.shuffle_read_local_bytes + t.shuffle_read_remote_bytes for t in self.tasks)

    @property
    def shuffle_read_remote_bytes(self) -> int:
        return sum(t.shuffle_read_remote_bytes for t in self.tasks)

    @property
    def input_bytes(self) -> int:
        return sum(t.input_bytes for t in self.tasks)


@dataclass(frozen=True)
class ShuffleEdge:
    """Bytes a stage read from one parent stage's shuffle output."""

    parent: int
    child: int
    bytes: int


@dataclass
class SparkApplication:
    app_id: str = ""
    name: str = ""
    spark_version: str = ""
    stages: dict[int, Stage] = field(default_factory=dict)
    executor_cores: dict[str, int] = field(default_factory=dict)
    skipped_events: Counter[str] = field(default_factory=Counter)
    failed_tasks: int = 0

    def executed_parents(self, stage: Stage) -> list[Stage]:
        """``stage``'s parents, each skipped one replaced by the stage that ran in its place.

        With adaptive query execution every shuffle runs as its own job and later jobs
        list fresh, skipped stage ids as parents; the stage that actually wrote the
        shuffle has the same last RDD.
        """
        ran: dict[int, Stage] = {}
        for other in sorted(self.stages.values(), key=lambda s: s.stage_id):
            if other.tasks and other.rdd_key is not None:
                ran.setdefault(other.rdd_key, other)
        parents = []
        for parent_id in stage.parent_ids:
            parent = self.stages.get(parent_id)
            if parent is None:
                continue
            if not parent.tasks and parent.rdd_key is not None and parent.rdd_key in ran:
                parent = ran[parent.rdd_key]
            parents.append(parent)
        return parents

    def shuffle_edges(self) -> list[ShuffleEdge]:
        """Shuffle bytes per parent → child stage (over the stages that ran).

        A child's shuffle read is split over its parents in proportion to what each
        wrote (the log records reads per task, not per source stage).
        """
        edges = []
        for stage in sorted(self.stages.values(), key=lambda s: s.stage_id):
            read = stage.shuffle_read_bytes
            parents = self.executed_parents(stage)
            written = sum(p.shuffle_write_bytes for p in parents)
            if read == 0 or written == 0:
                continue
            for parent in parents:
                share = parent.shuffle_write_bytes / written
                if share:
                    edges.append(ShuffleEdge(parent.stage_id, stage.stage_id, round(read * share)))
        return edges

    @property
    def total_shuffle_bytes(self) -> int:
        return sum(s.shuffle_read_bytes for s in self.stages.values())


_ROLLING_PART = re.compile(r"^events_(\d+)_")


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    if path.suffix in (".zstd", ".zst"):
        import zstandard

        return io.TextIOWrapper(
            zstandard.ZstdDecompressor().stream_reader(path.open("rb")), encoding="utf-8"
        )
    if path.suffix in (".lz4", ".snappy", ".lzf"):
        raise EventLogError(
            f"{path}: {path.suffix[1:]}-compressed event logs are not supported; "
            "set spark.eventLog.compression.codec=zstd (or spark.eventLog.compress=false)"
        )
    return path.open("r", encoding="utf-8")


def _files(path: Path) -> list[Path]:
    if not path.exists():
        raise EventLogError(f"{path}: no such event log")
    if path.is_file():
        return [path]
    parts = []
    for child in path.iterdir():
        match = _ROLLING_PART.match(child.name)
        if match:
            parts.append((int(match.group(1)), child))
    if not parts:
        raise EventLogError(f"{path}: a directory without events_<n>_* files")
    return [child for _, child in sorted(parts)]


def _events(path: Path) -> Iterator[tuple[str, int, dict[str, Any]]]:
    for file in _files(path):
        try:
            with _open_text(file) as stream:
                lines = stream.readlines()
        except (OSError, EOFError, UnicodeDecodeError, ValueError) as exc:
            raise EventLogError(f"{file}: cannot read: {exc}") from exc
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                last = number == len(lines) and not line.endswith("\n")
                reason = "truncated (the log ends mid-event)" if last else f"not JSON ({exc.msg})"
                raise EventLogError(f"{file}:{number}: {reason}") from None
            if not isinstance(event, dict) or "Event" not in event:
                raise EventLogError(f"{file}:{number}: not a listener event (no 'Event' field)")
            yield str(file), number, event


def _get(event: dict[str, Any], where: str, *keys: str) -> Any:
    value: Any = event
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            raise EventLogError(f"{where}: {event['Event']} has no '{'.'.join(keys)}'")
        value = value[key]
    return value


def read_event_log(path: Path | str) -> SparkApplication:
    """Read a Spark event log (file or rolling directory) into a SparkApplication."""
    app = SparkApplication()
    for file, number, event in _events(Path(path)):
        kind = event["Event"]
        where = f"{file}:{number}"
        if kind == "SparkListenerLogStart":
            app.spark_version = str(event.get("Spark Version", ""))
        elif kind == "SparkListenerApplicationStart":
            app.name = str(_get(event, where, "App Name"))
            app.app_id = str(event.get("App ID", ""))
        elif kind == "SparkListenerExecutorAdded":
            executor = str(_get(event, where, "Executor ID"))
            app.executor_cores[executor] = int(_get(event, where, "Executor Info", "Total Cores"))
        elif kind == "SparkListenerJobStart":
            for info in _get(event, where, "Stage Infos"):
                _stage_from_info(app, info, where, completed=False)
        elif kind == "SparkListenerStageCompleted":
            _stage_from_info(app, _get(event, where, "Stage Info"), where, completed=True)
        elif kind == "SparkListenerTaskEnd":
            _task_end(app, event, where)
        else:
            app.skipped_events[kind] += 1
    return app


def _stage_from_info(app: SparkApplication, info: Any, where: str, completed: bool) -> None:
    if not isinstance(info, dict):
        raise EventLogError(f"{where}: a stage info is not an object")
    stage_id = int(_get({"Event": "stage info", **info}, where, "Stage ID"))
    stage = app.stages.setdefault(stage_id, Stage(stage_id))
    stage.name = str(info.get("Stage Name", stage.name))
    stage.num_tasks = int(info.get("Number of Tasks", stage.num_tasks))
    stage.parent_ids = tuple(int(p) for p in info.get("Parent IDs", stage.parent_ids))
    rdds = [int(r["RDD ID"]) for r in info.get("RDD Info", []) if "RDD ID" in r]
    if rdds:
        stage.rdd_key = max(rdds)
    stage.completed = stage.completed or completed


def _task_end(app: SparkApplication, event: dict[str, Any], where: str) -> None:
    reason = _get(event, where, "Task End Reason", "Reason")
    if reason != "Success":
        app.failed_tasks += 1
        return
    stage_id = int(_get(event, where, "Stage ID"))
    info = _get(event, where, "Task Info")
    metrics = _get(event, where, "Task Metrics")
    read = metrics.get("Shuffle Read Metrics", {})
    write = metrics.get("Shuffle Write Metrics", {})
    task = TaskShuffle(
        task_id=int(_get(event, where, "Task Info", "Task ID")),
        stage_id=stage_id,
        executor_id=str(info.get("Executor ID", "")),
        host=str(info.get("Host", "")),
        shuffle_write_bytes=int(write.get("Shuffle Bytes Written", 0)),
        shuffle_read_local_bytes=int(read.get("Local Bytes Read", 0)),
        shuffle_read_remote_bytes=int(read.get("Remote Bytes Read", 0)),
        input_bytes=int(metrics.get("Input Metrics", {}).get("Bytes Read", 0)),
        duration_ms=int(info.get("Finish Time", 0)) - int(info.get("Launch Time", 0)),
    )
    app.stages.setdefault(stage_id, Stage(stage_id)).tasks.append(task)
