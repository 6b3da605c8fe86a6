"""Spark event logs from a real local run, and every way a log can be bad."""

from __future__ import annotations

import gzip
import json
import random
import tracemalloc
from pathlib import Path

import pytest
import zstandard

from kubesage.adapters.spark.eventlog import (
    EventLogError,
    SparkApplication,
    Stage,
    TaskShuffle,
    read_event_log,
)
from kubesage.adapters.spark.shuffle_model import ShuffleProfile


def plain_lines(log: Path) -> list[str]:
    """The decompressed lines of a (rolling, zstd) Spark 4 event log."""
    lines: list[str] = []
    for part in sorted(p for p in log.iterdir() if p.name.startswith("events_")):
        raw = part.read_bytes()
        if part.suffix == ".zstd":
            raw = zstandard.ZstdDecompressor().stream_reader(raw).read()
        lines += raw.decode().splitlines(keepends=True)
    return lines


def test_a_real_run_reads_into_a_stage_graph_with_shuffle_bytes(spark_event_log: Path) -> None:
    app = read_event_log(spark_event_log)
    assert app.name == "kubesage-tpch-like" and app.spark_version.startswith("4.")
    assert app.failed_tasks == 0
    ran = [s for s in app.stages.values() if s.tasks]
    assert len(ran) >= 6
    edges = app.shuffle_edges()
    assert edges, "the joins and the wide repartition must shuffle"
    # Every edge comes from a stage that ran and wrote shuffle output; together the
    # edges carry every byte the stages read from shuffles.
    for edge in edges:
        parent = app.stages[edge.parent]
        assert parent.tasks and parent.shuffle_write_bytes > 0
        assert edge.child in app.stages and app.stages[edge.child].tasks
    assert sum(e.bytes for e in edges) == pytest.approx(app.total_shuffle_bytes, abs=len(edges))
    # The wide repartition reads the whole lineitem table: the largest edge.
    assert max(e.bytes for e in edges) > 0.5 * app.total_shuffle_bytes
    assert all(t.executor_id and t.host for s in ran for t in s.tasks)
    assert app.skipped_events["SparkListenerTaskStart"] == sum(len(s.tasks) for s in ran)


def test_plain_and_gzip_logs_read_the_same(spark_event_log: Path, tmp_path: Path) -> None:
    lines = plain_lines(spark_event_log)
    plain = tmp_path / "app"
    plain.write_text("".join(lines))
    packed = tmp_path / "app.gz"
    packed.write_bytes(gzip.compress("".join(lines).encode()))
    first, second = read_event_log(plain), read_event_log(packed)
    assert (
        first.shuffle_edges()
        == second.shuffle_edges()
        == read_event_log(spark_event_log).shuffle_edges()
    )


def test_rolling_parts_are_read_as_one_log(spark_event_log: Path, tmp_path: Path) -> None:
    lines = plain_lines(spark_event_log)
    rolling = tmp_path / "eventlog_v2_app"
    rolling.mkdir()
    half = len(lines) // 2
    (rolling / "events_2_app").write_text("".join(lines[:half]))
    (rolling / "events_10_app").write_text("".join(lines[half:]))
    (rolling / "appstatus_app").write_text("")
    assert (
        read_event_log(rolling).shuffle_edges() == read_event_log(spark_event_log).shuffle_edges()
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(EventLogError, match="without events_<n>_"):
        read_event_log(empty)


def test_unknown_events_are_skipped_and_counted(spark_event_log: Path, tmp_path: Path) -> None:
    lines = plain_lines(spark_event_log)
    extra = json.dumps({"Event": "com.example.MyListenerEvent", "value": 1}) + "\n"
    log = tmp_path / "app"
    log.write_text("".join([lines[0], extra, extra, *lines[1:]]))
    app = read_event_log(log)
    assert app.skipped_events["com.example.MyListenerEvent"] == 2
    assert app.shuffle_edges() == read_event_log(spark_event_log).shuffle_edges()


def test_malformed_and_truncated_logs_name_the_line(spark_event_log: Path, tmp_path: Path) -> None:
    lines = plain_lines(spark_event_log)
    broken = tmp_path / "broken"
    broken.write_text("".join([*lines[:4], "{not json\n", *lines[5:]]))
    with pytest.raises(EventLogError, match=r"broken:5: not JSON"):
        read_event_log(broken)
    cut = tmp_path / "cut"
    cut.write_text("".join(lines)[:-40])
    with pytest.raises(EventLogError, match=rf"cut:{len(lines)}: truncated"):
        read_event_log(cut)
    no_field = tmp_path / "nofield"
    no_field.write_text('{"Event": "SparkListenerTaskEnd", "Stage ID": 1}\n')
    with pytest.raises(EventLogError, match=r"nofield:1: SparkListenerTaskEnd has no 'Task End"):
        read_event_log(no_field)
    with pytest.raises(EventLogError, match="no such event log"):
        read_event_log(tmp_path / "absent")


def test_a_log_being_written_drops_its_partial_last_event_and_says_so(
    spark_event_log: Path, tmp_path: Path
) -> None:
    # Spark's buffered writer leaves a live log mid-line (and a zstd one mid-frame);
    # Spark's own replay skips that last event, and so does the reader, with a note.
    lines = plain_lines(spark_event_log)
    text = "".join(lines)[:-40]
    whole = read_event_log(spark_event_log)
    plain = tmp_path / "app-1.inprogress"
    plain.write_text(text)
    packed = tmp_path / "app-2.zstd.inprogress"  # the codec comes before .inprogress
    packed.write_bytes(zstandard.ZstdCompressor().compress(text.encode())[:-7])
    for live in (plain, packed):
        app = read_event_log(live)
        assert len(app.notes) == 1 and "ends mid-event" in app.notes[0]
        assert app.name == whole.name and app.stages.keys() <= whole.stages.keys()
    rolling = tmp_path / "eventlog_v2_app"
    rolling.mkdir()
    (rolling / "events_1_app").write_text("".join(lines[:10]))
    (rolling / "events_2_app").write_text("".join(lines[10:])[:-40])
    (rolling / "appstatus_app.inprogress").write_text("")
    assert "events_2_app" in read_event_log(rolling).notes[0]
    (rolling / "appstatus_app.inprogress").rename(rolling / "appstatus_app")  # finished
    with pytest.raises(EventLogError, match=r"events_2_app:\d+: truncated"):
        read_event_log(rolling)


def test_a_finished_zstd_log_cut_mid_frame_is_an_error(
    spark_event_log: Path, tmp_path: Path
) -> None:
    data = zstandard.ZstdCompressor().compress("".join(plain_lines(spark_event_log)).encode())
    cut = tmp_path / "app.zstd"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(EventLogError, match="the zstd stream ends mid-frame"):
        read_event_log(cut)
    compacted = tmp_path / "events_1_app.zstd.compact"  # History Server compaction
    compacted.write_bytes(data)
    whole = read_event_log(spark_event_log)
    read = read_event_log(compacted)
    assert read.shuffle_edges() == whole.shuffle_edges()
    # what compaction drops (finished jobs' events) cannot be read back: said
    assert any("a compacted part" in note for note in read.notes)
    assert not any("compacted" in note for note in whole.notes)


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"Shuffle Read Metrics": {"Remote Bytes Read": -5}}, "'Remote Bytes Read' is -5, not a"),
        ({"Shuffle Read Metrics": {"Remote Bytes Read": "abc"}}, "'Remote Bytes Read' is 'abc'"),
        (
            {"Shuffle Read Metrics": None, "Input Metrics": {"Bytes Read": 1.5}},
            "'Bytes Read' is 1.5, not",
        ),
        ({"Shuffle Write Metrics": [1]}, "'Shuffle Write Metrics' is list, not an object"),
    ],
)
def test_a_count_that_is_not_a_count_names_the_line(
    tmp_path: Path, metrics: dict[str, object], message: str
) -> None:
    event = {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": 1,
        "Task End Reason": {"Reason": "Success"},
        "Task Info": {"Task ID": 7, "Executor ID": "1", "Host": "h"},
        "Task Metrics": metrics,
    }
    log = tmp_path / "app"
    log.write_text(json.dumps({"Event": "SparkListenerLogStart"}) + "\n" + json.dumps(event) + "\n")
    with pytest.raises(EventLogError, match=rf"app:2: {message}"):
        read_event_log(log)
    del event["Task Metrics"]  # optional in Spark's JSON protocol: the task is skipped
    log.write_text(json.dumps(event) + "\n")
    assert read_event_log(log).skipped_events["SparkListenerTaskEnd without Task Metrics"] == 1


def test_a_file_uri_is_read_and_another_scheme_is_refused(
    spark_event_log: Path, tmp_path: Path
) -> None:
    uri = Path(spark_event_log.resolve().as_uri())  # as typer hands it over
    assert read_event_log(uri).shuffle_edges() == read_event_log(spark_event_log).shuffle_edges()
    with pytest.raises(EventLogError, match="a s3a URI; kubesage reads event logs from local"):
        read_event_log("s3a://bucket/spark-events/app-1")
    latin = tmp_path / "latin"
    latin.write_bytes(b'{"Event": "SparkListenerLogStart"}\n{"Event": "caf\xe9"}\n')
    with pytest.raises(EventLogError, match=r"latin:2: not UTF-8 text"):
        read_event_log(latin)


def test_input_read_by_a_stage_with_shuffle_parents_counts_too() -> None:
    # A union of a scan and an aggregation: stage 1 reads stage 0's shuffle and a table.
    app = SparkApplication()
    for stage_id, parents, written, read, scanned in (
        (0, (), 1_000, 0, 2_000),
        (1, (0,), 0, 1_000, 20_000),
    ):
        stage = app.stages.setdefault(stage_id, Stage(stage_id, parent_ids=parents))
        stage.tasks.append(TaskShuffle(stage_id, stage_id, "1", "h", written, read, 0, scanned, 5))
    profile = ShuffleProfile.from_application(app)
    assert profile.input_bytes == 22_000
    assert profile.shuffle_bytes == (1_000,)


def test_a_large_log_is_read_in_pieces_and_split_at_newlines_only(
    spark_event_log: Path, tmp_path: Path
) -> None:
    # A job description may hold U+2028 (Jackson writes it raw), which Python's
    # str.splitlines also takes for a line break; and a SQL plan event can be
    # megabytes on one line. Neither may change what is read, nor need the whole
    # log in memory.
    lines = plain_lines(spark_event_log)
    description = {"Event": "SparkListenerJobStart", "Job ID": 99, "Stage Infos": []}
    description["Properties"] = {"spark.job.description": "first\u2028second\u0085third"}
    plan = {"Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart"}
    plan["physicalPlanDescription"] = "x" * (3 << 19)  # more than one read piece in one line
    rng = random.Random(0)
    filler = [  # compresses about as well as an event log (a few times, not thousands)
        json.dumps({"Event": "SparkListenerBlockUpdated", "pad": rng.randbytes(2000).hex()}) + "\n"
        for _ in range(6000)  # about 24 MB in all
    ]
    head = [lines[0], json.dumps(description, ensure_ascii=False) + "\n", json.dumps(plan) + "\n"]
    text = "".join([*head, *filler, *lines[1:]])
    log = tmp_path / "big.zstd"
    log.write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    tracemalloc.start()
    try:
        app = read_event_log(log)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    whole = read_event_log(spark_event_log)
    assert app.shuffle_edges() == whole.shuffle_edges()
    assert app.skipped_events["SparkListenerBlockUpdated"] == 6000
    assert peak < len(text) / 3, f"peak {peak / 2**20:.1f} MiB for a {len(text) / 2**20:.0f} MB log"


def test_a_file_that_is_not_zstd_is_refused_by_name(tmp_path: Path) -> None:
    log = tmp_path / "app.zstd"
    log.write_bytes(b'{"Event": "SparkListenerLogStart"}\n')  # named zstd, written plain
    with pytest.raises(EventLogError, match=r"app.zstd: not a zstd stream"):
        read_event_log(log)
