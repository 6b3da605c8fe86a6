"""``kubesage flink autoscale --flink-deployment``: decisions applied by patching a
FlinkDeployment, through the loop (``run_autoscaler``) over a FAKE JobManager (recorded
replies, no Flink) and the FAKE Kubernetes API server with the real kubernetes client.

The patch must hold every vertex's target, stay pending (not sent again) until the
parallelism shows up or the rescale timeout passes, print and send nothing on a dry
run, and turn the API's 404/403/422 into messages naming the FlinkDeployment.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from benchmarks.flink_support.cluster import free_port
from kubesage.adapters.flink import cli
from kubesage.adapters.flink.autoscale_loop import AppliedOutcome, LoopStats, run_autoscaler
from kubesage.adapters.flink.autoscaler import AutoscalerSettings, ScalingDecision
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.operator_patch import (
    OVERRIDES_KEY,
    FlinkDeploymentRef,
    PatchOutcome,
    deployment_patch,
)
from kubesage.core.errors import InputError
from kubesage.core.k8s.apiclient import CustomObjectsApi
from tests.fakes.apiserver import FLINK_DEPLOYMENTS, FakeApiServer

from .conftest import one_subtask_times, recorded

JOB_BODY = recorded("job_running")["body"]
JOB = JOB_BODY["jid"]
SOURCE, SLOW, SINK = (vertex["id"] for vertex in JOB_BODY["vertices"])
METRICS = {SOURCE: "metrics_source", SLOW: "metrics_slow", SINK: "metrics_sink"}
STARTED_S = JOB_BODY["timestamps"]["RUNNING"] / 1000.0
ORDERS = FlinkDeploymentRef("streaming", "orders")
DEPLOYMENT_PATH = "/apis/flink.apache.org/v1beta1/namespaces/streaming/flinkdeployments/orders"
# The recorded counters, 10 s apart, ask 4 subtasks of the slow operator (the source
# is excluded, the sink keeps 1): the overrides must still name all three vertices.
TARGETS = {SOURCE: 1, SLOW: 4, SINK: 1}
SETTINGS = AutoscalerSettings(
    exclude=frozenset({"Source: sequence -> pace"}), settle_s=0.0, stable_observations=1
)
runner = CliRunner()


class FakeJobManager:
    """A FAKE JobManager over recorded replies: tick ``n`` is the ``n``-th read of the job
    (one per loop tick); the counters grow at the recorded rates, 10 s a tick, and from
    tick ``rescaled_at`` the slow vertex runs at ``rescaled_to`` (restarted then)."""

    def __init__(self, *, rescaled_at: int | None = None, rescaled_to: int = 4) -> None:
        self.tick = 0
        self.rescaled_at = rescaled_at
        self.rescaled_to = rescaled_to

    def clock(self) -> float:
        return STARTED_S + 90.0 + 10.0 * self.tick

    def _job(self) -> dict[str, Any]:
        body = copy.deepcopy(JOB_BODY)
        if self.rescaled_at is not None and self.tick >= self.rescaled_at:
            body["timestamps"]["RUNNING"] += 1_000 * (10 * self.rescaled_at)
            for vertex in body["vertices"]:
                if vertex["id"] == SLOW:
                    vertex["parallelism"] = self.rescaled_to
        return body

    def _metrics(self, vertex_id: str) -> list[dict[str, Any]]:
        factor = 1.0 + 0.5 * (self.tick - 1)
        return [
            {**m, **{k: m[k] * factor for k in ("min", "max", "avg", "sum")}}
            for m in recorded(METRICS[vertex_id])["body"]
        ]

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path == "/overview":
            return httpx.Response(200, json=recorded("overview")["body"])
        if request.method == "GET" and path == f"/jobs/{JOB}":
            self.tick += 1
            return httpx.Response(200, json=self._job())
        if request.method == "GET" and path.endswith("/subtasks/metrics"):
            if "get" not in request.url.params:
                return httpx.Response(200, json=recorded("metric_names_source")["body"])
            return httpx.Response(200, json=self._metrics(path.split("/")[4]))
        if request.method == "GET" and path.startswith(f"/jobs/{JOB}/vertices/"):
            vertex = path.split("/")[4]
            name = METRICS[vertex].replace("metrics_", "vertex_")
            return httpx.Response(200, json=one_subtask_times(name, self._metrics(vertex))["body"])
        # Anything else — a REST rescale above all — is not what these tests expect.
        return httpx.Response(404, json=recorded("job_not_found")["body"])

    def client(self) -> FlinkClient:
        return FlinkClient(
            "http://flink.test", transport=httpx.MockTransport(self.handle), backoff_s=0.0
        )


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_custom(
            FLINK_DEPLOYMENTS,
            {
                "metadata": {"name": "orders", "namespace": "streaming"},
                "spec": {
                    "flinkConfiguration": {"taskmanager.numberOfTaskSlots": "4"},
                    "job": {"parallelism": 1, "upgradeMode": "savepoint"},
                },
            },
        )
        yield server


@pytest.fixture
def custom_objects(fake: FakeApiServer) -> Any:
    return CustomObjectsApi(fake.client())


def autoscale(
    jobmanager: FakeJobManager,
    ticks: int,
    *,
    custom_objects: Any = None,
    deployment: FlinkDeploymentRef = ORDERS,
    dry_run: bool = False,
    timeout_s: float = 90.0,
) -> tuple[LoopStats, list[tuple[ScalingDecision, AppliedOutcome | None]]]:
    seen: list[tuple[ScalingDecision, AppliedOutcome | None]] = []
    stats = run_autoscaler(
        jobmanager.client(),
        JOB,
        dry_run=dry_run,
        settings=SETTINGS,
        on_decision=lambda decision, outcome: seen.append((decision, outcome)),
        interval_s=0.0,
        rescale_timeout_s=timeout_s,
        max_ticks=ticks,
        clock=jobmanager.clock,
        flink_deployment=deployment,
        custom_objects=custom_objects,
    )
    return stats, seen


def states(seen: list[tuple[ScalingDecision, AppliedOutcome | None]]) -> list[str | None]:
    return [outcome.state if isinstance(outcome, PatchOutcome) else None for _, outcome in seen]


def patches_sent(fake: FakeApiServer) -> int:
    return len(fake.requests_to("PATCH", DEPLOYMENT_PATH + "$"))


def test_a_patch_is_sent_once_and_pending_until_the_parallelism_shows_up(
    fake: FakeApiServer, custom_objects: Any
) -> None:
    jobmanager = FakeJobManager(rescaled_at=4)
    stats, seen = autoscale(jobmanager, 4, custom_objects=custom_objects)
    # tick 1: no window yet; 2: patched; 3: the decision still asks 4 (Flink still runs
    # 1): pending, not sent again; 4: the job runs at 4: done.
    assert [decision.action for decision, _ in seen] == ["skip", "rescale", "rescale", "skip"]
    assert states(seen) == [None, "patched", "pending", "done"]
    assert patches_sent(fake) == 1
    stored = fake.get(FLINK_DEPLOYMENTS, "streaming", "orders")["spec"]
    assert stored["flinkConfiguration"] == {
        "taskmanager.numberOfTaskSlots": "4",
        OVERRIDES_KEY: ",".join(f"{v}:{p}" for v, p in sorted(TARGETS.items())),
    }
    assert stored["job"] == {"parallelism": 1, "upgradeMode": "savepoint"}
    assert (stats.patches, stats.rescales, stats.failed_rescales, stats.errors) == (1, 1, 0, 0)
    assert not stats.patch_pending
    assert "1 FlinkDeployment patch(es), 1 rescale(s), 0 failed" in stats.describe(patching=True)


def test_a_patch_not_observed_in_time_fails_and_the_next_decision_patches_again(
    fake: FakeApiServer, custom_objects: Any
) -> None:
    stats, seen = autoscale(FakeJobManager(), 5, custom_objects=custom_objects, timeout_s=15.0)
    assert states(seen) == [None, "patched", "pending", "timed-out", "patched"]
    timed_out = seen[3][1]
    assert isinstance(timed_out, PatchOutcome)
    assert "did not show up within 15 s" in timed_out.describe()
    assert f"{SLOW}: 4 wanted, 1 running" in timed_out.describe()
    assert patches_sent(fake) == 2
    assert (stats.patches, stats.rescales, stats.failed_rescales) == (2, 0, 1)
    assert stats.patch_pending


def test_a_dry_run_prints_the_patch_and_sends_nothing(
    fake: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    jobmanager = FakeJobManager()
    stats = run_autoscaler(
        jobmanager.client(),
        JOB,
        dry_run=True,
        settings=SETTINGS,
        on_decision=cli.print_decision,
        interval_s=0.0,
        max_ticks=3,
        clock=jobmanager.clock,
        flink_deployment=ORDERS,  # and no Kubernetes client at all
    )
    printed = capsys.readouterr().out
    patch = json.dumps(deployment_patch(TARGETS), sort_keys=True)
    assert f"outcome: FlinkDeployment streaming/orders: dry run, would merge-patch {patch}" in (
        printed
    )
    assert printed.count("would merge-patch") == 2  # nothing pending after a dry run
    assert fake.requests_to("PATCH", "flinkdeployments") == []
    assert (stats.patches, stats.rescales, stats.failed_rescales) == (0, 0, 0)


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        (
            403,
            'flinkdeployments.flink.apache.org "orders" is forbidden',
            "not allowed to patch FlinkDeployment streaming/orders (HTTP 403: the user needs "
            "'patch' on flinkdeployments.flink.apache.org in namespace streaming): "
            'flinkdeployments.flink.apache.org "orders" is forbidden',
        ),
        (
            422,
            'FlinkDeployment.flink.apache.org "orders" is invalid',
            "the API server refused the patch of FlinkDeployment streaming/orders as invalid "
            '(HTTP 422): FlinkDeployment.flink.apache.org "orders" is invalid',
        ),
    ],
)
def test_a_refused_patch_is_a_failed_rescale_naming_the_deployment(
    fake: FakeApiServer, custom_objects: Any, code: int, message: str, expected: str
) -> None:
    fake.fail("PATCH", DEPLOYMENT_PATH, code, message=message)
    stats, seen = autoscale(FakeJobManager(), 2, custom_objects=custom_objects)
    failed = seen[1][1]
    assert isinstance(failed, PatchOutcome) and failed.state == "failed"
    assert failed.describe() == f"FlinkDeployment streaming/orders: {expected}"
    assert (stats.patches, stats.failed_rescales, stats.patch_pending) == (0, 1, False)
    stored = fake.get(FLINK_DEPLOYMENTS, "streaming", "orders")["spec"]["flinkConfiguration"]
    assert OVERRIDES_KEY not in stored


def test_patching_a_missing_deployment_names_it(custom_objects: Any) -> None:
    gone = FlinkDeploymentRef("streaming", "gone")
    stats, seen = autoscale(FakeJobManager(), 2, custom_objects=custom_objects, deployment=gone)
    failed = seen[1][1]
    assert isinstance(failed, PatchOutcome) and failed.state == "failed"
    assert "no FlinkDeployment gone in namespace streaming (HTTP 404 on patch" in failed.message
    assert stats.failed_rescales == 1 and "streaming/gone" in stats.last_error


def test_the_loop_needs_a_kubernetes_client_unless_it_is_a_dry_run() -> None:
    with pytest.raises(InputError, match="FlinkDeployment streaming/orders needs a Kubernetes"):
        autoscale(FakeJobManager(), 1)


# -- the option ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("orders", "expected NAMESPACE/NAME of a FlinkDeployment"),
        ("", "expected NAMESPACE/NAME of a FlinkDeployment"),
        ("/orders", "expected NAMESPACE/NAME of a FlinkDeployment"),
        ("Streaming/orders", "namespace 'Streaming' is not a DNS-1123 label"),
        ("stream.ing/orders", "namespace 'stream.ing' is not a DNS-1123 label"),
        ("streaming/Orders", "name 'Orders' is not a DNS-1123 subdomain"),
        ("streaming/orders/v2", "name 'orders/v2' is not a DNS-1123 subdomain"),
    ],
)
def test_a_malformed_flink_deployment_is_refused_naming_the_option(value: str, why: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = runner.invoke(
        cli.flink_app, ["autoscale", "--jobmanager", url, "--flink-deployment", value]
    )
    output = " ".join(done.output.split())
    assert done.exit_code == 2
    assert f"--flink-deployment '{value}': {why}" in output
    assert "no Flink JobManager" not in output  # refused before connecting


def test_a_well_formed_flink_deployment_parses() -> None:
    assert FlinkDeploymentRef.parse("streaming/orders.v2") == FlinkDeploymentRef(
        "streaming", "orders.v2"
    )
    assert str(FlinkDeploymentRef.parse("a/b")) == "a/b"


def test_kubeconfig_without_a_flink_deployment_is_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = runner.invoke(cli.flink_app, ["autoscale", "--jobmanager", url, "--context", "prod"])
    assert done.exit_code == 2
    words = " ".join(done.output.split())
    assert "--kubeconfig, --context and --allow-stateless-upgrade go with --flink-deployment" in (
        words
    )


def test_the_command_reads_the_deployment_before_it_starts(fake: FakeApiServer) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    base = ["autoscale", "--jobmanager", url, "--kubeconfig", str(fake.kubeconfig)]
    missing = runner.invoke(cli.flink_app, [*base, "--flink-deployment", "streaming/gone"])
    assert missing.exit_code == 2
    output = " ".join(missing.output.split())
    assert "no FlinkDeployment gone in namespace streaming (HTTP 404 on get" in output
    assert "no Flink JobManager" not in output
    # The deployment exists: the command goes on to the JobManager (none here).
    found = runner.invoke(cli.flink_app, [*base, "--flink-deployment", "streaming/orders"])
    assert found.exit_code == 2
    assert f"no Flink JobManager answers at {url}" in " ".join(found.output.split())
    assert fake.requests_to("PATCH", "flinkdeployments") == []


@pytest.mark.parametrize(
    ("spec", "refused"),
    [
        ({"job": {"parallelism": 1}}, "spec.job sets no upgradeMode"),
        ({"job": {"upgradeMode": "stateless"}}, "spec.job.upgradeMode is stateless"),
        ({"job": {"upgradeMode": "last-state"}}, None),
        (
            {
                "job": {"upgradeMode": "stateless"},
                "flinkConfiguration": {"jobmanager.scheduler": "adaptive"},
            },
            None,
        ),
    ],
)
def test_a_deployment_the_operator_would_restart_from_empty_state_is_refused(
    fake: FakeApiServer, spec: dict[str, Any], refused: str | None
) -> None:
    fake.add_custom(
        FLINK_DEPLOYMENTS, {"metadata": {"name": "etl", "namespace": "streaming"}, "spec": spec}
    )
    url = f"http://127.0.0.1:{free_port()}"
    base = ["autoscale", "--jobmanager", url, "--kubeconfig", str(fake.kubeconfig)]
    done = runner.invoke(cli.flink_app, [*base, "--flink-deployment", "streaming/etl"])
    words = " ".join(done.output.split())
    assert done.exit_code == 2
    if refused is None:  # it keeps its state: on to the JobManager (none here)
        assert f"no Flink JobManager answers at {url}" in words
        return
    assert f"FlinkDeployment streaming/etl: {refused}" in words
    assert "restarts the job from empty state" in words and "no Flink JobManager" not in words
    allowed = runner.invoke(
        cli.flink_app,
        [*base, "--flink-deployment", "streaming/etl", "--allow-stateless-upgrade"],
    )
    assert allowed.exit_code == 2
    assert f"no Flink JobManager answers at {url}" in " ".join(allowed.output.split())
