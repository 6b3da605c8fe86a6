"""A PPO model whose metadata header is not the JSON objects it should be is refused with
a ModelError naming the file and the header field, and the ``ppo`` policy falls back to
FGD on it instead of crashing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from kubesage.core.errors import ModelError
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.rl.network import PlacementNetwork
from kubesage.core.rl.persistence import load_network, save_network
from kubesage.core.state import ClusterState
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload

NODES = synthetic_cluster(20, seed=1)
PODS = synthetic_workload(60, seed=2)

BAD_HEADERS = {
    "schema not JSON": ("schema", "{not json", "metadata 'schema' is not JSON"),
    "schema a JSON list": ("schema", "[1, 2]", "metadata 'schema' is not a JSON object"),
    "schema a JSON string": (
        "schema",
        '"kubesage-ppo/2"',
        "metadata 'schema' is not a JSON object",
    ),
    "info not JSON": ("info", "oops", "metadata 'info' is not JSON"),
    "info a JSON number": ("info", "3", "metadata 'info' is not a JSON object"),
    "schema nested too deep": (
        "schema",
        "[" * 100_000 + "]" * 100_000,
        "metadata 'schema' is not JSON",
    ),
}


def with_header(tmp_path: Path, key: str, value: str) -> Path:
    """A model that loads but for ``key`` of its metadata, set to ``value``."""
    good = tmp_path / "good.safetensors"
    save_network(PlacementNetwork(), good)
    with safe_open(str(good), framework="pt") as handle:
        metadata = dict(handle.metadata() or {})
    bad = tmp_path / "bad.safetensors"
    save_file(load_file(str(good)), str(bad), metadata={**metadata, key: value})
    return bad


@pytest.mark.parametrize("case", list(BAD_HEADERS))
def test_a_bad_header_is_a_model_error_naming_the_file_and_field(tmp_path: Path, case: str) -> None:
    key, value, message = BAD_HEADERS[case]
    path = with_header(tmp_path, key, value)
    _, info = load_network(tmp_path / "good.safetensors")  # the file it was made from loads
    assert info == {}
    with pytest.raises(ModelError, match=rf"bad\.safetensors: {message}"):
        load_network(path)


@pytest.mark.parametrize("case", ["schema not JSON", "schema a JSON list", "info not JSON"])
def test_the_policy_falls_back_to_fgd_on_a_bad_header(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    key, value, message = BAD_HEADERS[case]
    path = with_header(tmp_path, key, value)
    with caplog.at_level(logging.WARNING):
        policy = make_policy("ppo", PolicyContext(seed=3, workload=PODS, model=path))
    assert message in caplog.text
    fgd = make_policy("fgd", PolicyContext(seed=3, workload=PODS))
    state = ClusterState(NODES)
    ours, theirs = policy.decide(state, PODS[0]), fgd.decide(state, PODS[0])
    assert ours.placement == theirs.placement and ours.policy == "ppo"
    assert ours.explanation.startswith("fallback to FGD (") and message in ours.explanation
