"""``kubesage flink submit``'s choices, the flink run command, and the job registry."""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kubesage.adapters.flink.checkpoint_choice import choose_checkpointing, landed_checkpoints
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.registry import JobRegistry, RunRecord
from kubesage.adapters.flink.run_arguments import parallelism_set, with_absolute_files
from kubesage.adapters.flink.submit import (
    FlinkSubmitError,
    SubmitRequest,
    choose_parallelism,
    flink_environment,
    flink_run_command,
    job_key,
    parse_job_id,
    submit,
)
from kubesage.adapters.flink.taskmanager_gpus import GPU_DRIVER_FACTORY, taskmanager_gpus
from kubesage.core.cli.main import app
from kubesage.core.dra.claims import DeviceMode
from kubesage.core.errors import ConfigError, InputError
from kubesage.core.k8s.validation import DRA_KUBERNETES_VERSION, validate_manifests

JOB = "fdb4749fec8f525bb194110b606c1048"
JM = "http://127.0.0.1:8081"
# The line `flink run -d` prints (Flink 2.3).
FLINK_OUTPUT = "Job has been submitted with JobID fdb4749fec8f525bb194110b606c1048\n"


def request(*args: str, **kwargs: object) -> SubmitRequest:
    return SubmitRequest(flink_args=args or ("-py", "jobs/enrich.py"), jobmanager=JM, **kwargs)  # type: ignore[arg-type]


def run(job_id: str, **kwargs: object) -> RunRecord:
    fields: dict[str, object] = {
        "job_id": job_id,
        "job_key": "enrich.py",
        "jobmanager": JM,
        "submitted_at_ms": 1,
    }
    return RunRecord.model_validate(fields | kwargs)


def succeeds(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A ``flink run`` that submits the job and prints its JobID (the runner replaced)."""
    return subprocess.CompletedProcess(list(command), 0, FLINK_OUTPUT, "")


def fake_flink_home(tmp_path: Path) -> Path:
    """A Flink home whose ``bin/flink`` exists (the runner is replaced, never run)."""
    home = tmp_path / "flink"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "flink").write_text("#!/bin/sh\n")
    return home


@pytest.mark.parametrize(
    ("args", "name", "key"),
    [
        (("-py", "jobs/enrich.py", "--rate", "5"), None, "enrich.py"),
        (("-c", "com.example.Enrich", "app.jar"), None, "com.example.Enrich"),
        (("app.jar",), None, "app.jar"),
        (("-py", "x.py"), "clicks", "clicks"),
    ],
)
def test_job_key(args: tuple[str, ...], name: str | None, key: str) -> None:
    assert job_key(request(*args, name=name)) == key


def test_job_key_needs_a_program_or_a_name() -> None:
    with pytest.raises(InputError, match="--name"):
        job_key(request("--detached"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("-p", "4", "-py", "a.py"), 4),
        (("--parallelism=3",), 3),
        (("-py", "a.py"), None),
        (("-p6", "-py", "a.py"), 6),  # commons-cli's attached short form
        (("-Dparallelism.default=5", "-py", "a.py"), 5),
        (("-D", "parallelism.default=7", "-py", "a.py"), 7),
        (("-Dtaskmanager.numberOfTaskSlots=4", "-py", "a.py"), None),
        (("-py", "a.py", "-pyfs", "deps"), None),  # -pyfs is not -p
    ],
)
def test_user_parallelism(args: tuple[str, ...], expected: int | None) -> None:
    assert parallelism_set(args) == expected


def test_user_parallelism_must_be_an_integer() -> None:
    with pytest.raises(InputError, match="not an integer"):
        parallelism_set(["-p", "many"])
    with pytest.raises(InputError, match="not an integer"):
        parallelism_set(["-Dparallelism.default=lots"])


@pytest.mark.parametrize(
    ("args", "parallelism", "key"),
    [
        # after the jar, or after an option Flink does not know, it is the program's
        (("app.jar", "-p", "/etc/job.properties"), None, "app.jar"),
        (("-d", "app.jar", "--parallelism", "32"), None, "app.jar"),
        (("app.jar", "-c", "conf.yaml"), None, "app.jar"),
        (("-py", "job.py", "--input", "x", "-p", "9"), None, "job.py"),
        (("-p", "4", "-c", "com.example.Main", "app.jar", "-p", "1"), 4, "com.example.Main"),
        (("-pym", "pkg.job", "--parallelism=2"), 2, "pkg.job"),
        # the program named by -py or -j: a positional is its argument, not a jar
        (("-py", "job.py", "topic-a", "-p", "3"), None, "job.py"),
        (("-j", "app.jar", "2024-01-01"), None, "app.jar"),
        (("-v", "-p", "4", "app.jar"), 4, "app.jar"),  # -v is Flink's flag
        # -a takes every value up to Flink's next option; its first is the jar unless -j
        (("-j", "app.jar", "-a", "in", "out", "-p", "2"), 2, "app.jar"),
        (("-a", "app.jar", "in", "out"), None, "app.jar"),
    ],
)
def test_the_programs_own_arguments_are_not_read_as_flinks(
    args: tuple[str, ...], parallelism: int | None, key: str
) -> None:
    assert parallelism_set(args) == parallelism
    assert job_key(request(*args)) == key


def test_the_registry_keeps_the_programs_files_as_absolute_paths(tmp_path: Path) -> None:
    """A restart (`flink state --apply`) resubmits these arguments from wherever it runs."""
    args = [
        "-py", "jobs/enrich.py", "-pyfs", "lib/a.py,/opt/b.py,s3://bucket/c.py",
        "-pyarch", "venv.zip#venv", "--input", "data/in.csv",
    ]  # fmt: skip
    assert with_absolute_files(args, tmp_path) == [
        "-py", f"{tmp_path}/jobs/enrich.py",
        "-pyfs", f"{tmp_path}/lib/a.py,/opt/b.py,s3://bucket/c.py",
        "-pyarch", f"{tmp_path}/venv.zip#venv",
        "--input", "data/in.csv",  # the program's own: as typed
    ]  # fmt: skip
    assert with_absolute_files(["-d", "app.jar", "x.txt"], tmp_path) == [
        "-d", f"{tmp_path}/app.jar", "x.txt",
    ]  # fmt: skip
    assert with_absolute_files(["-a", "app.jar", "in"], tmp_path) == [
        "-a", f"{tmp_path}/app.jar", "in",
    ]  # fmt: skip
    assert with_absolute_files(["-py", "job.py", "topic-a"], tmp_path) == [
        "-py", f"{tmp_path}/job.py", "topic-a",  # the program's argument: as typed
    ]  # fmt: skip


def test_parallelism_rules_in_order() -> None:
    history = [run("a", parallelism=2, final_parallelism=6), run("b", parallelism=3)]
    theirs = choose_parallelism(request("-p", "4", "-py", "a.py", parallelism=9), history)
    assert theirs.parallelism is None and "your own" in theirs.reason
    assert choose_parallelism(request(parallelism=9), history).parallelism == 9
    forecast = choose_parallelism(request(forecast_rate=100.0, subtask_rate=20.0), history)
    assert forecast.parallelism == 7  # ⌈100 / (20 × 0.8)⌉
    assert choose_parallelism(request(), history).parallelism == 3  # the latest run
    assert choose_parallelism(request(), history[:1]).parallelism == 6  # where it ended
    assert choose_parallelism(request(), []).parallelism is None


def test_checkpointing_driven_job_goes_beside_the_running_ones() -> None:
    running = [
        run("a", checkpoint_interval_ms=10_000, phase_ms=0, checkpoint_duration_ms=4_000),
        run("b", checkpoint_interval_ms=10_000, phase_ms=5_000, checkpoint_duration_ms=4_000),
    ]
    history = [run("old", checkpoint_interval_ms=10_000, checkpoint_duration_ms=1_000)]
    choice = choose_checkpointing(None, True, history, running)
    # Checkpointing on but never periodic: the coordinator triggers it, exactly-once.
    assert choice.interval_ms == 10_000
    assert choice.conf == {"execution.checkpointing.interval": f"{2**63 - 1} ms"}
    assert choice.phase_ms is not None
    # The free gaps are [4000, 5000) and [9000, 10000): a 1 s checkpoint fits in either.
    assert choice.phase_ms in (4_000, 9_000)
    assert "peak 1 concurrent" in choice.reason
    assert choice.duration_measured  # the old run's 1 s
    # No run measured one yet: the default guess plans it, but is not recorded as measured.
    assert not choose_checkpointing(10_000, True, [], running).duration_measured


def test_checkpointing_for_a_job_flink_checkpoints_itself() -> None:
    choice = choose_checkpointing(60_000, False, [run("old", checkpoint_duration_ms=2_000)], [])
    assert choice.phase_window_ms == 4_000
    assert choice.conf == {
        "execution.checkpointing.interval": "60000 ms",
        "execution.checkpointing.min-pause": "56000 ms",
    }


def test_no_interval_leaves_checkpointing_alone() -> None:
    choice = choose_checkpointing(None, True, [], [])
    assert choice.interval_ms is None and choice.conf == {}


def test_flink_run_command_puts_the_users_arguments_last(tmp_path: Path) -> None:
    command = flink_run_command(
        tmp_path, "http://jm:8081", 4, {"k": "v"}, ["-py", "a.py", "-Dk=mine"]
    )
    assert command == [
        "bash",
        str(tmp_path / "bin" / "flink"),
        "run",
        "-d",
        "-m",
        "jm:8081",
        "-p",
        "4",
        "-Dk=v",
        "-py",
        "a.py",
        "-Dk=mine",
    ]


def test_parse_job_id() -> None:
    assert parse_job_id("log line\n" + FLINK_OUTPUT) == JOB
    with pytest.raises(FlinkSubmitError, match="no JobID"):
        parse_job_id("org.apache.flink.client.program.ProgramInvocationException: boom")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"flink_args": ()}, "after '--'"),
        ({"parallelism": 0}, "--parallelism"),
        ({"forecast_rate": 10.0}, "go together"),
        ({"forecast_rate": -1.0, "subtask_rate": 1.0}, "--forecast-rate must be a positive"),
        ({"forecast_rate": math.inf, "subtask_rate": 1.0}, "--forecast-rate must be a positive"),
        ({"checkpoint_interval_ms": 0}, "--checkpoint-interval-s"),
        ({"jobmanager": "jm:8081"}, "http"),
    ],
)
def test_bad_requests(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"flink_args": ("-py", "a.py"), "jobmanager": JM} | kwargs
    with pytest.raises(InputError, match=message):
        SubmitRequest(**fields)  # type: ignore[arg-type]


def test_a_forecast_beyond_flinks_largest_parallelism_is_refused() -> None:
    fields: dict[str, object] = {"flink_args": ("-py", "a.py"), "jobmanager": JM}
    huge = SubmitRequest(**fields, forecast_rate=1e9, subtask_rate=1e-3)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="over Flink's maximum of 32768"):
        choose_parallelism(huge, [])


def test_an_empty_registry_file_is_an_error_and_writes_keep_the_files_mode(
    tmp_path: Path,
) -> None:
    """Every write replaces the file whole, so an empty file was cut short: read as an
    empty registry, every job's history would be dropped without a word."""
    path = tmp_path / "flink-jobs.yaml"
    registry = JobRegistry(path)
    registry.add(run("a", parallelism=2))
    path.chmod(0o644)
    registry.add(run("b"))
    assert path.stat().st_mode & 0o777 == 0o644
    path.write_text("")
    with pytest.raises(ConfigError, match="the job registry is empty: it was cut short"):
        registry.runs()


def test_registry_round_trip_and_update(tmp_path: Path) -> None:
    registry = JobRegistry(tmp_path / "sub" / "flink-jobs.yaml")
    assert registry.runs() == []
    registry.add(run("a", parallelism=2))
    registry.add(run("b", job_key="other"))
    assert [r.job_id for r in registry.runs(job_key="enrich.py")] == ["a"]
    updated = registry.update("a", final_parallelism=5)
    assert updated is not None and registry.find("a") == updated
    assert registry.update("missing", final_parallelism=5) is None
    text = (tmp_path / "sub" / "flink-jobs.yaml").read_text()
    assert text.startswith("apiVersion: kubesage/v1\nkind: FlinkJobRegistry\n")


def test_registry_rejects_unknown_keys_naming_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "flink-jobs.yaml"
    path.write_text(
        "apiVersion: kubesage/v1\nkind: FlinkJobRegistry\nruns:\n"
        f"  - {{job_id: a, job_key: k, jobmanager: {JM}, submitted_at_ms: 1, color: red}}\n"
    )
    with pytest.raises(ConfigError, match=r"flink-jobs.yaml: field 'runs.0.color': unknown key"):
        JobRegistry(path).load()
    path.write_text("runs: [")
    with pytest.raises(ConfigError, match="not valid YAML at line 1"):
        JobRegistry(path).load()


def test_submit_runs_flink_and_registers_the_job(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    flink_home = fake_flink_home(tmp_path)
    commands: list[list[str]] = []

    def flink(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        commands.append(list(command))
        return subprocess.CompletedProcess(list(command), 0, FLINK_OUTPUT, "")

    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    registry.add(run("earlier", parallelism=2, final_parallelism=3))

    def client(url: str) -> FlinkClient:
        return replay_client("jobs_overview", "job_running", "checkpoint_config")

    outcome = submit(
        request(checkpoint_interval_ms=10_000, flink_home=flink_home, wait_running_s=5),
        registry,
        runner=flink,
        client_factory=client,
    )
    assert outcome.job_id == JOB
    assert commands[0][commands[0].index("-p") + 1] == "3"
    stored = registry.find(JOB)
    assert stored is not None and stored.running_since_ms
    # The recorded job enables checkpoints itself (every 10 s): not driven, and said so.
    assert stored.driven is False
    assert any("periodic checkpoints itself" in reason for reason in outcome.reasons)


def test_the_users_own_parallelism_is_recorded_for_the_next_run(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    """``-p 16`` of the user's own is what the job was submitted with: the next run of
    the job, without its own -p, starts there (it had been recorded as None)."""
    flink_home = fake_flink_home(tmp_path)

    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    outcome = submit(
        SubmitRequest(
            flink_args=("-p", "16", "-py", "enrich.py"),
            jobmanager=JM,
            flink_home=flink_home,
            wait_running_s=5,
        ),
        registry,
        runner=succeeds,
        client_factory=lambda url: replay_client("jobs_overview", "job_running"),
    )
    assert outcome.run.parallelism == 16
    later = SubmitRequest(flink_args=("-py", "enrich.py"), jobmanager=JM)
    assert choose_parallelism(later, registry.runs(job_key="enrich.py")).parallelism == 16


def test_a_program_that_submits_two_jobs_says_which_one_is_registered(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    flink_home = fake_flink_home(tmp_path)
    second = "0" * 31 + "1"

    def flink(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        output = FLINK_OUTPUT + f"Job has been submitted with JobID {second}\n"
        return subprocess.CompletedProcess(list(command), 0, output, "")

    outcome = submit(
        request(flink_home=flink_home, wait_running_s=5),
        JobRegistry(tmp_path / "flink-jobs.yaml"),
        runner=flink,
        client_factory=lambda url: replay_client("jobs_overview", "job_running"),
    )
    assert outcome.job_id == JOB
    assert any(f"only the first ({JOB}) is registered, not {second}" in r for r in outcome.reasons)


def test_a_job_not_running_in_time_keeps_why_in_the_registry(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    outcome = submit(
        request(flink_home=fake_flink_home(tmp_path), wait_running_s=0.2),
        registry,
        runner=succeeds,
        client_factory=lambda url: replay_client("jobs_overview"),  # the job is never seen
    )
    stored = registry.find(outcome.job_id)
    assert stored is not None and stored.running_since_ms is None
    assert "job not RUNNING within 0.2 s: phase not confirmed" in stored.reasons


def test_a_flink_run_that_hangs_after_submitting_still_registers_the_job(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    flink_home = fake_flink_home(tmp_path)

    def hangs(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(list(command), 300, output=FLINK_OUTPUT.encode())

    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    outcome = submit(
        request(flink_home=flink_home, wait_running_s=5),
        registry,
        runner=hangs,
        client_factory=lambda url: replay_client("jobs_overview", "job_running"),
    )
    assert outcome.job_id == JOB and registry.find(JOB) is not None
    assert "flink run did not exit within 300 s after submitting" in outcome.reasons

    def silent(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(list(command), 300, output=b"Starting...")

    with pytest.raises(FlinkSubmitError, match="did not finish within 300 s and printed no JobID"):
        submit(
            request(flink_home=flink_home),
            registry,
            runner=silent,
            client_factory=lambda url: replay_client("jobs_overview"),
        )

    def missing(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(2, "No such file or directory", "bash")

    with pytest.raises(FlinkSubmitError, match="cannot run flink"):
        submit(
            request(flink_home=flink_home),
            registry,
            runner=missing,
            client_factory=lambda url: replay_client("jobs_overview"),
        )


@pytest.mark.parametrize("driven", [True, False])
def test_a_code_set_interval_is_what_the_registry_keeps(
    tmp_path: Path, replay_client: Callable[..., FlinkClient], driven: bool
) -> None:
    """Asked for 30 s; the recorded job's code checkpoints every 10 s. The registry keeps
    the interval Flink uses (10 s, or min-pause where that is longer: Flink raises the
    interval to it), and no planned phase: later phases are read modulo that interval."""
    flink_home = fake_flink_home(tmp_path)

    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    outcome = submit(
        request(
            checkpoint_interval_ms=30_000, driven=driven, flink_home=flink_home, wait_running_s=5
        ),
        registry,
        runner=succeeds,
        client_factory=lambda url: replay_client(
            "jobs_overview", "job_running", "checkpoint_config"
        ),
    )
    stored = registry.find(JOB)
    assert stored is not None and stored.driven is False and stored.phase_ms is None
    if driven:
        assert stored.checkpoint_interval_ms == 10_000
    else:  # min-pause (30 s less the phase window) is longer than the code's 10 s
        assert stored.checkpoint_interval_ms is not None and stored.checkpoint_interval_ms > 10_000
        said = " ".join(outcome.reasons)
        assert f"Flink checkpoints every {stored.checkpoint_interval_ms} ms" in said


def test_a_failing_flink_run_is_an_error_with_its_output(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    flink_home = fake_flink_home(tmp_path)

    def flink(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(command), 1, "", "Could not connect to jm")

    with pytest.raises(FlinkSubmitError, match="Could not connect"):
        submit(
            request(flink_home=flink_home),
            JobRegistry(tmp_path / "r.yaml"),
            runner=flink,
            client_factory=lambda url: replay_client(),
        )
    assert JobRegistry(tmp_path / "r.yaml").runs() == []


def test_an_unreadable_registry_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the job registry"):
        JobRegistry(tmp_path).load()


def test_taskmanager_gpus_through_the_device_plugin_set_the_config_key(tmp_path: Path) -> None:
    gpus = taskmanager_gpus(2, DeviceMode.device_plugin, job="enrich.py", template_dir=tmp_path)
    assert gpus.conf == {
        "external-resources": "gpu",
        "external-resource.gpu.amount": "2",
        "external-resource.gpu.driver-factory.class": GPU_DRIVER_FACTORY,
        "external-resource.gpu.kubernetes.config-key": "nvidia.com/gpu",
    }
    assert gpus.files == {}


def test_taskmanager_gpus_through_dra_claim_in_the_pod_template(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    flink_home = fake_flink_home(tmp_path)
    commands: list[list[str]] = []

    def flink(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        commands.append(list(command))
        return subprocess.CompletedProcess(list(command), 0, FLINK_OUTPUT, "")

    out = tmp_path / "templates"
    outcome = submit(
        request(
            flink_home=flink_home,
            wait_running_s=0,
            taskmanager_gpus=1,
            devices=DeviceMode.dra,
            template_dir=out,
        ),
        JobRegistry(tmp_path / "r.yaml"),
        runner=flink,
        client_factory=lambda url: replay_client("jobs_overview"),
    )
    options = {
        arg[2:].split("=", 1)[0]: arg.split("=", 1)[1] for arg in commands[0] if arg[:2] == "-D"
    }
    assert "external-resource.gpu.kubernetes.config-key" not in options
    assert options["external-resource.gpu.amount"] == "1"
    pod = yaml.safe_load(Path(options["kubernetes.pod-template-file.taskmanager"]).read_text())
    claim = yaml.safe_load((out / "gpu-claim-template.yaml").read_text())
    validate_manifests([pod, claim], DRA_KUBERNETES_VERSION)
    assert claim["metadata"]["name"] == "enrich-py-taskmanager-gpus"
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": "enrich-py-taskmanager-gpus"}
    ]
    (container,) = pod["spec"]["containers"]
    assert container == {
        "name": "flink-main-container",
        "resources": {"claims": [{"name": "gpus"}]},
    }
    assert any("through DRA" in reason for reason in outcome.reasons)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"devices": DeviceMode.dra}, "give --taskmanager-gpus"),
        ({"taskmanager_gpus": -1}, "--taskmanager-gpus must be"),
    ],
)
def test_bad_gpu_requests(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        request(**kwargs)


def test_submit_options_before_the_separator_are_kubesages() -> None:
    result = CliRunner().invoke(
        app, ["flink", "submit", "--taskmanager-gpu", "1", "--", "-py", "a"]
    )
    assert result.exit_code == 2
    assert "No such option: --taskmanager-gpu" in result.output


def test_a_jobs_checkpoints_are_read_where_they_landed(
    replay_client: Callable[..., FlinkClient],
) -> None:
    # Every (re)start draws Flink's first-checkpoint delay again: the phase recorded at
    # submit time goes stale, so it is read from the history (latest trigger mod T);
    # the duration and size, recorded at submit time from the previous run (or not at
    # all), are read from it too: the longest completed checkpoint, the median size.
    client = replay_client("checkpoints")
    flink_paced = run(JOB, checkpoint_interval_ms=10_000, phase_ms=0, driven=False)
    landed = landed_checkpoints(client, flink_paced)
    assert landed is not None
    assert landed.phase_ms == 1796005385102 % 10_000 == 5_102
    assert (landed.duration_ms, landed.size_bytes) == (318, 38_715)
    driven = landed_checkpoints(client, flink_paced.model_copy(update={"driven": True}))
    assert driven is not None and driven.phase_ms is None  # the plan's phase stands
    assert driven.duration_ms == 318
    assert landed_checkpoints(replay_client(), flink_paced) is None  # no history: 404
    no_interval = flink_paced.model_copy(update={"checkpoint_interval_ms": None})
    assert landed_checkpoints(client, no_interval) is None


def test_submit_plans_beside_what_running_jobs_checkpoints_measure(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    # A running job Flink checkpoints itself, registered without a measured duration
    # (its first run): submit reads its history and plans the new job beside its real
    # checkpoints, and the registry keeps the measurement for the job's next run.
    flink_home = fake_flink_home(tmp_path)
    new_job = "0" * 32

    def flink(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        out = f"Job has been submitted with JobID {new_job}\n"
        return subprocess.CompletedProcess(list(command), 0, out, "")

    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    registry.add(run(JOB, job_key="clicks", checkpoint_interval_ms=10_000, phase_ms=0))
    submit(
        request(
            name="enrich", checkpoint_interval_ms=10_000, flink_home=flink_home, wait_running_s=0
        ),
        registry,
        runner=flink,
        client_factory=lambda url: replay_client("jobs_overview", "job_running", "checkpoints"),
    )
    running = registry.find(JOB)
    assert running is not None
    assert (running.phase_ms, running.checkpoint_duration_ms) == (5_102, 318)
    assert running.checkpoint_size_bytes == 38_715
    planned = registry.find(new_job)
    assert planned is not None and planned.phase_ms is not None
    # Not inside the running job's measured checkpoints, [5102, 5420) mod 10 s.
    assert not 5_102 - 1_000 < planned.phase_ms < 5_102 + 318
    assert any("beside 1 running job(s)" in reason for reason in planned.reasons)


def test_a_python_jobs_client_runs_the_python_of_the_venv_flink_is_in(tmp_path: Path) -> None:
    """pyflink's Flink home is ``<venv>/lib/python3.x/site-packages/pyflink``: that venv's
    ``bin`` goes first on PATH (it had looked one folder too low and never found it)."""
    venv = tmp_path / "venv"
    home = venv / "lib" / "python3.11" / "site-packages" / "pyflink"
    (home / "bin").mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    path = flink_environment(home)["PATH"]
    assert path.split(os.pathsep)[0] == str((venv / "bin").resolve())
    elsewhere = tmp_path / "flink-1.20"
    (elsewhere / "bin").mkdir(parents=True)
    assert flink_environment(elsewhere)["PATH"] == os.environ.get("PATH", "")


def test_one_jobmanager_however_its_url_is_spelled(tmp_path: Path) -> None:
    registry = JobRegistry(tmp_path / "flink-jobs.yaml")
    registry.add(run("earlier", parallelism=8, jobmanager="http://JM:80/"))
    for spelling in ("http://jm", "http://jm:80", "http://jm/"):
        assert [r.job_id for r in registry.runs(jobmanager=spelling)] == ["earlier"], spelling
    assert registry.runs(jobmanager="http://jm:8081") == []
    assert registry.runs(jobmanager="https://jm") == []


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://flink.example.com", "flink.example.com:80"),  # where the REST client goes
        ("https://flink.example.com", "flink.example.com:443"),
        ("http://[::1]:8081", "[::1]:8081"),
    ],
)
def test_the_m_address_is_the_rest_clients(tmp_path: Path, url: str, address: str) -> None:
    command = flink_run_command(fake_flink_home(tmp_path), url, None, {}, ["app.jar"])
    assert command[command.index("-m") + 1] == address
