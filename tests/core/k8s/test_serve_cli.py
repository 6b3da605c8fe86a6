"""``kubesage serve`` as a real process on a free port: embedded, and on a (fake) API server."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx
import orjson
import yaml

from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.core.k8s.test_server import admission_review
from tests.fakes.apiserver import FakeApiServer, wait_until

SERVE = (sys.executable, "-m", "kubesage.core.cli", "serve")
STARTUP_S = 120.0
"""Deadline for the process to start listening (imports on a loaded CI machine)."""


@contextmanager
def serving(
    *options: str, env: dict[str, str] | None = None, shutdown_delay_s: float = 0.0
) -> Iterator[str]:
    """Run ``kubesage serve --port 0 ...``; yield its base URL, then stop it with SIGTERM."""
    delay = ("--shutdown-delay-s", str(shutdown_delay_s))
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [*SERVE, "--host", "127.0.0.1", "--port", "0", *delay, *options],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        try:
            yield f"http://127.0.0.1:{_port(process, log)}"
        finally:
            process.send_signal(signal.SIGTERM)
            # SIGTERM: in-flight requests finish, the service stops, the process exits 0.
            assert process.wait(timeout=30) == 0, _tail(log)
            assert any(line.get("event") == "stopped" for line in _lines(log))


def _port(process: subprocess.Popen[bytes], log: IO[str]) -> int:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"kubesage serve exited early:\n{_tail(log)}"
        for line in _lines(log):
            if line.get("event") == "serving":
                return int(line["port"])
        time.sleep(0.1)
    raise AssertionError(f"kubesage serve did not listen within {STARTUP_S}s:\n{_tail(log)}")


def _lines(log: IO[str]) -> list[dict[str, Any]]:
    """The structured (JSON) log lines written so far."""
    log.seek(0)
    return [json.loads(line) for line in log.read().splitlines() if line.startswith("{")]


def _tail(log: IO[str]) -> str:
    log.seek(0)
    return log.read()[-3000:]


def training_pod(name: str = "trainer-0", gpus: str = "1") -> dict[str, Any]:
    requests = {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": gpus}
    return v1_pod(name, containers=[v1_container(requests=requests, limits=requests)])


def test_embedded_serve_answers_every_endpoint() -> None:
    names = [f"synthetic-node-{index:05d}" for index in range(40)]
    pod = training_pod()
    with serving("--embedded", "--nodes", "40") as url, httpx.Client(base_url=url) as http:
        health = http.get("/healthz")
        assert health.status_code == 200
        assert "embedded synthetic" in health.json()["detail"]
        filtered = http.post(
            "/scheduler/filter", content=orjson.dumps({"Pod": pod, "NodeNames": names})
        )
        assert filtered.status_code == 200
        passing = filtered.json()["NodeNames"]
        assert passing and set(passing) <= set(names)
        scores = http.post(
            "/scheduler/prioritize", content=orjson.dumps({"Pod": pod, "NodeNames": passing})
        ).json()
        assert {entry["Host"] for entry in scores} == set(passing)
        best = max(scores, key=lambda entry: entry["Score"])["Host"]
        binding = {
            "PodName": "trainer-0",
            "PodNamespace": "ml",
            "PodUID": pod["metadata"]["uid"],
            "Node": best,
        }
        assert http.post("/scheduler/bind", content=orjson.dumps(binding)).json() == {"Error": ""}
        review = http.post("/mutate", content=admission_review(pod))
        assert review.status_code == 200 and review.json()["response"]["allowed"] is True
        bad = http.post("/scheduler/filter", content=b'{"Pod": []}')
        assert bad.status_code == 400 and "Pod" in bad.json()["error"]
        exposition = http.get("/metrics").text
    assert 'kubesage_binds_total{outcome="bound"} 1.0' in exposition
    assert 'kubesage_errors_total{component="filter",kind="bad_request"} 1.0' in exposition
    assert "kubesage_cluster_nodes 40.0" in exposition


def test_after_sigterm_serve_answers_new_connections_for_its_shutdown_delay() -> None:
    """Kubernetes takes the pod out of its Service while it sends SIGTERM: calls that
    still arrive in the next seconds are answered, then the process exits 0."""
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [*SERVE, "--host", "127.0.0.1", "--port", "0", "--embedded", "--nodes", "4",
             "--shutdown-delay-s", "3"],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{_port(process, log)}"
            process.send_signal(signal.SIGTERM)
            wait_until(
                lambda: any(line.get("event") == "draining" for line in _lines(log)),
                30,
                "the draining log line",
            )
            with httpx.Client(base_url=url) as fresh:  # a new connection, after SIGTERM
                assert fresh.get("/healthz").status_code == 200
            assert process.wait(timeout=30) == 0, _tail(log)
        finally:
            if process.poll() is None:
                process.kill()
        assert any(line.get("event") == "stopped" for line in _lines(log))


def test_serve_uses_the_api_server_given_a_kubeconfig(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.add_node(v1_node("gpu-a", rack="r1"))
        api.add_node(v1_node("gpu-b", gpus=2, rack="r2"))
        pod = api.add_pod(training_pod("trainer-0", gpus="4"))
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api.kubeconfig_dict()))
        with serving("--kubeconfig", str(kubeconfig)) as url, httpx.Client(base_url=url) as http:
            wait_until(lambda: http.get("/healthz").status_code == 200, 60, "the state to sync")
            assert http.get("/healthz").json()["detail"] == "live cluster, 2 nodes"
            body = orjson.dumps({"Pod": pod, "NodeNames": ["gpu-a", "gpu-b"]})
            result = http.post("/scheduler/filter", content=body).json()
            assert result["NodeNames"] == ["gpu-a"]
            assert result["FailedAndUnresolvableNodes"] == {
                "gpu-b": "kubesage: fewer than 4 GPUs on the node"
            }
            metadata = pod["metadata"]
            binding = {
                "PodName": metadata["name"],
                "PodNamespace": metadata["namespace"],
                "PodUID": metadata["uid"],
                "Node": "gpu-a",
            }
            assert http.post("/scheduler/bind", content=orjson.dumps(binding)).json() == {
                "Error": ""
            }
        bound = api.pod(metadata["namespace"], metadata["name"])
    assert bound["spec"]["nodeName"] == "gpu-a"
    assert bound["metadata"]["annotations"]["kubesage.io/gpu-indices"] == "0,1,2,3"


def test_bad_options_exit_2_with_a_message(tmp_path: Path) -> None:
    cases = [
        (["--tls-cert", str(tmp_path / "cert.pem")], "--tls-cert and --tls-key"),
        (["--kubeconfig", str(tmp_path / "missing")], "kubeconfig file does not exist"),
        (["--embedded", "--policy", "nope"], "unknown policy 'nope'"),
        (["--embedded", "--scheduler-name", "kubesage"], "--scheduler-name needs a live"),
        (["--embedded", "--log-level", "loud"], "unknown --log-level 'loud'"),
        (["--embedded", "--fill", "1.5"], "--fill must be in [0, 1)"),
    ]
    for options, message in cases:
        result = subprocess.run(
            [*SERVE, "--port", "0", *options],
            capture_output=True,
            text=True,
            timeout=STARTUP_S,
        )
        assert result.returncode == 2, (options, result.stderr)
        assert message in result.stderr, (options, result.stderr)


def test_embedded_only_options_are_refused_on_a_live_cluster(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api.kubeconfig_dict()))
        cases = [
            (["--nodes", "40", "--fill", "0.5"], "--nodes, --fill only apply to the embedded"),
            (["--policies-dir", str(tmp_path)], "--policies-dir only applies to the embedded"),
            (["--arrivals-per-s", "2"], "--arrivals-per-s only applies to the embedded"),
            (["--fill", "0"], "--fill only applies to the embedded"),  # its default, given
        ]
        for options, message in cases:
            result = subprocess.run(
                [*SERVE, "--port", "0", "--kubeconfig", str(kubeconfig), *options],
                capture_output=True,
                text=True,
                timeout=STARTUP_S,
            )
            assert result.returncode == 2, (options, result.stderr)
            assert message in result.stderr, (options, result.stderr)
            assert "live cluster of the kubeconfig" in result.stderr


def test_scheduler_name_runs_the_secondary_scheduler_under_a_lease(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.add_node(v1_node("gpu-a"))
        pod = v1_pod(
            "worker-0",
            containers=[v1_container(requests={"cpu": "1", "memory": "1Gi"})],
            scheduler_name="kubesage",
        )
        api.add_pod(pod)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api.kubeconfig_dict()))
        with serving(
            "--kubeconfig",
            str(kubeconfig),
            "--scheduler-name",
            "kubesage",
            env={"POD_NAMESPACE": "kubesage-system", "POD_NAME": "kubesage-0"},
        ):
            wait_until(
                lambda: api.pod("ml", "worker-0")["spec"].get("nodeName") == "gpu-a",
                60,
                "the secondary scheduler to bind the pod",
            )
            lease = api.lease("kubesage-system", "kubesage-kubesage")
        # SIGTERM: the leader steps down and releases the Lease before the process ends.
        released = api.lease("kubesage-system", "kubesage-kubesage")
    assert lease["spec"]["holderIdentity"] == "kubesage-0"
    assert released["spec"]["holderIdentity"] == ""


def test_serves_https_with_the_given_certificate(tmp_path: Path) -> None:
    from kubesage.core.k8s.tls import bootstrap

    bundle = bootstrap("kubesage", "kubesage-system", extra_names=["127.0.0.1"])
    directory = bundle.write(tmp_path / "tls")
    options = ["--embedded", "--nodes", "10", "--tls-cert", str(directory / "tls.crt")]
    options += ["--tls-key", str(directory / "tls.key")]
    with serving(*options) as url:
        https = url.replace("http://", "https://")
        trust = ssl.create_default_context(cafile=str(directory / "ca.crt"))
        with httpx.Client(base_url=https, verify=trust) as client:
            assert client.get("/healthz").status_code == 200
