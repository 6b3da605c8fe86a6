"""A PPO model file the user names must load: ``run_many`` (``simulate``/``qualify
--model``) refuses to start on one it cannot use, instead of reporting FGD's results
as ``ppo``. The fallback to FGD stays for the shipped model, and the runs it touched
say so in the notes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kubesage.core.cli.main import app
from kubesage.core.errors import ModelError
from kubesage.core.rl import policy as ppo_policy
from kubesage.core.rl.network import PlacementNetwork
from kubesage.core.rl.persistence import save_network
from kubesage.core.sim.runner import RunResult, RunSpec, run_many
from kubesage.core.sim.summary import json_document, missing_points
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload

NODES = synthetic_cluster(12, seed=1)
PODS = synthetic_workload(40, seed=2)
SIMULATION = """\
apiVersion: kubesage.io/v1alpha1
kind: Simulation
spec:
  cluster:
    synthetic: {nodes: 12, seed: 1}
  workload:
    synthetic: {pods: 40, seed: 2}
  seeds: [1]
"""


def bad_models(tmp_path: Path) -> dict[str, Path]:
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a model")
    return {"no such model file": tmp_path / "absent.safetensors", "not a safetensors": garbage}


def test_a_named_model_that_cannot_load_stops_every_run_before_it_starts(
    tmp_path: Path,
) -> None:
    for reason, path in bad_models(tmp_path).items():
        started: list[RunResult] = []
        specs = [RunSpec("fgd", 1, model=path), RunSpec("ppo", 1, model=path)]
        with pytest.raises(ModelError, match=rf"{path.name}: {reason}"):
            run_many(specs, NODES, PODS, on_result=started.append)
        assert started == []  # not even the FGD run before it


def test_simulate_with_a_named_model_that_cannot_load_fails_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "sim.yaml"
    config.write_text(SIMULATION)
    absent = tmp_path / "absent.safetensors"
    done = CliRunner().invoke(
        app,
        [
            "simulate", "--config", str(config), "--policy", "ppo", "--policy", "fgd",
            "--model", str(absent), "--jobs", "1", "--no-report", "--format", "json",
        ],
    )  # fmt: skip
    assert done.exit_code == 2, done.output
    assert "absent.safetensors: no such model file" in done.output
    assert '"runs"' not in done.output


def test_a_named_model_that_loads_is_used(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_network(PlacementNetwork(), path)
    [result] = run_many([RunSpec("ppo", 1, model=path)], NODES, PODS)
    assert result.fallbacks == 0 and result.fallback_reason == ""
    assert missing_points([result]) == []


def test_the_shipped_model_still_falls_back_and_the_notes_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absent = tmp_path / "shipped.safetensors"
    monkeypatch.setattr(ppo_policy, "default_model", lambda: absent)
    [result] = run_many([RunSpec("ppo", 7)], NODES, PODS)
    assert result.fallbacks > 0 and "shipped.safetensors: no such model file" in (
        result.fallback_reason
    )
    notes = missing_points([result])
    assert notes == [
        f"ppo, seed 7: {result.fallbacks} decision(s) fell back to FGD "
        f"({result.fallback_reason}), so its figures are FGD's for those"
    ]
    assert json.loads(json.dumps(json_document([result])))["notes"] == notes
