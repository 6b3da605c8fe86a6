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
from kubesage.core.sim.model_selection import (
    Workload,
    run_baseline,
    select_model,
    selection_seeds,
)
from kubesage.core.sim.qualification import qualification_seeds
from kubesage.core.sim.runner import RunResult, RunSpec, run_many
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
    baseline = run_baseline(NODES, WORKLOADS, runs=3, on_result=seen.append)
    assert [r.policy for r in seen] == ["fgd"] * len(WORKLOADS) * 3
    assert [r.seed for r in baseline.results[0]] == list(selection_seeds(3))
    assert not set(selection_seeds(3)) & set(qualification_seeds(3))  # qualify's orders differ
    selection = select_model(
        NODES, baseline, [("same", same), ("other", other)], on_result=seen.append
    )
    assert len(seen) == len(WORKLOADS) * 3 * 3  # the baseline ran once, for both models
    assert selection.workloads == ("small", "large")
    by_label = {score.label: score for score in selection.scores}
    for verdict in by_label["same"].per_workload:  # FGD against itself, order by order
        assert verdict.seeds == selection_seeds(3) and verdict.gains == (0.0, 0.0, 0.0)
    alone = run_many(
        [RunSpec("ppo", seed, model=other) for seed in selection_seeds(3)],
        NODES,
        WORKLOADS[0].pods,
    )
    expected = [
        ours.alloc_at_130 - theirs.alloc_at_130  # type: ignore[operator]
        for ours, theirs in zip(alone, baseline.results[0], strict=True)
    ]
    assert list(by_label["other"].per_workload[0].gains) == expected
    assert any(gain != 0.0 for gain in expected)  # it does decide otherwise
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
    baseline = run_baseline(NODES, WORKLOADS[:1], runs=2)
    selection = select_model(NODES, baseline, [("a", first), ("b", second)])
    assert selection.chosen.label == "a"
    assert selection.chosen.mean_gain == 0.0 and not selection.chosen.qualified_everywhere


def test_what_it_refuses(tmp_path: Path) -> None:
    model = fgd_itself(tmp_path / "m.safetensors")
    baseline = run_baseline(NODES, WORKLOADS[:1], runs=2)
    with pytest.raises(InputError, match="at least one candidate"):
        select_model(NODES, baseline, [])
    with pytest.raises(InputError, match="labels repeat: m"):
        select_model(NODES, baseline, [("m", model), ("m", model)])
    with pytest.raises(InputError, match="at least one workload"):
        run_baseline(NODES, [])
    with pytest.raises(InputError, match="workload names repeat: small"):
        run_baseline(NODES, [WORKLOADS[0], WORKLOADS[0]])
    with pytest.raises(InputError, match="baseline cannot be ppo"):
        run_baseline(NODES, WORKLOADS, policy="ppo")
    with pytest.raises(InputError, match="at least 2 arrival orders"):
        run_baseline(NODES, WORKLOADS, runs=1)


def test_a_workload_the_baseline_cannot_judge_is_refused_by_its_runs() -> None:
    short = Workload("short", synthetic_workload(300, seed=11))  # an order ends at 128.3 %
    with pytest.raises(InputError, match=r"workload short: the arrivals of seed 20001 end"):
        run_baseline(NODES, [short], runs=4)
