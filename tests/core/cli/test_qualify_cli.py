"""``kubesage qualify`` end to end, as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubesage.core.traces import write_pods
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from tests.core.cli.test_simulate_cli import kubesage


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    rows = ["sn,cpu_milli,memory_mib,gpu,model"]
    for node in synthetic_cluster(24, seed=3):
        rows.append(
            f"{node.name},{node.cpu_milli},{node.memory_mib},{node.gpu_count},"
            f"{node.gpu_model or ''}"
        )
    nodes.write_text("\n".join(rows) + "\n")
    write_pods(synthetic_workload(300, seed=3), pods)
    return nodes, pods


def test_json_is_one_object_with_the_verdict_and_its_evidence(
    tmp_path: Path, trace: tuple[Path, Path]
) -> None:
    nodes, pods = trace
    done = kubesage(
        "qualify", "--nodes", str(nodes), "--pods", str(pods), "--candidate", "bestfit",
        "--runs", "3", "--jobs", "2", "--format", "json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["candidate"] == "bestfit" and document["baseline"] == "fgd"
    assert len(document["gains"]) == len(document["seeds"]) == 3
    assert document["mean_gain"] == pytest.approx(sum(document["gains"]) / 3, abs=2e-3)
    assert document["chosen"] == ("bestfit" if document["lower_bound"] > 0 else "fgd")
    assert document["qualified"] is (document["chosen"] == "bestfit")


def test_the_table_says_which_policy_to_serve(tmp_path: Path, trace: tuple[Path, Path]) -> None:
    nodes, pods = trace
    done = kubesage(
        "qualify", "--nodes", str(nodes), "--pods", str(pods), "--candidate", "fgd",
        "--baseline", "bestfit", "--runs", "2", "--jobs", "1", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "mean gain" in text
    assert "serve with --policy fgd" in text or "keep --policy bestfit" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--candidate", "nope"], "unknown policy 'nope'"),
        (["--candidate", "fgd"], "--candidate and --baseline are both 'fgd'"),
        (["--pods", "missing.csv"], "missing.csv: no such file"),
        (["--z", "1e400", "--pods", "missing.csv"], "--z must be a finite number >= 0, got inf"),
        (
            ["--candidate", "bestfit", "--model", "nope.bin"],
            "--model is the ppo policy's model file; neither bestfit nor fgd reads it",
        ),
    ],
)
def test_bad_input_is_a_clear_error_with_exit_code_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = kubesage("qualify", "--runs", "2", *args, cwd=tmp_path)
    assert done.returncode == 2
    assert message in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr
