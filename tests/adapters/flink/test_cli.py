"""``kubesage flink …``: errors, the stagger plan and state advice over recorded replies."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks.flink_support.cluster import free_port
from kubesage.adapters.flink import cli, cli_support
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.registry import JobRegistry, RunRecord
from kubesage.core.adapter import Adapter

from .conftest import recorded

JOB = "fdb4749fec8f525bb194110b606c1048"
runner = CliRunner()


def kubesage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubesage.core.cli", "flink", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_adapter_is_registered_as_flink() -> None:
    assert isinstance(cli.ADAPTER, Adapter)
    assert cli.ADAPTER.name == "flink"
    names = {command.name for command in cli.ADAPTER.cli.registered_commands}
    assert {"submit", "autoscale", "stagger", "state"} <= names


def test_an_unreachable_jobmanager_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = kubesage("stagger", "--jobmanager", url)
    assert done.returncode == 2, done.stderr
    assert f"no Flink JobManager answers at {url}" in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["autoscale", "state"])
def test_every_command_names_the_unreachable_jobmanager(command: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = runner.invoke(cli.flink_app, [command, "--jobmanager", url])
    assert done.exit_code == 2
    assert f"no Flink JobManager answers at {url}" in " ".join(done.output.split())


def test_a_seasonal_forecast_without_its_period_is_refused_before_connecting() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = runner.invoke(
        cli.flink_app, ["autoscale", "--jobmanager", url, "--forecast", "seasonal"]
    )
    assert done.exit_code == 2
    assert "--forecast seasonal needs --season-s > 0" in " ".join(done.output.split())
    assert "no Flink JobManager" not in done.output  # the options are checked first


def test_submit_needs_the_flink_run_arguments() -> None:
    done = kubesage("submit", "--jobmanager", "http://127.0.0.1:8081")
    assert done.returncode == 2
    assert "after '--'" in done.stderr


@pytest.fixture
def recorded_jobmanager(
    monkeypatch: pytest.MonkeyPatch, replay_client: Callable[..., FlinkClient]
) -> None:
    """The CLI's client answers from recorded replies of a job without periodic checkpoints."""
    config = copy.deepcopy(recorded("checkpoint_config"))
    config["body"]["interval"] = 2**63 - 1
    routes = {f"GET /jobs/{JOB}/checkpoints/config": config}

    completed = copy.deepcopy(recorded("checkpoint_trigger_completed"))
    completed["body"]["operation"]["checkpointId"] = 5  # one of the recorded history
    routes[f"GET {completed['path']}"] = completed

    def client(url: str, **kwargs: object) -> FlinkClient:
        names = ("overview", "jobs_overview", "checkpoints", "job_running", "checkpoint_trigger")
        return replay_client(*names, **routes)

    monkeypatch.setattr(cli_support, "FlinkClient", client)


def register_driven_job(registry: Path, interval_ms: int = 10_000) -> None:
    JobRegistry(registry).add(
        RunRecord(
            job_id=JOB,
            job_key="sample",
            jobmanager="http://flink.test",
            submitted_at_ms=1,
            checkpoint_interval_ms=interval_ms,
            driven=True,
        )
    )


@pytest.mark.usefixtures("recorded_jobmanager")
def test_stagger_dry_run_prints_the_plan(tmp_path: Path) -> None:
    registry = tmp_path / "flink-jobs.yaml"
    register_driven_job(registry)
    done = runner.invoke(
        cli.flink_app,
        ["stagger", "--jobmanager", "http://flink.test", "--dry-run", "--registry", str(registry)],
    )
    assert done.exit_code == 0, done.output
    # The longest recorded checkpoint took 318 ms: 400 ms on the 100 ms grid.
    assert f"{JOB:34} {10_000:>11} {400:>11}" in done.output
    assert "plan (wrap-around): peak 1 concurrent" in done.output
    assert "optimum 1" in done.output


@pytest.mark.usefixtures("recorded_jobmanager")
def test_stagger_drives_checkpoints_and_records_the_phase(tmp_path: Path) -> None:
    registry = tmp_path / "flink-jobs.yaml"
    # Phases count from the Unix epoch: with a 1 s interval, one slot falls in any 1 s.
    register_driven_job(registry, interval_ms=1_000)
    done = runner.invoke(
        cli.flink_app,
        [
            "stagger",
            "--jobmanager",
            "http://flink.test",
            "--duration-s",
            "1",
            "--registry",
            str(registry),
        ],
    )
    assert done.exit_code == 0, done.output
    assert f"{JOB} completed #5 1796005385102–1796005385157 (55 ms, 38715 B)" in done.output
    assert "measured peak concurrent checkpoints: 1 (plan 1); completed 1" in done.output
    stored = JobRegistry(registry).find(JOB)
    assert stored is not None and stored.phase_ms == 0
    assert stored.checkpoint_duration_ms == 318


@pytest.mark.usefixtures("recorded_jobmanager")
def test_stagger_without_an_interval_says_what_to_do(tmp_path: Path) -> None:
    done = runner.invoke(
        cli.flink_app,
        [
            "stagger",
            "--jobmanager",
            "http://flink.test",
            "--dry-run",
            "--registry",
            str(tmp_path / "empty.yaml"),
        ],
    )
    assert done.exit_code == 2
    assert "no checkpoint interval known" in done.output
    assert "--interval-s" in done.output


@pytest.mark.usefixtures("recorded_jobmanager")
def test_state_prints_a_config_snippet_with_reasons() -> None:
    done = runner.invoke(cli.flink_app, ["state", "--jobmanager", "http://flink.test"])
    assert done.exit_code == 0, done.output
    assert f"# job {JOB}: heap state" in done.output
    assert "state.backend.type: hashmap" in done.output


BATCH = "b" * 32


@pytest.mark.usefixtures("recorded_jobmanager")
def test_stagger_leaves_out_a_running_job_without_checkpointing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replay_client: Callable[..., FlinkClient]
) -> None:
    """A batch job in the same session cluster has no checkpoint coordinator: Flink
    answers 404 on its checkpoint config. The other jobs are still planned."""
    registry = tmp_path / "flink-jobs.yaml"
    register_driven_job(registry)
    overview = copy.deepcopy(recorded("jobs_overview"))
    batch = {**overview["body"]["jobs"][0], "jid": BATCH, "name": "batch"}
    overview["body"]["jobs"].insert(0, batch)
    config = copy.deepcopy(recorded("checkpoint_config"))
    config["body"]["interval"] = 2**63 - 1
    disabled = {
        "status": 404,
        "body": {"errors": [f"Checkpointing is not enabled for this job ({BATCH})."]},
    }
    routes = {
        "GET /jobs/overview": overview,
        f"GET /jobs/{JOB}/checkpoints/config": config,
        f"GET /jobs/{BATCH}/checkpoints/config": disabled,
    }
    monkeypatch.setattr(
        cli_support,
        "FlinkClient",
        lambda url, **kwargs: replay_client("overview", "checkpoints", "job_running", **routes),
    )
    args = ["stagger", "--jobmanager", "http://flink.test", "--dry-run", "--registry"]
    done = runner.invoke(cli.flink_app, [*args, str(registry)])
    assert done.exit_code == 0, done.output
    output = " ".join(done.output.split())
    assert f"job {BATCH}: checkpoint settings not available" in output
    assert "Checkpointing is not enabled for this job" in output
    assert f"{JOB:34} {10_000:>11} {400:>11}" in done.output
    named = runner.invoke(cli.flink_app, [*args, str(registry), "--job", BATCH])
    assert named.exit_code == 2  # a job the user named is an error, not a note
    assert "Checkpointing is not enabled for this job" in " ".join(named.output.split())


def test_state_skips_a_running_job_without_checkpointing_unless_named(
    monkeypatch: pytest.MonkeyPatch, replay_client: Callable[..., FlinkClient]
) -> None:
    overview = copy.deepcopy(recorded("jobs_overview"))
    batch = {**overview["body"]["jobs"][0], "jid": BATCH, "name": "batch"}
    overview["body"]["jobs"].insert(0, batch)
    disabled = {"status": 404, "body": {"errors": ["Checkpointing has not been enabled."]}}
    routes = {"GET /jobs/overview": overview, f"GET /jobs/{BATCH}/checkpoints": disabled}
    monkeypatch.setattr(
        cli_support,
        "FlinkClient",
        lambda url, **kwargs: replay_client("overview", "checkpoints", "job_running", **routes),
    )
    done = runner.invoke(cli.flink_app, ["state", "--jobmanager", "http://flink.test"])
    assert done.exit_code == 0, done.output
    output = " ".join(done.output.split())
    assert f"job {BATCH}: no checkpoint statistics" in output and "skipped" in output
    assert f"# job {JOB}: heap state" in done.output  # the other job still gets its advice
    named = runner.invoke(
        cli.flink_app, ["state", "--jobmanager", "http://flink.test", "--job", BATCH]
    )
    assert named.exit_code == 2
    assert "Checkpointing has not been enabled" in " ".join(named.output.split())


@pytest.mark.parametrize("value", ["0", "-5"])
def test_stagger_refuses_a_fallback_interval_that_is_not_positive(value: str) -> None:
    done = runner.invoke(
        cli.flink_app, ["stagger", "--jobmanager", "http://127.0.0.1:1", "--interval-s", value]
    )
    assert done.exit_code == 2
    assert f"--interval-s must be positive, got {value}" in " ".join(done.output.split())


def test_submit_refuses_a_checkpoint_interval_of_zero(tmp_path: Path) -> None:
    done = runner.invoke(
        cli.flink_app,
        [
            "submit",
            "--jobmanager",
            "http://127.0.0.1:1",
            "--checkpoint-interval-s",
            "0",
            "--flink-home",
            str(tmp_path),
            "--",
            "-py",
            "job.py",
        ],
    )
    assert done.exit_code == 2
    output = " ".join(done.output.split())
    assert "--checkpoint-interval-s must be positive, got 0" in output
    assert "bin/flink" not in output  # refused before looking for Flink


@pytest.mark.parametrize("url", ["127.0.0.1:1", "jm:8081"])
def test_a_jobmanager_that_is_not_a_url_is_named_as_such(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_client(*args: object, **kwargs: object) -> FlinkClient:
        raise AssertionError("no client for a malformed URL")

    monkeypatch.setattr(cli_support, "FlinkClient", no_client)
    done = runner.invoke(cli.flink_app, ["autoscale", "--jobmanager", url, "--duration-s", "0"])
    assert done.exit_code == 2
    output = " ".join(done.output.split())
    assert f"--jobmanager must be an http(s) URL like http://host:8081, got '{url}'" in output
    assert "no Flink JobManager answers" not in output
