"""``kubesage flink state --apply``: savepoint, restart with new state settings, roll back.

The cluster tests run a Table/SQL job with keyed state (``keyed_state_job.py``, a
``GROUP BY`` count) submitted through ``submit`` with a registry in ``tmp_path``; a
local directory stands in for ForSt's remote primary storage. The restarted job keeps
the per-vertex parallelism the job ran at (an in-place rescale), not the submitted one.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from benchmarks.flink_support.cluster import LocalFlinkCluster
from benchmarks.flink_support.samples import cancel_jobs
from kubesage.adapters.flink.cli import flink_app
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.registry import JobRegistry, RunRecord
from kubesage.adapters.flink.rescale import rescale_in_place
from kubesage.adapters.flink.rest_models import ParallelismBounds
from kubesage.adapters.flink.state_apply import (
    FORST_RESTORE_CONF,
    TTL_KEY,
    ApplyOutcome,
    StateApplier,
    StateApplyError,
    plan_apply,
)
from kubesage.adapters.flink.state_tiering import (
    GIB,
    StateObservation,
    StateSample,
    recommend,
)
from kubesage.adapters.flink.submit import Runner, SubmitRequest, run_flink, submit
from kubesage.adapters.flink.vertex_parallelism import (
    VertexParallelism,
    match_vertices,
    restored_requirements,
)
from kubesage.core.errors import InputError
from tests.adapters.flink.conftest import recorded, replay, wait_running, wait_until

KEYED_JOB = Path(__file__).with_name("keyed_state_job.py")


def cold_state_recommendation(remote_dir: str) -> dict[str, str]:
    """What ``recommend`` says for 4 GiB of mostly cold, growing state: ForSt, cache, TTL."""
    samples = tuple(
        StateSample(
            time_ms=hour * 3_600_000, state_bytes=(4 + hour) * GIB, checkpointed_bytes=GIB // 4
        )
        for hour in range(3)
    )
    observation = StateObservation("job", samples, interval_ms=60_000, state_backend="hashmap")
    return recommend(observation, remote_dir=remote_dir).config


def registered(
    tmp_path: Path, conf: dict[str, str] | None = None, *, program: Path | None = None
) -> JobRegistry:
    registry = JobRegistry(tmp_path / "jobs.yaml")
    if program is None:
        program = tmp_path / "job.py"
        program.write_text("print('the job')\n")
    registry.add(
        RunRecord(
            job_id="a" * 32,
            job_key="keyed",
            jobmanager="http://127.0.0.1:8081",
            submitted_at_ms=0,
            flink_args=["-py", str(program)],
            conf=conf or {},
        )
    )
    return registry


def test_a_job_whose_program_is_not_here_is_refused_before_it_is_stopped(
    tmp_path: Path,
) -> None:
    registry = registered(tmp_path, program=tmp_path / "gone" / "job.py")
    with pytest.raises(InputError, match=r"its program's files are not here \(.*gone/job.py\)"):
        plan_apply("a" * 32, {"state.backend.type": "rocksdb"}, registry)


def test_an_unregistered_job_is_refused_with_how_to_register_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="kubesage flink submit"):
        plan_apply("b" * 32, {"state.backend.type": "rocksdb"}, JobRegistry(tmp_path / "j.yaml"))


def test_forst_gets_heap_timers_and_a_new_ttl_is_left_out(tmp_path: Path) -> None:
    settings = cold_state_recommendation("file:///remote/forst")
    assert settings["state.backend.type"] == "forst" and TTL_KEY in settings

    plan = plan_apply("a" * 32, settings, registered(tmp_path))

    assert plan.settings["state.backend.forst.primary-dir"] == "file:///remote/forst"
    assert plan.settings.items() >= FORST_RESTORE_CONF.items()
    assert TTL_KEY not in plan.settings
    assert any(TTL_KEY in note and "StateMigrationException" in note for note in plan.notes)


def test_a_changed_ttl_is_applied_and_unchanged_settings_are_not(tmp_path: Path) -> None:
    registry = registered(tmp_path, {TTL_KEY: "1 h", "state.backend.type": "rocksdb"})

    plan = plan_apply("a" * 32, {TTL_KEY: "2 h", "state.backend.type": "rocksdb"}, registry)

    assert plan.settings == {TTL_KEY: "2 h"}
    assert plan.new_conf == {TTL_KEY: "2 h", "state.backend.type": "rocksdb"}


@pytest.mark.parametrize(
    ("current", "kept"),
    [("7 d", True), ("604800000", True), ("1 h", False), ("60 min", False), ("a week", True)],
)
def test_a_shorter_ttl_is_never_applied(tmp_path: Path, current: str, kept: bool) -> None:
    # A job still filling towards its TTL grows: the recommendation may well be shorter,
    # and expiring state the job keeps would change its results.
    registry = registered(tmp_path, {TTL_KEY: current})

    plan = plan_apply("a" * 32, {TTL_KEY: "3600000 ms"}, registry)

    assert (TTL_KEY not in plan.settings) is kept
    if kept:
        assert any(
            note.startswith(f"{TTL_KEY} kept at {current}") or "not a Flink duration" in note
            for note in plan.notes
        ), plan.notes
    assert plan.new_conf[TTL_KEY] == (current if kept else "3600000 ms")


def test_forst_without_a_remote_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--remote-dir"):
        plan_apply("a" * 32, {"state.backend.type": "forst"}, registered(tmp_path))


def reply(body: object, status: int = 200) -> dict[str, object]:
    return {"status": status, "body": body}


def running_job(job_id: str) -> dict[str, object]:
    """The recorded ``GET /jobs/<id>`` of a running job, under another id."""
    return reply({**recorded("job_running")["body"], "jid": job_id})


def test_a_failed_savepoint_names_the_step_and_leaves_the_job_running(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    job_id = "a" * 32
    client = replay_client(
        **{
            f"GET /jobs/{job_id}": running_job(job_id),
            f"POST /jobs/{job_id}/stop": reply({"request-id": "r1"}),
            f"GET /jobs/{job_id}/savepoints/r1": reply(
                {
                    "status": {"id": "COMPLETED"},
                    "operation": {"failure-cause": {"stack-trace": "IOException: disk full"}},
                }
            ),
        }
    )
    registry = registered(tmp_path)
    plan = plan_apply(job_id, {"state.backend.type": "rocksdb"}, registry)
    applier = StateApplier(client, registry, Path("flink"))

    with pytest.raises(StateApplyError, match="disk full") as failure:
        applier.apply(plan)

    assert (failure.value.step, failure.value.job_state) == ("savepoint", "RUNNING")
    assert failure.value.savepoint is None
    assert registry.find(job_id) == plan.run


def test_a_stopped_job_that_does_not_end_is_not_resubmitted(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    job_id = "a" * 32
    cancelling = {**recorded("job_running")["body"], "jid": job_id, "state": "CANCELLING"}
    client = replay_client(
        **{
            f"GET /jobs/{job_id}": [running_job(job_id), *[reply(cancelling)] * 50],
            f"POST /jobs/{job_id}/stop": reply({"request-id": "r1"}),
            f"GET /jobs/{job_id}/savepoints/r1": reply(
                {"status": {"id": "COMPLETED"}, "operation": {"location": "file:/sp/savepoint-1"}}
            ),
        }
    )
    ran: list[list[str]] = []
    now = [0.0]

    def runner(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        ran.append(list(command))
        return subprocess.CompletedProcess(list(command), 0, "", "")

    registry = registered(tmp_path)
    plan = plan_apply(job_id, {"state.backend.type": "rocksdb"}, registry)
    applier = StateApplier(
        client,
        registry,
        Path("flink"),
        runner=runner,
        savepoint_timeout_s=10.0,
        clock=lambda: now[0],
        sleep=lambda seconds: now.__setitem__(0, now[0] + seconds),
    )

    with pytest.raises(StateApplyError, match="has not ended within 10 s") as failure:
        applier.apply(plan)

    assert failure.value.job_state == "CANCELLING" and failure.value.step == "savepoint"
    assert failure.value.savepoint == "file:/sp/savepoint-1"
    assert ran == []  # never resubmitted beside the old job


def test_a_failed_rollback_says_so_and_gives_the_savepoint(
    tmp_path: Path, replay_client: Callable[..., FlinkClient]
) -> None:
    job_id = "a" * 32
    finished = {**recorded("job_running")["body"], "jid": job_id, "state": "FINISHED"}
    client = replay_client(
        **{
            f"GET /jobs/{job_id}": [running_job(job_id), reply(finished)],
            f"POST /jobs/{job_id}/stop": reply({"request-id": "r1"}),
            f"GET /jobs/{job_id}/savepoints/r1": reply(
                {"status": {"id": "COMPLETED"}, "operation": {"location": "file:/sp/savepoint-1"}}
            ),
        }
    )
    commands: list[list[str]] = []

    def refusing_runner(
        command: Sequence[str], env: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        commands.append(list(command))
        return subprocess.CompletedProcess(list(command), 1, "", "no JobManager")

    registry = registered(tmp_path, {"execution.checkpointing.interval": "10 s"})
    plan = plan_apply(job_id, {"state.backend.type": "rocksdb"}, registry)
    applier = StateApplier(client, registry, Path("flink"), runner=refusing_runner)

    with pytest.raises(StateApplyError, match="file:/sp/savepoint-1") as failure:
        applier.apply(plan)

    assert failure.value.step == "rollback" and "no JobManager" in str(failure.value)
    assert [command[command.index("-s") + 1] for command in commands] == [
        "file:/sp/savepoint-1"
    ] * 2
    assert "-Dstate.backend.type=rocksdb" in commands[0]
    assert "-Dstate.backend.type=rocksdb" not in commands[1]
    assert "-Dexecution.checkpointing.interval=10 s" in commands[1]


def test_the_requirements_raise_only_the_rescaled_vertex_to_its_old_parallelism() -> None:
    current = {
        "src": ParallelismBounds(lower=1, upper=1),
        "agg": ParallelismBounds(lower=1, upper=1),
        "sink": ParallelismBounds(lower=3, upper=4),
    }

    updated = restored_requirements(current, {"src": 1, "agg": 3, "sink": 2})

    assert updated == {
        "src": ParallelismBounds(lower=1, upper=1),
        "agg": ParallelismBounds(lower=1, upper=3),
        "sink": ParallelismBounds(lower=2, upper=2),
    }
    assert restored_requirements(updated, {"agg": 3}) is None
    with pytest.raises(ValueError, match="below 1"):
        restored_requirements(current, {"agg": 0})


def test_vertices_are_matched_by_id_else_by_a_unique_name() -> None:
    before = [
        VertexParallelism("a1", "Source: src[1]", 1),
        VertexParallelism("b1", "GroupAggregate[3]", 3),
        VertexParallelism("c1", "twin", 2),
    ]
    after = [
        VertexParallelism("a1", "Source: src[1]", 1),
        VertexParallelism("b2", "GroupAggregate[3]", 1),
        VertexParallelism("c2", "twin", 1),
        VertexParallelism("c3", "twin", 1),
    ]

    match = match_vertices(before, after)

    assert match.wanted == {"a1": 1, "b2": 3}
    assert (match.by_name, match.unmatched) == (("GroupAggregate[3]",), ("twin",))
    assert any("matched by name: GroupAggregate[3]" in note for note in match.notes())


def job_reply(job_id: str, state: str, parallelism: dict[str, int]) -> dict[str, object]:
    """The recorded running job under another id, in ``state``, at ``parallelism`` by name."""
    body = recorded("job_running")["body"]
    vertices = [
        {**v, "parallelism": parallelism.get(v["name"], v["parallelism"]), "status": state}
        for v in body["vertices"]
    ]
    return reply({**body, "jid": job_id, "state": state, "vertices": vertices})


@pytest.mark.parametrize(
    ("first_run", "how"),
    [
        ({"slow": 3}, "restored at submission"),
        ({"slow": 1}, "restored by an in-place rescale right after the restart"),
    ],
)
def test_the_restarted_job_is_asked_for_each_vertex_s_parallelism_before_the_stop(
    tmp_path: Path, first_run: dict[str, int], how: str
) -> None:
    old, new = "a" * 32, "b" * 32
    routes: dict[tuple[str, str], Any] = {
        ("GET", f"/jobs/{old}"): [
            job_reply(old, "RUNNING", {"slow": 3}),
            job_reply(old, "FINISHED", {"slow": 3}),
        ],
        ("POST", f"/jobs/{old}/stop"): reply({"request-id": "r1"}),
        ("GET", f"/jobs/{old}/savepoints/r1"): reply(
            {"status": {"id": "COMPLETED"}, "operation": {"location": "file:/sp/savepoint-1"}}
        ),
        # Submitted at 1 (the recorded -p); runs first at ``first_run``, then at the
        # bounds kubesage sets.
        ("GET", f"/jobs/{new}"): [
            job_reply(new, "CREATED", {}),
            job_reply(new, "RUNNING", first_run),
            job_reply(new, "RUNNING", {"slow": 3}),
        ],
        ("GET", f"/jobs/{new}/resource-requirements"): recorded("resource_requirements"),
        ("PUT", f"/jobs/{new}/resource-requirements"): reply({}, 202),
    }
    sent: list[httpx.Request] = []
    inner = replay(routes)

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return inner.handle_request(request)

    client = FlinkClient("http://flink.test", transport=httpx.MockTransport(handler))
    registry = registered(tmp_path)
    plan = plan_apply(old, {"state.backend.type": "rocksdb"}, registry)
    ticks = itertools.count()
    applier = StateApplier(
        client,
        registry,
        Path("flink"),
        runner=lambda command, env: subprocess.CompletedProcess(
            list(command), 0, f"Job has been submitted with JobID {new}", ""
        ),
        clock=lambda: float(next(ticks)),
        sleep=lambda _: None,
    )

    outcome = applier.apply(plan)

    puts = [json.loads(r.content) for r in sent if r.method == "PUT"]
    slow = "59fa767824610e31f4a11d6125e09bf4"
    assert [body[slow]["parallelism"] for body in puts] == [{"lowerBound": 1, "upperBound": 3}]
    assert outcome.applied and outcome.parallelism is not None
    assert outcome.parallelism.restored and outcome.parallelism.running["slow"] == 3
    assert outcome.parallelism.how == how
    assert "parallelism restored" in outcome.describe() and "slow 3" in outcome.describe()
    new_run = registry.find(new)
    assert new_run is not None and "slow 3" in new_run.reasons[0]


# -- on the real cluster --------------------------------------------------------------


def cluster_runner(cluster: LocalFlinkCluster) -> Runner:
    """``flink run`` against this cluster's configuration."""
    return lambda command, env: run_flink(command, env | cluster.flink_env())


@pytest.fixture
def keyed_job(
    flink_cluster: LocalFlinkCluster, flink_client: FlinkClient, tmp_path: Path
) -> Iterator[tuple[str, JobRegistry]]:
    """The keyed job, registered in ``tmp_path``, RUNNING; every job it became is cancelled."""
    registry = JobRegistry(tmp_path / "jobs.yaml")
    # File-system checkpoint storage, as in production: ForSt's checkpoints are then
    # incremental and flush its memtable into the primary directory.
    checkpoints = f"-Dexecution.checkpointing.dir={(tmp_path / 'checkpoints').as_uri()}"
    request = SubmitRequest(
        flink_args=(
            *(checkpoints, *flink_cluster.python_args()),
            *("-py", str(KEYED_JOB), "--rate", "50"),
        ),
        jobmanager=flink_cluster.rest_url,
        name="keyed-state",
        parallelism=1,
        flink_home=flink_cluster.flink_home,
    )
    outcome = submit(request, registry, runner=cluster_runner(flink_cluster))
    try:
        wait_steady(flink_client, outcome.job_id)
        wait_until(
            lambda: flink_client.checkpoints(outcome.job_id).counts.completed > 0,
            timeout_s=60,
            what="a first checkpoint",
        )
        yield outcome.job_id, registry
    finally:
        cancel_jobs(flink_cluster.rest_url, [run.job_id for run in registry.runs()])


def wait_steady(client: FlinkClient, job_id: str) -> None:
    wait_running(client, job_id, timeout_s=90)


def apply(
    cluster: LocalFlinkCluster,
    client: FlinkClient,
    registry: JobRegistry,
    job_id: str,
    settings: dict[str, str],
    savepoints: Path,
) -> ApplyOutcome:
    plan = plan_apply(job_id, settings, registry, savepoint_dir=savepoints.as_uri())
    applier = StateApplier(
        client,
        registry,
        cluster.flink_home,
        runner=cluster_runner(cluster),
        running_timeout_s=90,
        settle_s=3,
    )
    return applier.apply(plan)


def restored_from(rest_url: str, job_id: str) -> str:
    latest = httpx.get(f"{rest_url}/jobs/{job_id}/checkpoints", timeout=10).json()["latest"]
    return str((latest.get("restored") or {}).get("external_path", ""))


@pytest.mark.slow
def test_apply_restarts_the_job_on_forst_from_its_savepoint_at_its_parallelism(
    flink_cluster: LocalFlinkCluster,
    flink_client: FlinkClient,
    keyed_job: tuple[str, JobRegistry],
    tmp_path: Path,
) -> None:
    job_id, registry = keyed_job
    primary = tmp_path / "remote-tier"
    primary.mkdir()
    # As the autoscaler does: the aggregation rescaled in place, away from the submitted 1.
    aggregate = next(v for v in flink_client.job(job_id).vertices if "GroupAggregate" in v.name)
    rescaled = rescale_in_place(flink_client, job_id, {aggregate.id: 2}, timeout_s=90)
    assert rescaled.succeeded, rescaled.message
    dry = CliRunner().invoke(
        flink_app,
        [
            *("state", "--jobmanager", flink_cluster.rest_url, "--job", job_id),
            *("--dry-run", "--registry", str(registry.path)),
        ],
    )
    assert dry.exit_code == 0, dry.output
    assert "would savepoint" in dry.output and "would rollback" in dry.output
    assert flink_client.job(job_id).state == "RUNNING"

    outcome = apply(
        flink_cluster,
        flink_client,
        registry,
        job_id,
        cold_state_recommendation(primary.as_uri()),
        tmp_path / "savepoints",
    )

    assert outcome.applied, outcome.describe()
    assert outcome.job_id != job_id and outcome.savepoint
    assert flink_client.job(outcome.job_id).state == "RUNNING"
    parallelism = {v.name: v.parallelism for v in flink_client.job(outcome.job_id).vertices}
    assert parallelism[aggregate.name] == 2, outcome.describe()
    assert outcome.parallelism is not None and outcome.parallelism.restored
    assert f"{aggregate.name} 2" in outcome.describe()
    assert flink_client.checkpoint_config(outcome.job_id).state_backend == "ForStStateBackend"
    # From the savepoint; or, when the scheduler started the job before the parallelism
    # bounds arrived and rescaled it in place, from a checkpoint of the new job.
    restored = restored_from(flink_cluster.rest_url, outcome.job_id).removeprefix("file:")
    assert Path(restored) == Path(outcome.savepoint.removeprefix("file:")) or (
        "in-place rescale" in outcome.parallelism.how and outcome.job_id in Path(restored).parts
    ), (restored, outcome.describe())
    try:
        wait_until(
            lambda: any(p.is_file() for p in primary.rglob("*")),
            timeout_s=30,
            what="ForSt's files in its primary directory",
        )
    except AssertionError as exc:
        tree = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
        raise AssertionError(f"{exc}; under tmp_path: {tree[:60]}") from None
    new_run = registry.find(outcome.job_id)
    assert new_run is not None and new_run.conf["state.backend.type"] == "forst"


@pytest.mark.slow
def test_a_restart_that_fails_rolls_back_to_the_old_settings(
    flink_cluster: LocalFlinkCluster,
    flink_client: FlinkClient,
    keyed_job: tuple[str, JobRegistry],
    tmp_path: Path,
) -> None:
    job_id, registry = keyed_job
    backend_before = flink_client.checkpoint_config(job_id).state_backend

    outcome = apply(
        flink_cluster,
        flink_client,
        registry,
        job_id,
        {"state.backend.type": "no-such-backend"},
        tmp_path / "savepoints",
    )

    assert not outcome.applied and outcome.failure
    assert outcome.job_id != job_id
    wait_steady(flink_client, outcome.job_id)
    assert flink_client.checkpoint_config(outcome.job_id).state_backend == backend_before
    assert restored_from(flink_cluster.rest_url, outcome.job_id).endswith(
        Path(outcome.savepoint).name
    )
    rolled_back = registry.find(outcome.job_id)
    assert rolled_back is not None and "state.backend.type" not in rolled_back.conf
    assert "rolled back" in rolled_back.reasons[0]


@pytest.mark.slow
def test_the_cli_applies_what_it_recommends(
    flink_cluster: LocalFlinkCluster,
    flink_client: FlinkClient,
    keyed_job: tuple[str, JobRegistry],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_id, registry = keyed_job
    monkeypatch.setenv("FLINK_CONF_DIR", str(flink_cluster.conf_dir))

    result = CliRunner().invoke(
        flink_app,
        [
            *("state", "--jobmanager", flink_cluster.rest_url, "--job", job_id, "--apply"),
            *("--savepoint-dir", (tmp_path / "savepoints").as_uri()),
            *("--registry", str(registry.path), "--flink-home", str(flink_cluster.flink_home)),
        ],
    )

    assert result.exit_code == 0, result.output
    assert "running with the new settings" in result.output
    assert "parallelism as submitted" in result.output
    new_run = registry.runs()[-1]
    assert new_run.job_id != job_id and job_id in result.output
    assert new_run.conf["state.backend.type"] == "hashmap"
    assert new_run.conf["state.latency-track.keyed-state-enabled"] == "true"
    assert flink_client.job(new_run.job_id).state == "RUNNING"
    assert flink_client.job(job_id).state == "FINISHED"
