"""``kubesage gpu launch --kubeconfig``: the plan takes only the GPUs free on the cluster
(the fake API server, through the real kubernetes client)."""

from __future__ import annotations

from typing import Any

import yaml
from typer.testing import CliRunner

from kubesage.core.annotations import GPU_INDICES_ANNOTATION, MIG_START_ANNOTATION
from kubesage.core.cli.main import app
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer

FIRST, SECOND = "rack-a1-node-00", "rack-a1-node-01"
"""Two nodes of the shipped dgx-h100-pod topology (16 nodes of 8 GPUs)."""


def launch(fake: FakeApiServer, gpus: int, *options: str) -> Any:
    cluster = ["--kubeconfig", str(fake.kubeconfig), "--devices", "device-plugin"]
    return CliRunner().invoke(
        app,
        [
            "gpu",
            "launch",
            "--gpus",
            str(gpus),
            *options,
            "--topology",
            "dgx-h100-pod",
            *cluster,
            "--",
            "t.py",
        ],
    )


def gpu_indices(stdout: str) -> dict[str, str]:
    """Node → the GPUs its Job was given (the annotation, in ring order)."""
    jobs = [d for d in yaml.safe_load_all(stdout) if d["kind"] == "Job"]
    return {
        job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]: job["metadata"]["annotations"][
            GPU_INDICES_ANNOTATION
        ]
        for job in jobs
    }


def busy_cluster(fake: FakeApiServer) -> None:
    """FIRST runs a pod on six of its GPUs; SECOND is cordoned; the rest are missing."""
    fake.add_node(v1_node(FIRST))
    cordoned = v1_node(SECOND)
    cordoned["spec"]["unschedulable"] = True
    fake.add_node(cordoned)
    pod = v1_pod("trainer-old", containers=[v1_container(limits={"nvidia.com/gpu": "6"})])
    pod["spec"]["nodeName"] = FIRST
    pod["metadata"]["annotations"] = {GPU_INDICES_ANNOTATION: "0,1,2,3,4,5"}
    pod["status"] = {"phase": "Running"}
    fake.add_pod(pod)


def test_the_plan_takes_only_the_gpus_free_on_the_cluster() -> None:
    with FakeApiServer(dra=False) as fake:
        busy_cluster(fake)
        placed = launch(fake, 2)
        too_many = launch(fake, 4)
    assert placed.exit_code == 0, placed.output
    assert gpu_indices(placed.stdout) == {FIRST: "6,7"}
    assert "14 topology node(s) are not in the cluster" in placed.stderr
    assert f"1 node(s) take no trainer pods (cordoned or tainted): {SECOND}" in placed.stderr
    assert "live cluster: 2 of the topology's 128 GPUs free" in placed.stderr
    assert too_many.exit_code == 2
    message = " ".join(too_many.output.replace("│", " ").split())
    assert "4 GPUs do not fit in dgx-h100-pod.yaml's GPUs free on the cluster (2)" in message


def test_a_topology_that_is_not_the_clusters_is_refused() -> None:
    with FakeApiServer(dra=False) as fake:
        fake.add_node(v1_node("gpu-node-7"))
        done = launch(fake, 2)
    assert done.exit_code == 2
    message = " ".join(done.output.replace("│", " ").split())
    assert "the topology shares no node with the cluster" in message
    assert "cluster: gpu-node-7" in message


def test_a_mig_launch_takes_a_gpu_with_a_free_slot_of_its_profile() -> None:
    """FIRST's GPUs 0-6 each run a 7g.80gb instance (the whole GPU) and GPU 7 is free:
    a 3g.40gb launch goes to GPU 7; once GPU 7 runs one too, a second still fits there,
    and a third does not fit anywhere."""
    with FakeApiServer(dra=False) as fake:
        fake.add_node(v1_node(FIRST, mig={"7g.80gb": 7, "3g.40gb": 2}))

        def running(name: str, profile: str, gpu: int, start: int) -> None:
            requests = {"cpu": "1", "memory": "1Gi", f"nvidia.com/mig-{profile}": "1"}
            pod = v1_pod(
                name,
                containers=[v1_container(requests=requests)],
                annotations={GPU_INDICES_ANNOTATION: str(gpu), MIG_START_ANNOTATION: str(start)},
            )
            pod["spec"]["nodeName"] = FIRST
            pod["status"]["phase"] = "Running"
            fake.add_pod(pod)

        for gpu in range(7):
            running(f"whole-{gpu}", "7g.80gb", gpu, 0)
        first = launch(fake, 1, "--mig", "3g.40gb")
        running("half-0", "3g.40gb", 7, 0)
        second = launch(fake, 1, "--mig", "3g.40gb")
        running("half-1", "3g.40gb", 7, 4)
        third = launch(fake, 1, "--mig", "3g.40gb")
    assert first.exit_code == 0, first.output
    assert gpu_indices(first.stdout) == {FIRST: "7"}
    assert "live cluster: 1 of the topology's 128 GPUs can start a 3g.40gb instance" in (
        first.stderr
    )
    assert second.exit_code == 0, second.output
    assert gpu_indices(second.stdout) == {FIRST: "7"}
    assert third.exit_code == 2
    message = " ".join(third.output.replace("│", " ").split())
    assert "able to start a 3g.40gb instance on the cluster (0)" in message
