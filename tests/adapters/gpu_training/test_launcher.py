"""Launch plans: validated Kubernetes manifests, torchrun lines, and the CLI."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from kubesage.adapters.gpu_training.launcher import (
    NodeShare,
    kubernetes_manifests,
    torchrun_commands,
)
from kubesage.core.cli.main import app
from kubesage.core.errors import InputError

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
        assert pod["nodeSelector"] == {"kubernetes.io/hostname": SHARES[rank].node}
        assert container["resources"]["limits"] == {"nvidia.com/gpu": str(SHARES[rank].gpus)}
        assert container["command"][-2:] == ["python", "train.py"]
    assert first["metadata"]["annotations"]["kubesage.io/gpu-indices"] == "0,1,2,3,4,5,6,7"


def test_mig_jobs_ask_for_the_mig_resource() -> None:
    manifests = kubernetes_manifests(
        "small", [NodeShare("n", 1)], ["python", "t.py"], image="i", mig_profile="3g.40gb"
    )
    limits = manifests[1]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-3g.40gb": "1"}
    with pytest.raises(InputError, match="one MIG slice"):
        kubernetes_manifests("x", [NodeShare("n", 2)], ["t"], image="i", mig_profile="3g.40gb")


@pytest.mark.parametrize("name", ["Train", "a" * 60, "under_score", "-x"])
def test_bad_job_names_are_refused(name: str) -> None:
    with pytest.raises(InputError, match="DNS label"):
        kubernetes_manifests(name, SHARES, ["t"], image="i")


def test_torchrun_lines_follow_rank_order() -> None:
    lines = torchrun_commands(SHARES, ["python", "train.py", "--lr", "3e-4"], master_addr="node-a")
    assert lines[1] == (
        "torchrun --nnodes=2 --nproc-per-node=4 --node-rank=1 --master-addr=node-a "
        "--master-port=29500 python train.py --lr 3e-4"
    )


def test_cli_launch_dry_run_explains_and_prints_valid_yaml() -> None:
    args = ["gpu", "launch", "--gpus", "12", "--dry-run", "--", "python", "t.py"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "plan: 2 nodes in 1 rack(s)" in result.stderr
    documents = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in documents] == ["Service", "Job", "Job"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "4"], "give the training command after --"),
        (["--gpus", "2", "--mig", "3g.40gb", "--", "t"], "--gpus 1 with --mig"),
        (["--gpus", "1", "--mig", "9g.90gb", "--", "t"], "no MIG profile '9g.90gb'"),
        (["--gpus", "4096", "--", "t"], "do not fit"),
    ],
)
def test_cli_launch_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["gpu", "launch", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
