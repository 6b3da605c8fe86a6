"""Spark event logs (``spark.eventLog.enabled``) read into stage graphs with shuffle bytes.

A log is JSON lines, one listener event per line. Accepted forms: a single file
(plain, ``.gz`` or ``.zstd`` — Spark 4's default codec), or a rolling log
directory (``eventlog_v2_<app>/events_<n>_<app>[.codec]``, read in ``n`` order);
the path may be a ``file://`` URI, as ``spark.eventLog.dir`` is written. The codec
comes from the name without Spark's ``.inprogress`` and ``.compact`` endings. A file is
read and decompressed in pieces, one event line at a time, so memory follows the
longest line, not the log; lines end at ``\n`` only (U+2028 inside a JSON string,
which Spark writes raw, is text).

A log still being written (named ``….inprogress``, or a rolling directory whose
``appstatus_…`` file is) often ends mid-line, or mid-zstd-frame, where Spark's
buffered writer stopped: as Spark's own replay does, that last partial event is
dropped and said in :attr:`SparkApplication.notes`. In a finished log the same is an
error saying the log is cut off.

Used events: application start, executor added, job start (stage parents, also of
stages later skipped), stage completed (latest attempt wins) and task end (per
task: executor, host, shuffle bytes written, shuffle bytes read locally and
remotely, input bytes). Every other event type is skipped and counted in
:attr:`SparkApplication.skipped_events`, and so is a successful task end without
``Task Metrics`` (Spark writes them optionally). A line that is not JSON, a used
event without a field it needs, or a count that is not a non-negative whole number
is an :class:`EventLogError` naming the file and line.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
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
    notes: list[str] = field(default_factory=list)
    """What was read differently from what the log holds (a dropped partial last event)."""

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
_URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_LIVE_ENDINGS = (".inprogress", ".compact")
"""Endings Spark adds after the codec's (a log being written; a compacted rolling part)."""


def _codec(path: Path) -> str:
    """The compression codec's suffix (``.zstd``, ``.gz``, …; ``""`` for none)."""
    name = path.name
    for ending in _LIVE_ENDINGS:
        name = name.removesuffix(ending)
    return Path(name).suffix if "." in name else ""


_READ_BYTES = 1 << 20
"""How much of a log file is read (or decompressed) at a time."""
_ZSTD_READ_BYTES = 1 << 16
"""How much of a zstd log is decompressed at a time: zstd's decoder returns all that
its input holds, ten to twenty times as much for an event log."""


class _Decoded:
    """A log file's bytes after its codec, in pieces, without holding the whole file;
    :attr:`cut` says, once every piece is read, whether a zstd stream stopped
    mid-frame."""

    def __init__(self, file: Path):
        self.file = file
        self.codec = _codec(file)
        if self.codec in (".lz4", ".snappy", ".lzf"):
            raise EventLogError(
                f"{file}: {self.codec[1:]}-compressed event logs are not supported; "
                "set spark.eventLog.compression.codec=zstd (or spark.eventLog.compress=false)"
            )
        self.cut = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            if self.codec == ".gz":
                with gzip.open(self.file, "rb") as handle:
                    yield from iter(partial(handle.read, _READ_BYTES), b"")
            else:
                with self.file.open("rb") as handle:
                    if self.codec in (".zstd", ".zst"):
                        yield from self._zstd_frames(
                            iter(partial(handle.read, _ZSTD_READ_BYTES), b"")
                        )
                    else:
                        yield from iter(partial(handle.read, _READ_BYTES), b"")
        except (OSError, EOFError, ValueError) as exc:
            raise EventLogError(f"{self.file}: cannot read: {exc}") from exc

    def _zstd_frames(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        """Every zstd frame of ``pieces`` decompressed (Spark may write several)."""
        import zstandard

        frame = zstandard.ZstdDecompressor().decompressobj()
        fed = False  # the current frame has had input
        for piece in pieces:
            while piece:
                try:
                    out = frame.decompress(piece)
                except zstandard.ZstdError as exc:
                    raise EventLogError(f"{self.file}: not a zstd stream: {exc}") from None
                fed = True
                if out:
                    yield out
                if not frame.eof:
                    break
                piece = frame.unused_data
                frame = zstandard.ZstdDecompressor().decompressobj()
                fed = False
        self.cut = fed and not frame.eof


def _lines(decoded: _Decoded, in_progress: bool) -> Iterator[tuple[int, str, bool]]:
    """``(number, text, cut_off)`` for each line of the file, split at ``\n`` only (a
    JSON string may hold U+2028 and other characters Python also calls line breaks);
    ``cut_off`` marks a final line that ends without its newline or where the zstd
    stream stops mid-frame."""
    file = decoded.file
    number = 0
    held: bytes | None = None  # the last whole line seen: yielded once the next one is

    def text_of(line: bytes) -> str:
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError:
            raise EventLogError(f"{file}:{number}: not UTF-8 text") from None

    tail: list[bytes] = []  # the line being read, in pieces (a line may be megabytes)
    for piece in decoded:
        split = piece.split(b"\n")
        if len(split) == 1:
            tail.append(piece)
            continue
        tail.append(split[0])
        for line in (b"".join(tail), *split[1:-1]):
            if held is not None:
                number += 1
                yield number, text_of(held), False
            held = line
        tail = [split[-1]] if split[-1] else []
    pending = b"".join(tail)
    if decoded.cut and not in_progress:
        raise EventLogError(f"{file}: the zstd stream ends mid-frame (the log is cut off)")
    if held is not None:
        number += 1
        yield number, text_of(held), decoded.cut and not pending
    if pending:
        number += 1
        yield number, text_of(pending), True


def _local(path: Path) -> Path:
    """``path``, read from a ``file://`` URI; another scheme is refused by name."""
    text = str(path)
    scheme = _URI_SCHEME.match(text)
    if scheme is None or len(scheme.group(1)) == 1:  # no scheme (or a drive letter)
        return path
    if scheme.group(1).lower() != "file":
        raise EventLogError(
            f"{text}: a {scheme.group(1)} URI; kubesage reads event logs from local paths "
            "or file:// URIs (copy the log here first)"
        )
    return Path(re.sub(r"^file:(//)?", "", text))


def _files(path: Path) -> tuple[list[Path], bool]:
    """The log's files in order, and whether the log is still being written."""
    if not path.exists():
        raise EventLogError(f"{path}: no such event log")
    if path.is_file():
        return [path], path.name.endswith(".inprogress")
    parts = []
    in_progress = False
    for child in path.iterdir():
        match = _ROLLING_PART.match(child.name)
        if match:
            parts.append((int(match.group(1)), child))
        in_progress |= child.name.startswith("appstatus_") and child.name.endswith(".inprogress")
    if not parts:
        raise EventLogError(f"{path}: a directory without events_<n>_* files")
    return [child for _, child in sorted(parts)], in_progress


def _events(path: Path, notes: list[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    files, in_progress = _files(_local(path))
    compacted = [file for file in files if ".compact" in file.name]
    if compacted:
        notes.append(
            f"{compacted[-1]}: a compacted part: Spark's compactor drops the events of jobs "
            "that had finished, so their stages and shuffle are not in this profile"
        )
    for index, file in enumerate(files):
        decoded = _Decoded(file)
        for number, line, cut_off in _lines(decoded, in_progress):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                if cut_off and in_progress and index == len(files) - 1:
                    notes.append(
                        f"{file}:{number}: the log is being written and ends mid-event; "
                        "that partial event is not read"
                    )
                    continue
                reason = (
                    "truncated (the log ends mid-event)" if cut_off else f"not JSON ({exc.msg})"
                )
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
    for file, number, event in _events(Path(path), app.notes):
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


def _count(value: Any, where: str, name: str) -> int:
    """``value`` as a non-negative whole number; EventLogError naming ``name`` if not."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise EventLogError(f"{where}: '{name}' is {value!r}, not a whole number")
    if value < 0 or value != int(value):
        raise EventLogError(f"{where}: '{name}' is {value!r}, not a non-negative whole number")
    return int(value)


def _count_of(values: dict[str, Any], name: str, where: str, absent: int = 0) -> int:
    """``values[name]`` as a count (``absent`` when the field is not there)."""
    return _count(values.get(name, absent), where, name)


def _object(value: Any, where: str, name: str) -> dict[str, Any]:
    """``value`` when it is a JSON object (absent: empty); EventLogError if not."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise EventLogError(f"{where}: '{name}' is {type(value).__name__}, not an object")
    return value


def _stage_from_info(app: SparkApplication, info: Any, where: str, completed: bool) -> None:
    if not isinstance(info, dict):
        raise EventLogError(f"{where}: a stage info is not an object")
    stage_id = _count(_get({"Event": "stage info", **info}, where, "Stage ID"), where, "Stage ID")
    stage = app.stages.setdefault(stage_id, Stage(stage_id))
    stage.name = str(info.get("Stage Name", stage.name))
    stage.num_tasks = _count(info.get("Number of Tasks", stage.num_tasks), where, "Number of Tasks")
    parents = info.get("Parent IDs", stage.parent_ids)
    if not isinstance(parents, list | tuple):
        raise EventLogError(f"{where}: 'Parent IDs' is {parents!r}, not a list")
    stage.parent_ids = tuple(_count(p, where, "Parent IDs") for p in parents)
    rdd_infos = info.get("RDD Info", [])
    if not isinstance(rdd_infos, list):
        raise EventLogError(f"{where}: 'RDD Info' is {type(rdd_infos).__name__}, not a list")
    rdds = [
        _count(r["RDD ID"], where, "RDD ID")
        for r in rdd_infos
        if isinstance(r, dict) and "RDD ID" in r
    ]
    if rdds:
        stage.rdd_key = max(rdds)
    stage.completed = stage.completed or completed


def _task_end(app: SparkApplication, event: dict[str, Any], where: str) -> None:
    reason = _get(event, where, "Task End Reason", "Reason")
    if reason != "Success":
        app.failed_tasks += 1
        return
    if event.get("Task Metrics") is None:  # optional in Spark's JSON protocol
        app.skipped_events["SparkListenerTaskEnd without Task Metrics"] += 1
        return
    stage_id = _count(_get(event, where, "Stage ID"), where, "Stage ID")
    info = _object(_get(event, where, "Task Info"), where, "Task Info")
    metrics = _object(event["Task Metrics"], where, "Task Metrics")
    read = _object(metrics.get("Shuffle Read Metrics"), where, "Shuffle Read Metrics")
    write = _object(metrics.get("Shuffle Write Metrics"), where, "Shuffle Write Metrics")
    source = _object(metrics.get("Input Metrics"), where, "Input Metrics")
    launched = _count_of(info, "Launch Time", where)
    task = TaskShuffle(
        task_id=_count(_get(event, where, "Task Info", "Task ID"), where, "Task ID"),
        stage_id=stage_id,
        executor_id=str(info.get("Executor ID", "")),
        host=str(info.get("Host", "")),
        shuffle_write_bytes=_count_of(write, "Shuffle Bytes Written", where),
        shuffle_read_local_bytes=_count_of(read, "Local Bytes Read", where),
        shuffle_read_remote_bytes=_count_of(read, "Remote Bytes Read", where),
        input_bytes=_count_of(source, "Bytes Read", where),
        duration_ms=max(0, _count_of(info, "Finish Time", where, launched) - launched),
    )
    app.stages.setdefault(stage_id, Stage(stage_id)).tasks.append(task)
