"""Choosing among trained models by replay: the learned policy with model files that
decide as FGD does, and as it does not, on a small synthetic cluster."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch

from kubesage.core.errors import InputError
from kubesage.core.rl.network import PlacementNetwork
from kubesage.core.rl.persistence import save_network
from kubesage.core.sim.model_selection import Workload, select_model
from kubesage.core.sim.qualification import qualification_seeds, qualify
from kubesage.core.sim.runner import RunResult
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload

NODES = synthetic_cluster(24, seed=3)
WORKLOADS = [
    Workload("small", synthetic_workload(300, seed=3)),
    Workload("large", synthetic_workload(500, seed=6)),
]


def fgd_itself(path: Path) -> Path:
    """A network whose logits are all zero: with the margin, every decision is FGD's."""
    network = PlacementNetwork()
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.zero_()
    save_network(network, path)
    return path


def its_own_mind(path: Path) -> Path:
    """Large random logits and no prior on FGD's best: it leaves FGD's choice often."""
    torch.manual_seed(5)
    network = PlacementNetwork()
    with torch.no_grad():
        network.logit.weight.normal_(0.0, 5.0)
        network.best_prior.zero_()
    save_network(network, path)
    return path


def test_each_model_is_paired_with_the_baseline_on_the_same_orders(tmp_path: Path) -> None:
    same, other = fgd_itself(tmp_path / "same.safetensors"), its_own_mind(tmp_path / "o.st")
    seen: list[RunResult] = []
    selection = select_model(
        NODES, WORKLOADS, [("same", same), ("other", other)], runs=3, on_result=seen.append
    )
    # the baseline runs once per workload and order, shared by both models
    assert len(seen) == len(WORKLOADS) * 3 * 3
    assert [r.policy for r in seen].count("fgd") == len(WORKLOADS) * 3
    assert selection.workloads == ("small", "large")
    by_label = {score.label: score for score in selection.scores}
    for verdict in by_label["same"].per_workload:  # FGD against itself, order by order
        assert verdict.seeds == qualification_seeds(3) and verdict.gains == (0.0, 0.0, 0.0)
    alone = qualify(NODES, WORKLOADS[0].pods, runs=3, model=other)
    assert by_label["other"].per_workload[0].gains == alone.gains
    assert any(gain != 0.0 for gain in alone.gains)  # it does decide otherwise
    means = {
        label: statistics.fmean(statistics.fmean(q.gains) for q in score.per_workload)
        for label, score in by_label.items()
    }
    assert selection.chosen.label == max(means, key=lambda label: means[label])
    record = selection.as_dict()
    assert record["chosen"] == selection.chosen.label
    assert set(record["candidates"]) == {"same", "other"}  # type: ignore[arg-type]


def test_a_tie_keeps_the_first_listed(tmp_path: Path) -> None:
    first = fgd_itself(tmp_path / "a.safetensors")
    second = fgd_itself(tmp_path / "b.safetensors")
    selection = select_model(NODES, WORKLOADS[:1], [("a", first), ("b", second)], runs=2)
    assert selection.chosen.label == "a"
    assert selection.chosen.mean_gain == 0.0 and not selection.chosen.qualified_everywhere


def test_what_it_refuses(tmp_path: Path) -> None:
    model = fgd_itself(tmp_path / "m.safetensors")
    with pytest.raises(InputError, match="at least one candidate"):
        select_model(NODES, WORKLOADS, [])
    with pytest.raises(InputError, match="at least one workload"):
        select_model(NODES, [], [("m", model)])
    with pytest.raises(InputError, match="labels repeat: m"):
        select_model(NODES, WORKLOADS, [("m", model), ("m", model)])
    with pytest.raises(InputError, match="baseline cannot be ppo"):
        select_model(NODES, WORKLOADS, [("m", model)], baseline="ppo")
    short = Workload("short", synthetic_workload(300, seed=4))  # one order ends at 127 %
    with pytest.raises(InputError, match=r"workload short, model m: .* short of the 130 %"):
        select_model(NODES, [short], [("m", model)], runs=3)
