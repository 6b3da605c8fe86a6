"""``kubesage spark conf --kubeconfig``: executors planned on a live cluster's room now,
not on an empty topology (the fake API server stands in for the cluster; the real
kubernetes client and informer read it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.adapters.spark.test_spark_cli import kubesage
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer

RACKS = ("rack-a1", "rack-a2", "rack-b1", "rack-b2")
"""The shipped ``cpu-racks`` topology: 10 nodes of 64 cores and 512 GiB per rack."""


def cpu_node(name: str) -> dict[str, Any]:
    return v1_node(name, cpu="64", memory="512Gi", gpus=0)


def busy(name: str, node: str, cpu: str = "62") -> dict[str, Any]:
    pod = v1_pod(name, containers=[v1_container(requests={"cpu": cpu, "memory": "8Gi"})])
    pod["spec"]["nodeName"] = node
    pod["status"]["phase"] = "Running"
    return pod


def executor_nodes(out: Path) -> list[str]:
    template = yaml.safe_load((out / "executor-template.yaml").read_text())
    required = template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    # One term per node: the API server takes one value per matchFields requirement.
    return [term["matchFields"][0]["values"][0] for term in required["nodeSelectorTerms"]]


def test_conf_plans_on_the_room_the_cluster_has_now(tmp_path: Path) -> None:
    with FakeApiServer() as fake:
        for rack in RACKS[:3]:  # rack-b2 is not in this cluster
            for i in range(10):
                name = f"{rack}-node-{i:02d}"
                node = cpu_node(name)
                if rack == "rack-b1" and i == 0:
                    node["spec"]["unschedulable"] = True
                fake.add_node(node)
                if rack != "rack-b1":  # the zone-a racks are nearly full
                    fake.add_pod(busy(f"busy-{name}", name))
        args = ("conf", "--executors", "8", "--cores", "4", "--memory", "8g")
        empty = kubesage(*args, "--out", str(tmp_path / "empty"))
        live = kubesage(
            *args, "--out", str(tmp_path / "live"), "--kubeconfig", str(fake.kubeconfig)
        )
    assert empty.returncode == 0 and live.returncode == 0, live.stderr
    plan = (tmp_path / "live" / "plan.txt").read_text()
    assert "live cluster: 30 of the topology's 40 nodes, 1240 of their 1920 cores in use" in plan
    assert "10 topology node(s) are not in the cluster and take no executors: rack-b2-" in plan
    assert "1 topology node(s) take no executors (cordoned or tainted): rack-b1-node-00" in plan
    # the only rack with room takes every executor; on an empty topology the first did
    assert {name.rsplit("-node-", 1)[0] for name in executor_nodes(tmp_path / "live")} == {
        "rack-b1"
    }
    assert "rack-b1" not in {n.rsplit("-node-", 1)[0] for n in executor_nodes(tmp_path / "empty")}


def test_conf_says_when_the_cluster_has_no_room_or_no_topology_node(tmp_path: Path) -> None:
    with FakeApiServer() as fake:
        for i in range(10):
            fake.add_node(cpu_node(f"rack-a1-node-{i:02d}"))
            fake.add_pod(busy(f"busy-{i}", f"rack-a1-node-{i:02d}", cpu="63"))
        args = ("conf", "--executors", "4", "--cores", "2", "--memory", "4g")
        full = kubesage(*args, "--out", str(tmp_path), "--kubeconfig", str(fake.kubeconfig))
    with FakeApiServer() as fake:
        fake.add_node(cpu_node("elsewhere"))
        other = kubesage(*args, "--out", str(tmp_path), "--kubeconfig", str(fake.kubeconfig))
    assert full.returncode == 2
    assert "on the live cluster's room on the topology cpu-racks" in full.stderr
    assert "do not fit" in full.stderr
    assert other.returncode == 2
    assert "is in the cluster" in other.stderr and "is the topology this cluster's?" in other.stderr
