"""``kubesage simulate`` end to end, as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

CONFIG = """\
apiVersion: kubesage.io/v1alpha1
kind: Simulation
spec:
  cluster:
    synthetic: {nodes: 40, seed: 1}
  workload:
    synthetic: {pods: 300, seed: 1}
  policies: [fgd, bestfit]
  seeds: [1, 2]
"""


def kubesage(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The command in a subprocess; ``env`` adds to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "kubesage.core.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "sim.yaml"
    path.write_text(CONFIG)
    return path


def test_json_output_is_exactly_one_object_with_the_documented_shape(
    tmp_path: Path, config: Path
) -> None:
    done = kubesage(
        "simulate", "--config", str(config), "--format", "json", "--jobs", "2", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert set(document) == {"runs", "summary"}
    assert [(r["policy"], r["seed"]) for r in document["runs"]] == [
        ("fgd", 1),
        ("fgd", 2),
        ("bestfit", 1),
        ("bestfit", 2),
    ]
    for run in document["runs"]:
        assert set(run) == {
            "policy",
            "seed",
            "alloc_at_100",
            "alloc_at_130",
            "frag_ratio_at_90",
            "failed_pods",
        }
        assert 0 < run["alloc_at_130"] <= 100
        assert isinstance(run["failed_pods"], int)
    assert set(document["summary"]) == {"fgd", "bestfit"}
    fgd_runs = [r["alloc_at_130"] for r in document["runs"] if r["policy"] == "fgd"]
    assert document["summary"]["fgd"]["alloc_at_130"] == pytest.approx(sum(fgd_runs) / 2, abs=1e-3)
    report = tmp_path / "kubesage-report"
    assert "<svg" in (report / "index.html").read_text()
    assert json.loads((report / "results.json").read_text())["runs"] == document["runs"]


def test_command_line_options_override_the_config(tmp_path: Path, config: Path) -> None:
    done = kubesage(
        "simulate",
        "--config",
        str(config),
        "--policy",
        "random",
        "--seeds",
        "7",
        "--format",
        "json",
        "--no-report",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert [(r["policy"], r["seed"]) for r in json.loads(done.stdout)["runs"]] == [("random", 7)]
    assert not (tmp_path / "kubesage-report").exists()


def test_openb_csv_inputs_and_table_output(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},64000,262144,{[1, 2, 4, 8][i % 4]},V100M16\n" for i in range(12))
    )
    (tmp_path / "pods.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        + "".join(f"p{i},4000,8192,1,{[250, 500, 1000][i % 3]}\n" for i in range(60))
        + "wide0,4000,8192,16,1000\nwide1,4000,8192,16,1000\n"  # no node has 16 GPUs
    )
    done = kubesage(
        "simulate",
        "--nodes",
        "nodes.csv",
        "--pods",
        "pods.csv",
        "--policy",
        "fgd",
        "--policy",
        "gpupacking",
        "--seeds",
        "1-2",
        "--report-dir",
        "out",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "fgd" in done.stdout and "gpupacking" in done.stdout and "alloc@130" in done.stdout
    assert (tmp_path / "out" / "index.html").is_file()
    said = " ".join(done.stderr.split())
    assert "warning: 2 pod(s) of pods from " in said and "pods.csv can never be placed" in said
    assert (
        "nodes.csv, not even empty (nearest miss: fewer than 16 GPUs on the node); they still "
        "count as arrived work"
    ) in said


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "--policy: unknown policy 'nope'"),
        (["--tune", "-1"], "--tune: Input should be greater than or equal to 0"),
        (["--gpu-nodes", "4", "--hours", "0.1"], "--gpu-nodes, --hours only apply with --scenario"),
        (["--seeds", "9-1"], "runs backwards"),
        (["--pods", "missing.csv"], "missing.csv: no such file"),
        (
            ["--mode", "replay", "--pods", "untimed.csv"],
            "untimed.csv:2, field 'creation_time': pod 'p0' has no creation time",
        ),
        (["--nodes", "cpu_nodes.csv"], "cpu_nodes.csv: the cluster has no GPUs"),
        (
            ["--policy", "fgd", "--model", "nope.safetensors"],
            "--model (model: in a config) is the ppo policy's model file; the policies run are fgd",
        ),
    ],
)
def test_bad_input_is_a_clear_error_with_exit_code_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "untimed.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\n"
    )
    (tmp_path / "cpu_nodes.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,0,\nn1,64000,262144,0,\n"
    )
    done = kubesage("simulate", "--no-report", "--seeds", "1", *args, cwd=tmp_path)
    assert done.returncode == 2
    assert message in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr


def test_a_report_that_cannot_be_written_is_an_error_naming_it(
    tmp_path: Path, config: Path
) -> None:
    blocked = tmp_path / "report"
    (blocked / "index.html").mkdir(parents=True)  # a folder where the page goes
    done = kubesage(
        "simulate", "--config", str(config), "--policy", "fgd", "--seeds", "1",
        "--report-dir", str(blocked), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"--report-dir {blocked}: the report could not be written" in done.stderr
    assert "index.html" in done.stderr
