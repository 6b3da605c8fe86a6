"""Spark event logs from a real local run, and every way a log can be bad."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import zstandard

from kubesage.adapters.spark.eventlog import EventLogError, read_event_log


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
