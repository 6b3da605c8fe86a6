"""``kubesage spark conf`` and ``kubesage spark submit`` end to end, with a real local Spark run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kubesage.adapters.spark.eventlog import read_event_log
from kubesage.core.k8s.validation import validate_manifests
from tests.adapters.spark.conftest import local_spark_args, only_log


def kubesage(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``kubesage spark …`` in a process of its own (``env``: variables to add)."""
    return subprocess.run(
        [sys.executable, "-m", "kubesage.core.cli", "spark", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **(env or {})},
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


def test_submit_names_the_settings_the_users_arguments_replace(tmp_path: Path) -> None:
    """spark-submit keeps the last value of a key: the user's win over kubesage's
    --conf, a properties file loses to it. Neither is silent."""
    home = fake_spark_home(tmp_path, "exit 0")
    properties = tmp_path / "mine.conf"
    properties.write_text("# site settings\nspark.executor.cores   8\nspark.ui.port=4050\n")
    done = kubesage(
        "submit", "--executors", "4", "--cores", "2", "--memory", "4096",
        "--out", str(tmp_path / "conf"), "--",
        "--conf", "spark.kubernetes.executor.podTemplateFile=mine.yaml",
        "--executor-memory", "32g", "--properties-file", str(properties),
        "app.py", "--executor-memory", "1g",  # the application's own: not Spark's
        env={"SPARK_HOME": str(home)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "your --conf spark.kubernetes.executor.podTemplateFile=mine.yaml replaces" in said
    assert "your --executor-memory=32g replaces kubesage's spark.executor.memory=4096m" in said
    assert "executor-memory=1g" not in said
    assert f"your --properties-file {properties} sets spark.executor.cores 8" in said
    assert "spark.ui.port" not in said


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_submit_passes_a_signal_on_to_spark_submit_and_exits_as_it_did(
    tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    """A supervisor's SIGTERM, or a SIGINT sent to kubesage's pid alone (no terminal),
    reaches spark-submit (it had been orphaned, or the SIGINT swallowed), and kubesage
    exits with its status (128 + N, as a shell's trap exits)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    script = (
        f"trap 'echo > {marks}/got-term; exit 143' TERM\n"
        f"trap 'echo > {marks}/got-int; exit 130' INT\n"
        f"echo > {marks}/started\n"
        "sleep 60 & wait\n"
    )
    process = submit_started(tmp_path, fake_spark_home(tmp_path, script), marks)
    try:
        process.send_signal(signum)
        assert process.wait(timeout=30) == status
        assert (marks / ("got-term" if signum == signal.SIGTERM else "got-int")).exists()
    finally:
        process.kill()
        process.wait()


def test_a_signal_kubesage_was_started_ignoring_stays_ignored(tmp_path: Path) -> None:
    """Under ``nohup`` SIGHUP is ignored: a hangup reaching the process group leaves
    kubesage and spark-submit running (it had killed spark-submit)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    home = fake_spark_home(tmp_path, f"echo > {marks}/started\nsleep 3\necho > {marks}/done\n")
    process = submit_started(tmp_path, home, marks, ignoring=signal.SIGHUP)  # as nohup does
    try:
        os.killpg(process.pid, signal.SIGHUP)
        assert process.wait(timeout=30) == 0
        assert (marks / "done").exists()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def submit_started(
    tmp_path: Path, home: Path, marks: Path, ignoring: signal.Signals | None = None
) -> subprocess.Popen[bytes]:
    """``kubesage spark submit`` with ``home``'s spark-submit, in a session of its own (no
    controlling terminal: a signal reaches it alone), once the script wrote ``started``;
    it starts with the default signal actions, and ``ignoring`` ignored."""

    def ignore() -> None:
        # the defaults first: a test run started in the background (`cmd &` in a script,
        # as CI may) ignores SIGINT, and kubesage rightly leaves an ignored signal alone
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, signal.SIG_DFL)
        if ignoring is not None:
            signal.signal(ignoring, signal.SIG_IGN)

    process = subprocess.Popen(
        [sys.executable, "-m", "kubesage.core.cli", "spark", "submit", "--executors", "1",
         "--cores", "1", "--memory", "512", "--out", str(tmp_path / "conf"), "--", "app.py"],
        env={**os.environ, "SPARK_HOME": str(home)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=ignore,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (marks / "started").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            stderr = process.stderr.read() if process.stderr else b""
            pytest.fail(f"spark-submit never started: {stderr.decode()[-2000:]}")
        time.sleep(0.1)
    return process


def fake_spark_home(tmp_path: Path, body: str) -> Path:
    """A ``$SPARK_HOME`` whose ``bin/spark-submit`` is the bash ``body``."""
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    submit = home / "bin" / "spark-submit"
    submit.write_text(f"#!/bin/bash\n{body}\n")
    submit.chmod(0o755)
    return home
