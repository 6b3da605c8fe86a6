"""``kubesage spark conf`` and ``kubesage spark submit`` end to end, with a real local Spark run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kubesage.adapters.spark.eventlog import read_event_log
from kubesage.core.k8s.validation import validate_manifests
from tests.adapters.spark.conftest import local_spark_args, only_log


def kubesage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubesage.core.cli", "spark", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_conf_writes_conf_templates_and_plan(spark_event_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "conf"
    done = kubesage(
        "conf", "--executors", "16", "--cores", "4", "--memory", "8192",
        "--event-log", str(spark_event_log), "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("--conf spark.executor.instances=16 ")
    for name in ("executor-template.yaml", "driver-template.yaml"):
        validate_manifests([yaml.safe_load((out / name).read_text())])
    assert "spark.executor.cores 4" in (out / "spark-defaults.conf").read_text()
    plan = (out / "plan.txt").read_text()
    assert "16 executor(s) in rack-" in plan and "default spread" in plan
    assert "event log:" in done.stderr
    assert "memory overhead 819m per executor: Spark's 10% for a jvm application" in plan
    python = kubesage(
        "conf", "--executors", "16", "--cores", "4", "--memory", "8192",
        "--app-kind", "python", "--out", str(tmp_path / "python"),
    )  # fmt: skip
    assert python.returncode == 0, python.stderr
    assert " --conf spark.executor.memoryOverhead=3276m " in f" {python.stdout} "
    # No event log and no --input-locality: the input's place is unknown, and said so.
    unknown = (tmp_path / "python" / "plan.txt").read_text()
    assert "input: where it lies was not given (--input-locality)" in unknown
    assert "lies outside the chosen racks" not in unknown


@pytest.mark.slow
def test_submit_runs_spark_with_the_conf_and_the_log_reads_back(tmp_path: Path) -> None:
    logs = tmp_path / "events"
    logs.mkdir()
    done = kubesage(
        "submit", "--executors", "2", "--cores", "1", "--memory", "1024",
        "--out", str(tmp_path / "conf"), "--", *local_spark_args(logs),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wide parts: 2000" in done.stdout
    app = read_event_log(only_log(logs))
    assert app.shuffle_edges() and app.failed_tasks == 0
    assert app.name == "kubesage-tpch-like"
    # A PySpark job: Spark's 40 % overhead, read from the application's file.
    assert "40% for a python application" in (tmp_path / "conf" / "plan.txt").read_text()


def test_bad_options_are_named(tmp_path: Path) -> None:
    done = kubesage(
        "conf", "--executors", "2", "--cores", "1", "--memory", "512",
        "--input-locality", "rack-a1:0.5", "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 2 and "'rack-a1:0.5' is not name=fraction" in done.stderr
    done = kubesage(
        "conf", "--executors", "2", "--cores", "1", "--memory", "512",
        "--input-locality", "nowhere=0.5", "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 2 and "'nowhere', which is neither a rack nor a zone" in done.stderr
    missing = kubesage("submit", "--executors", "1", "--cores", "1", "--memory", "512")
    assert missing.returncode == 2 and "after '--'" in missing.stderr
