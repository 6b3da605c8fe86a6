"""The numpy actor a decision runs computes the PyTorch network's logits."""

from __future__ import annotations

import numpy as np
import torch

from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.rl.decision_actor import DecisionActor
from kubesage.core.rl.features import observe
from kubesage.core.rl.network import MASKED, PlacementNetwork
from kubesage.core.rl.persistence import load_network
from kubesage.core.rl.policy import default_model
from kubesage.core.state import ClusterState
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from tests.core.rl.test_ppo import random_inputs, trained_like_network

TOLERANCE = 1e-4
"""Logits are float32 through 64-wide layers: kernels may differ in their last bits."""


def torch_logits(network: PlacementNetwork, *inputs: torch.Tensor) -> np.ndarray:
    with torch.inference_mode():
        return network.logits(*inputs)[0].numpy()


def test_logits_match_the_network_for_every_number_of_real_candidates() -> None:
    network = trained_like_network(3)
    actor = DecisionActor.of(network)
    for real in (1, 2, 17, 64):
        candidates, mask, request, global_raw = random_inputs(real, real=real)
        # A best-scored candidate beside others, so the prior is exercised both ways.
        candidates[0, 1:real, 1] = 0.25
        candidates[0, 0, 1] = 0.0
        expected = torch_logits(network, candidates, mask, request, global_raw)
        got = actor.logits(
            candidates[0].numpy(), mask[0].numpy(), request[0].numpy(), global_raw[0].numpy()
        )
        assert got.dtype == np.float32 and got.shape == expected.shape
        np.testing.assert_allclose(got[:real], expected[:real], atol=TOLERANCE, rtol=0)
        assert (got[real:] == MASKED).all() and (expected[real:] == MASKED).all()


def test_the_shipped_models_decisions_on_a_replay_are_the_networks() -> None:
    network, _ = load_network(default_model())
    actor = DecisionActor.of(network)
    nodes = synthetic_cluster(120, seed=11)
    pods = synthetic_workload(900, seed=12)
    policy = make_policy("ppo", PolicyContext(seed=3, workload=pods))
    state = ClusterState(nodes)
    compared = 0
    for pod in pods:
        observation = observe(state, pod, policy.fgd)  # type: ignore[attr-defined]
        if observation.mask.any():
            inputs = (
                torch.as_tensor(observation.candidates)[None],
                torch.as_tensor(observation.mask)[None],
                torch.as_tensor(observation.request)[None],
                torch.as_tensor(observation.global_raw)[None],
            )
            expected = torch_logits(network, *inputs)
            real = observation.mask
            got = actor.logits(
                observation.candidates, real, observation.request, observation.global_raw
            )
            np.testing.assert_allclose(got[real], expected[real], atol=TOLERANCE, rtol=0)
            assert np.argmax(got) == np.argmax(expected)
            compared += 1
        decision = policy.decide(state, pod)
        if decision.placement is not None:
            state.allocate(pod, decision.placement)
    assert compared > 300
