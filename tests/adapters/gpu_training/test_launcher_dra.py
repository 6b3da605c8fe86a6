"""``kubesage gpu launch --devices dra``: claim templates selecting the chosen GPUs, and
options before ``--`` parsed strictly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from kubesage.adapters.gpu_training.launcher import NodeShare, kubernetes_manifests
from kubesage.core.cli.main import app
from kubesage.core.config import API_VERSION
from kubesage.core.dra.claims import DeviceMode
from kubesage.core.dra.nodes import node_devices
from kubesage.core.k8s.validation import DRA_KUBERNETES_VERSION, validate_manifests
from kubesage.core.topology.discovery import topology_from_nodes
from kubesage.core.topology.spec import TOPOLOGY_KIND
from tests.core.k8s import v1_node
from tests.core.topology.test_discovery import k8s_node
from tests.fakes import dra_fixtures as fx
from tests.fakes.apiserver import FakeApiServer

SHARES = [NodeShare("node-a", 8, (0, 7, 6, 5, 4, 3, 2, 1)), NodeShare("node-b", 2, (6, 2))]
INDEX = 'device.attributes["gpu.nvidia.com"].index'


def exactly(template: dict[str, Any]) -> dict[str, Any]:
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    result: dict[str, Any] = request["exactly"]
    return result


def test_dra_jobs_reference_one_claim_template_per_node_rank() -> None:
    manifests = kubernetes_manifests(
        "llm", SHARES, ["python", "train.py"], image="img:1", devices=DeviceMode.dra
    )
    validate_manifests(manifests, DRA_KUBERNETES_VERSION)
    kinds = [m["kind"] for m in manifests]
    assert kinds == ["Service", "ResourceClaimTemplate", "ResourceClaimTemplate", "Job", "Job"]
    templates, jobs = manifests[1:3], manifests[3:]
    assert [t["metadata"]["name"] for t in templates] == ["llm-0-gpus", "llm-1-gpus"]
    assert exactly(templates[1]) == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 2,
        "selectors": [{"cel": {"expression": f"{INDEX} == 2 || {INDEX} == 6"}}],
    }
    assert exactly(templates[0])["count"] == 8
    for template, job in zip(templates, jobs, strict=True):
        pod = job["spec"]["template"]["spec"]
        claim = {"name": "gpus", "resourceClaimTemplateName": template["metadata"]["name"]}
        assert pod["resourceClaims"] == [claim]
        (container,) = pod["containers"]
        assert container["resources"] == {"claims": [{"name": "gpus"}]}  # no nvidia.com/gpu
    # The ring order stays on the Job (a claim selects a set).
    assert jobs[0]["metadata"]["annotations"]["kubesage.io/gpu-indices"] == "0,7,6,5,4,3,2,1"


def test_dra_selects_by_uuid_where_known() -> None:
    share = NodeShare("node-a", 2, (1, 0), ("GPU-bbb", "GPU-aaa"))
    manifests = kubernetes_manifests("x", [share], ["t"], image="i", devices=DeviceMode.dra)
    uuid = 'device.attributes["gpu.nvidia.com"].uuid'
    assert exactly(manifests[1])["selectors"] == [
        {"cel": {"expression": f'{uuid} == "GPU-aaa" || {uuid} == "GPU-bbb"'}}
    ]


def test_dra_mig_job_asks_the_mig_class_for_its_profile() -> None:
    manifests = kubernetes_manifests(
        "small",
        [NodeShare("n", 1, (3,))],
        ["python", "t.py"],
        image="i",
        mig_profile="3g.40gb",
        devices=DeviceMode.dra,
    )
    validate_manifests(manifests, DRA_KUBERNETES_VERSION)
    request = exactly(manifests[1])
    assert request["deviceClassName"] == "mig.nvidia.com" and request["count"] == 1
    assert [s["cel"]["expression"] for s in request["selectors"]] == [
        'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"',
        'device.attributes["gpu.nvidia.com"].parentIndex == 3',
    ]
    container = manifests[2]["spec"]["template"]["spec"]["containers"][0]
    assert "limits" not in container["resources"]


def launch(*args: str) -> Any:
    return CliRunner().invoke(app, ["gpu", "launch", *args])


def commands(stdout: str) -> list[list[str]]:
    jobs = [d for d in yaml.safe_load_all(stdout) if d["kind"] == "Job"]
    return [j["spec"]["template"]["spec"]["containers"][0]["command"] for j in jobs]


def test_cli_devices_dra_prints_claim_templates_and_a_clean_torchrun_line() -> None:
    result = launch("--gpus", "12", "--devices", "dra", "--dry-run", "--", "python", "train.py")
    assert result.exit_code == 0, result.output
    assert "devices: dra (--devices dra)" in result.stderr
    documents = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in documents].count("ResourceClaimTemplate") == 2
    validate_manifests(documents, DRA_KUBERNETES_VERSION)
    for command in commands(result.stdout):
        assert command[-2:] == ["python", "train.py"] and "--devices" not in command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "12", "--bogus", "dra", "--", "python", "t.py"], "No such option: --bogus"),
        (["--gpus", "12", "--devices", "gpu", "--", "t"], "'gpu' is not one of"),
        (["--gpus", "12", "python", "t.py"], "unexpected argument(s) before '--': python t.py"),
    ],
)
def test_cli_everything_before_the_separator_is_kubesages(args: list[str], message: str) -> None:
    result = launch(*args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.replace("│", " ").split())


def test_cli_everything_after_the_separator_is_the_users() -> None:
    result = launch("--gpus", "2", "--", "python", "t.py", "--devices", "dra", "--", "x")
    assert result.exit_code == 0, result.output
    assert commands(result.stdout)[0][-6:] == ["python", "t.py", "--devices", "dra", "--", "x"]


@pytest.mark.parametrize(("dra", "kind"), [(True, "ResourceClaimTemplate"), (False, None)])
def test_cli_detects_the_form_from_the_kubeconfigs_cluster(dra: bool, kind: str | None) -> None:
    with FakeApiServer(dra=dra) as fake:
        # a node of the shipped topology, its GPUs free (the plan takes only free ones)
        fake.add_node(v1_node("rack-a1-node-00"))
        if dra:
            fake.add_resource_slice(fx.dgx_h100_slice("rack-a1-node-00"))
        result = launch("--gpus", "4", "--kubeconfig", str(fake.kubeconfig), "--", "t")
    assert result.exit_code == 0, result.output
    kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout)]
    assert (kind in kinds) if kind else kinds == ["Service", "Job"]


def test_cli_selects_by_uuid_on_a_topology_discovered_from_resource_slices(
    tmp_path: Path,
) -> None:
    node = k8s_node("dgx-0", {"kubesage.io/rack": "r1"}, {"cpu": "224", "memory": "2063Gi"})
    spec = topology_from_nodes([node], devices=node_devices([fx.dgx_h100_slice("dgx-0")]))
    document = {
        "apiVersion": API_VERSION,
        "kind": TOPOLOGY_KIND,
        "spec": spec.model_dump(mode="json", exclude_none=True, exclude_defaults=True),
    }
    topology = tmp_path / "topology.yaml"
    topology.write_text(yaml.safe_dump(document), "utf-8")
    result = launch(
        "--gpus", "4", "--topology", str(topology), "--devices", "dra", "--", "python", "t.py"
    )
    assert result.exit_code == 0, result.output
    (template,) = [d for d in yaml.safe_load_all(result.stdout) if d["kind"] != "Service"][:1]
    (selector,) = exactly(template)["selectors"]
    uuids = re.findall(r'uuid == "([^"]+)"', selector["cel"]["expression"])
    assert len(uuids) == 4
    assert set(uuids) <= {fx.gpu_uuid("dgx-0", i) for i in range(8)}
