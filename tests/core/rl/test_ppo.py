"""PPO pieces: GAE, masking, equivariance, checkpoints and the FGD fallback."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from kubesage.core.errors import InputError, ModelError
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.rl.env import PlacementEnv
from kubesage.core.rl.features import CANDIDATE_FEATURES, MAX_CANDIDATES, observe
from kubesage.core.rl.network import PlacementNetwork, fit_pca
from kubesage.core.rl.persistence import load_network, save_network
from kubesage.core.rl.policy import default_model
from kubesage.core.rl.ppo import gae
from kubesage.core.sim.engine import Simulator
from kubesage.core.sim.protocol import fgd_arrivals
from kubesage.core.state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure, typical_pods
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload

NODES = synthetic_cluster(40, seed=1)
PODS = synthetic_workload(400, seed=2)


def test_gae_matches_a_hand_computed_case() -> None:
    # γ = 0.9, λ = 0.8; the episode ends after step 1, so step 1 looks no further.
    advantages, returns = gae(
        np.array([1.0, 0.0, 2.0]),
        np.array([0.5, 0.2, 0.1]),
        np.array([0.0, 1.0, 0.0]),
        0.3,
        gamma=0.9,
        lam=0.8,
    )
    # t=2: 2 + 0.9·0.3 − 0.1 = 2.17; t=1: 0 − 0.2 = −0.2; t=0: 1 + 0.9·0.2 − 0.5 = 0.68,
    # plus 0.9·0.8·(−0.2) = −0.144 → 0.536.
    np.testing.assert_allclose(advantages, [0.536, -0.2, 2.17])
    np.testing.assert_allclose(returns, [1.036, 0.0, 2.27])


def random_inputs(seed: int, real: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    candidates = torch.rand(1, MAX_CANDIDATES, len(CANDIDATE_FEATURES), generator=generator)
    candidates[0, :, CANDIDATE_FEATURES.index("rank")] = torch.arange(MAX_CANDIDATES) / 64
    mask = torch.zeros(1, MAX_CANDIDATES, dtype=torch.bool)
    mask[0, :real] = True
    candidates[~mask] = 0
    request = torch.rand(1, 5, generator=generator)
    global_raw = torch.rand(1, 256, generator=generator)
    return candidates, mask, request, global_raw


def trained_like_network(seed: int = 0) -> PlacementNetwork:
    torch.manual_seed(seed)
    network = PlacementNetwork()
    for parameter in network.parameters():
        torch.nn.init.normal_(parameter, std=0.5)
    network.set_pca(*fit_pca(np.random.default_rng(seed).random((300, 256))))
    return network


def test_padded_candidates_are_never_chosen() -> None:
    network = trained_like_network()
    candidates, mask, request, global_raw = random_inputs(1, real=5)
    logits, _ = network(candidates, mask, request, global_raw)
    draws = torch.distributions.Categorical(logits=logits).sample((5_000,))
    assert int(draws.max()) < 5
    env = PlacementEnv(NODES, [PODS])
    observation, _ = env.reset(seed=0)
    padded = int(np.flatnonzero(~observation["mask"])[0])
    with pytest.raises(InputError, match=f"action {padded} is not a candidate"):
        env.step(padded)


def test_the_candidate_scorer_is_permutation_equivariant() -> None:
    network = trained_like_network()
    candidates, mask, request, global_raw = random_inputs(2, real=10)
    logits, value = network(candidates, mask, request, global_raw)
    permutation = torch.randperm(10, generator=torch.Generator().manual_seed(3))
    order = torch.cat([permutation, torch.arange(10, MAX_CANDIDATES)])
    shuffled_logits, shuffled_value = network(
        candidates[:, order], mask[:, order], request, global_raw
    )
    torch.testing.assert_close(shuffled_logits[0], logits[0, order])
    torch.testing.assert_close(shuffled_value, value)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    network = trained_like_network(4)
    path = tmp_path / "model.safetensors"
    save_network(network, path, info={"note": "test"})
    loaded, info = load_network(path)
    inputs = random_inputs(5, real=7)
    torch.testing.assert_close(loaded(*inputs)[0], network(*inputs)[0])
    assert info == {"note": "test"}


def bad_models(tmp_path: Path) -> dict[str, Path]:
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a model")
    other = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(2)}, str(other), metadata={"schema": '{"format": "x"}'})
    nan = tmp_path / "nan.safetensors"
    network = trained_like_network()
    with torch.no_grad():
        network.logit.bias.fill_(float("nan"))
    save_network(network, nan)
    return {
        "no such model file": tmp_path / "absent.safetensors",
        "not a safetensors file": garbage,
        "feature schema differs": other,
        "non-finite weights": nan,
    }


def test_a_bad_model_falls_back_to_fgd_with_a_warning_and_a_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for reason, path in bad_models(tmp_path).items():
        with pytest.raises(ModelError, match=reason):
            load_network(path)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            policy = make_policy("ppo", PolicyContext(seed=3, workload=PODS, model=path))
        assert reason in caplog.text
        fgd = make_policy("fgd", PolicyContext(seed=3, workload=PODS))
        state = ClusterState(NODES)
        for pod in PODS[:20]:
            ours, theirs = policy.decide(state, pod), fgd.decide(state, pod)
            assert ours.placement == theirs.placement and ours.policy == "ppo"
            assert ours.explanation.startswith("fallback to FGD (") and reason in ours.explanation
            if ours.placement is not None:
                state.allocate(pod, ours.placement)
        assert policy.fallbacks == 20  # type: ignore[attr-defined]


def test_a_good_model_explains_its_choice(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_network(trained_like_network(6), path)
    policy = make_policy("ppo", PolicyContext(seed=3, workload=PODS, model=path))
    state = ClusterState(NODES)
    decision = policy.decide(state, PODS[0])
    assert decision.placement is not None and policy.fallbacks == 0  # type: ignore[attr-defined]
    assert "under ppo" in decision.explanation and "runner-up" in decision.explanation
    assert any(name in decision.explanation for name in CANDIDATE_FEATURES)


def test_candidate_zero_is_always_fgds_choice() -> None:
    nodes = synthetic_cluster(300, seed=5)  # more feasible nodes than candidates
    pods = synthetic_workload(1_500, seed=6)
    fgd = make_policy("fgd", PolicyContext(seed=9, workload=pods))
    ranker = make_policy("fgd", PolicyContext(seed=9, workload=pods))
    state = ClusterState(nodes)
    checked = 0
    for pod in pods:
        decision = fgd.decide(state, pod)
        observation = observe(state, pod, ranker)  # type: ignore[arg-type]
        if decision.placement is None:
            assert not observation.mask.any()
            continue
        assert int(observation.nodes[0]) == decision.placement.node_index
        ranks = observation.candidates[observation.mask, CANDIDATE_FEATURES.index("fgd_score")]
        assert (np.diff(ranks) <= 0).all()  # best first
        checked += 1
        state.allocate(pod, decision.placement)
    assert checked > 1_000


def test_fgds_choice_stands_unless_the_network_prefers_another_by_the_margin() -> None:
    nodes = synthetic_cluster(300, seed=5)
    pods = synthetic_workload(800, seed=6)
    fgd = make_policy("fgd", PolicyContext(seed=9, workload=pods))
    always_fgd = make_policy("ppo", PolicyContext(seed=9, workload=pods))
    always_fgd.margin = float("inf")  # type: ignore[attr-defined]
    never_fgd = make_policy("ppo", PolicyContext(seed=9, workload=pods))
    never_fgd.margin = 0.0  # type: ignore[attr-defined]
    state = ClusterState(nodes)
    differ = 0
    for pod in pods:
        expected = fgd.decide(state, pod)
        kept = always_fgd.decide(state, pod)
        assert kept.placement == expected.placement
        if kept.explanation.startswith("FGD's choice stands"):
            assert "runner-up" in kept.explanation
        differ += never_fgd.decide(state, pod).placement != expected.placement
        if expected.placement is not None:
            state.allocate(pod, expected.placement)
    assert differ > 0  # the network does leave FGD's choice: the margin is what kept it
    assert always_fgd.deferred >= differ > 0  # type: ignore[attr-defined]
    assert never_fgd.deferred == 0  # type: ignore[attr-defined]


def test_the_live_path_lifts_the_networks_choice_wherever_it_sits_among_the_names() -> None:
    # kube-scheduler names the nodes from a rotating start (not in index order) and
    # only some of them fit; the network's choice must score highest at its own place.
    nodes = synthetic_cluster(300, seed=5)  # more feasible nodes than candidates
    pods = synthetic_workload(600, seed=6)
    policy = make_policy("ppo", PolicyContext(seed=9, workload=pods))
    state = ClusterState(nodes)
    checked = 0
    for step, pod in enumerate(pods):
        decision = policy.decide(state, pod)
        if decision.placement is None:
            continue
        names = np.roll(np.arange(state.num_nodes), -37 * step)
        feasible = names[state.feasible(pod, names)]
        scores = policy.score_nodes(state, pod, feasible)
        assert feasible[int(np.argmax(scores))] == decision.placement.node_index
        state.allocate(pod, decision.placement)
        checked += 1
    assert checked > 400


def test_the_shipped_model_matches_this_versions_schema() -> None:
    # Changing a feature without retraining the shipped model fails here, not in users' runs.
    load_network(default_model())
    policy = make_policy("ppo", PolicyContext(seed=3, workload=PODS))
    decision = policy.decide(ClusterState(NODES), PODS[0])
    assert policy.fallbacks == 0 and "under ppo" in decision.explanation  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["fgd", "replay"])
def test_always_picking_candidate_zero_replays_fgd_in_the_simulator(mode: str) -> None:
    nodes = synthetic_cluster(30, seed=7)
    pods = synthetic_workload(600, seed=8, mean_interarrival_s=5.0)
    env = PlacementEnv(nodes, [pods], mode=mode)  # type: ignore[arg-type]
    env.reset(seed=0, options={"policy_seed": 11})
    done, info, total = False, {}, 0.0
    while not done:
        _, reward, done, _, info = env.step(0)
        total += reward
    fgd = make_policy("fgd", PolicyContext(seed=11, workload=pods))
    typical = typical_pods(pods)
    simulator = Simulator(nodes, fgd, lambda s: FragmentationMeasure(typical, s.gpu_models))
    if mode == "fgd":
        capacity = ClusterState(nodes).gpu_capacity_milli_total
        arrivals = fgd_arrivals(pods, gpu_capacity_milli=capacity, seed=11)
        simulator.run_arrivals(arrivals)
        assert info["arrived"] == len(arrivals)
    else:
        simulator.run_replay(pods)
        assert info["arrived"] == len(pods)
    assert info["failed"] == len(simulator.failed)
    assert info["allocation_pct"] == pytest.approx(100 * simulator.state.gpu_allocation_ratio)
    np.testing.assert_array_equal(env.state.gpu_free_milli, simulator.state.gpu_free_milli)
