"""Launch plans: validated Kubernetes manifests, torchrun lines, and the CLI."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kubesage.adapters.gpu_training.launcher import (
    NodeShare,
    kubernetes_manifests,
    torchrun_commands,
    torchrun_program,
)
from kubesage.core.cli.main import app
from kubesage.core.errors import InputError
from kubesage.core.k8s.node_eligibility import on_nodes

SHARES = [NodeShare("node-a", 8, tuple(range(8))), NodeShare("node-b", 4, (0, 2, 4, 6))]


def test_manifests_pin_nodes_and_set_the_rendezvous() -> None:
    manifests = kubernetes_manifests("llm", SHARES, ["python", "train.py"], image="img:1")
    assert [m["kind"] for m in manifests] == ["Service", "Job", "Job"]
    service, first, second = manifests
    assert service["spec"]["clusterIP"] == "None"
    for rank, job in enumerate((first, second)):
        pod = job["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["NODE_RANK"] == str(rank) and env["NNODES"] == "2"
        assert env["MASTER_ADDR"] == "llm-0.llm-rdzv.default.svc"
        # by the node's name: its kubernetes.io/hostname label may differ from it
        assert pod["affinity"] == on_nodes([SHARES[rank].node]) and "nodeSelector" not in pod
        assert container["resources"]["limits"] == {"nvidia.com/gpu": str(SHARES[rank].gpus)}
        assert container["command"][-3:] == ["--no-python", "python", "train.py"]
    assert first["metadata"]["annotations"]["kubesage.io/gpu-indices"] == "0,1,2,3,4,5,6,7"


def test_mig_jobs_ask_for_the_mig_resource() -> None:
    manifests = kubernetes_manifests(
        "small", [NodeShare("n", 1)], ["python", "t.py"], image="i", mig_profile="3g.40gb"
    )
    limits = manifests[1]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-3g.40gb": "1"}
    with pytest.raises(InputError, match="one MIG slice"):
        kubernetes_manifests("x", [NodeShare("n", 2)], ["t"], image="i", mig_profile="3g.40gb")
    # A resource name is a DNS subdomain: the device plugin writes "+me" as ".me".
    media = kubernetes_manifests(
        "small", [NodeShare("n", 1)], ["t"], image="i", mig_profile="1g.10gb+me"
    )
    limits = media[1]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.10gb.me": "1"}
    with pytest.raises(InputError, match="'bogus profile' is not a MIG profile name"):
        kubernetes_manifests(
            "x", [NodeShare("n", 1)], ["t"], image="i", mig_profile="bogus profile"
        )


@pytest.mark.parametrize(
    ("command", "program"),
    [
        (["train.py", "--lr", "1"], ["train.py", "--lr", "1"]),  # torchrun's own Python
        (["python", "train.py"], ["--no-python", "python", "train.py"]),
        (["python3", "-m", "pkg.train"], ["--no-python", "python3", "-m", "pkg.train"]),
        (["./run.sh"], ["--no-python", "./run.sh"]),
        (["--max-restarts=3", "train.py"], ["--max-restarts=3", "train.py"]),  # torchrun's
    ],
)
def test_the_command_is_what_torchrun_runs_on_each_rank(
    command: list[str], program: list[str]
) -> None:
    assert torchrun_program(command) == program
    with pytest.raises(InputError, match="the training command is empty"):
        torchrun_program([])


def test_a_torchrun_line_runs_the_users_python_command_on_every_rank(tmp_path: Path) -> None:
    """The line as printed, run by the real torchrun on this machine (two CPU ranks):
    ``-- python script.py`` had become ``python -u python script.py`` and failed."""
    script = tmp_path / "ranks.py"
    script.write_text(
        "import os, pathlib, sys\n"
        "folder = pathlib.Path(sys.argv[1])\n"
        "(folder / f\"rank-{os.environ['RANK']}\").write_text(os.environ['WORLD_SIZE'])\n"
    )
    (line,) = torchrun_commands(
        [NodeShare("localhost", 2)],
        [sys.executable, str(script), str(tmp_path)],
        master_addr="127.0.0.1",
    )
    argv = shlex.split(line)
    with socket.socket() as probe:  # a free port, not the default 29500 another run may hold
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [f"--master-port={port}" if a.startswith("--master-port=") else a for a in argv]
    argv[0] = str(Path(sys.executable).with_name("torchrun"))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    ranks = {path.name: path.read_text() for path in tmp_path.glob("rank-*")}
    assert ranks == {"rank-0": "2", "rank-1": "2"}, done.stderr[-2000:]


@pytest.mark.parametrize("name", ["Train", "a" * 60, "under_score", "-x", "1job"])
def test_bad_job_names_are_refused(name: str) -> None:
    with pytest.raises(InputError, match="DNS label"):
        kubernetes_manifests(name, SHARES, ["t"], image="i")


def test_torchrun_lines_follow_rank_order() -> None:
    lines = torchrun_commands(SHARES, ["python", "train.py", "--lr", "3e-4"], master_addr="node-a")
    assert lines[1] == (
        "env CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,2,4,6 "
        "torchrun --nnodes=2 --nproc-per-node=4 --node-rank=1 "
        "--master-addr=node-a --master-port=29500 --no-python python train.py --lr 3e-4"
    )
    unchosen = torchrun_commands([NodeShare("n", 2)], ["t.py"], master_addr="n")
    assert unchosen == [
        "torchrun --nnodes=1 --nproc-per-node=2 --node-rank=0 --master-addr=n "
        "--master-port=29500 t.py"
    ]
    with pytest.raises(InputError, match="the placement has no nodes"):
        torchrun_commands([], ["t"], master_addr="n")


def test_cli_torchrun_runs_on_the_chosen_gpus_in_ring_order() -> None:
    args = ["gpu", "launch", "--gpus", "4", "--dry-run", "--target", "torchrun", "--", "t"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    chosen = next(line for line in result.stderr.splitlines() if "node rank 0" in line)
    ring = chosen.split("GPUs [")[1].rstrip("]").replace(" ", "")
    assert result.stdout.startswith(
        f"env CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={ring} torchrun "
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: NodeShare("n", 0), "node n: gpus must be at least 1, got 0"),
        (lambda: NodeShare("n", 2, (0,)), "gpus is 2 but gpu_indices has 1"),
        (
            lambda: kubernetes_manifests("j", [NodeShare("Node_1", 1)], ["t"], image="i"),
            "node name 'Node_1' is not a Kubernetes node name",
        ),
        (
            lambda: kubernetes_manifests("j", SHARES, ["t"], image="i", namespace="Bad_NS"),
            "namespace 'Bad_NS' must be a DNS label",
        ),
    ],
)
def test_launch_inputs_are_checked_and_named(call: Callable[[], object], message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        call()


def test_cli_launch_dry_run_explains_and_prints_valid_yaml() -> None:
    args = ["gpu", "launch", "--gpus", "12", "--dry-run", "--", "python", "t.py"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "plan: 2 nodes in 1 rack(s)" in result.stderr
    documents = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in documents] == ["Service", "Job", "Job"]


def test_cli_launch_into_a_namespace_with_the_ring_order_on_the_pods() -> None:
    args = ["gpu", "launch", "--gpus", "12", "--namespace", "ml", "--", "python", "t.py"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "warning: no --topology: the plan is on the shipped example" in result.stderr
    documents = list(yaml.safe_load_all(result.stdout))
    assert {d["metadata"]["namespace"] for d in documents} == {"ml"}
    for job in documents[1:]:
        template = job["spec"]["template"]
        env = {e["name"]: e["value"] for e in template["spec"]["containers"][0]["env"]}
        assert env["MASTER_ADDR"] == "train-0.train-rdzv.ml.svc"
        annotation = template["metadata"]["annotations"]["kubesage.io/gpu-indices"]
        assert annotation == job["metadata"]["annotations"]["kubesage.io/gpu-indices"] != ""


def test_cli_torchrun_lines_refuse_the_options_only_manifests_use() -> None:
    args = ["gpu", "launch", "--gpus", "4", "--target", "torchrun", "--image", "x", "-n", "ml"]
    result = CliRunner().invoke(app, [*args, "--", "t.py"])
    assert result.exit_code == 2
    assert "--image, --namespace only apply to --target kubernetes" in " ".join(
        result.output.split()
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "4"], "give the training command after --"),
        (["--gpus", "2", "--mig", "3g.40gb", "--", "t"], "--gpus 1 with --mig"),
        (["--gpus", "1", "--mig", "9g.90gb", "--", "t"], "no MIG profile '9g.90gb'"),
        (
            ["--gpus", "1", "--mig", "3g.40gb", "--target", "torchrun", "--", "t"],
            "--mig needs --target kubernetes",
        ),
        (["--gpus", "4096", "--", "t"], "do not fit"),
    ],
)
def test_cli_launch_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["gpu", "launch", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


MIXED = """\
apiVersion: kubesage.io/v1alpha1
kind: Topology
spec:
  node_templates:
    h100: {gpu_model: H100-80GB, gpus: 8, sockets: 2, gpus_per_switch: 2, pcie_generation: 5,
           nvlink: {topology: nvswitch, generation: 4, links_per_gpu: 18},
           nic_gbps_per_switch: 400}
    a100: {gpu_model: A100-40GB, gpus: 4, sockets: 1, gpus_per_switch: 2, pcie_generation: 4,
           nic_gbps_per_switch: 100}
  zones:
    - {name: zone-a, uplink_gbps: 800}
  racks:
    - {name: rack-1, zone: zone-a, uplink_gbps: 800, template: h100, nodes: 1}
    - {name: rack-2, zone: zone-a, uplink_gbps: 800, template: a100, nodes: 1}
"""


@pytest.mark.parametrize(
    ("profile", "node"), [("3g.40gb", "rack-1-node-00"), ("3g.20gb", "rack-2-node-00")]
)
def test_a_mig_job_lands_only_on_a_model_with_its_profile(
    tmp_path: Path, profile: str, node: str
) -> None:
    topology = tmp_path / "mixed.yaml"
    topology.write_text(MIXED)
    args = ["gpu", "launch", "--gpus", "1", "--mig", profile, "--topology", str(topology)]
    args += ["--devices", "device-plugin", "--", "python", "t.py"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    job = list(yaml.safe_load_all(result.stdout))[1]
    assert job["spec"]["template"]["spec"]["affinity"] == on_nodes([node])


def test_a_mig_profile_no_node_has_is_refused(tmp_path: Path) -> None:
    topology = tmp_path / "mixed.yaml"
    topology.write_text(MIXED)
    args = ["gpu", "launch", "--gpus", "1", "--mig", "1g.12gb", "--topology", str(topology)]
    result = CliRunner().invoke(app, [*args, "--", "t"])
    assert result.exit_code == 2
    assert "no node in mixed.yaml has a GPU model with MIG profile '1g.12gb'" in " ".join(
        result.output.split()
    )


def test_a_bad_target_is_refused_before_any_plan() -> None:
    args = ["gpu", "launch", "--gpus", "4", "--dry-run", "--target", "ray", "--", "t"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "--target must be kubernetes or torchrun, got 'ray'" in result.output
    assert "plan:" not in result.output
