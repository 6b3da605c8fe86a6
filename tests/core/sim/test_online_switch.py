"""The online switch search: the hindsight search's choices, made without the future."""

from __future__ import annotations

import pytest

from kubesage.core.errors import InputError
from kubesage.core.sim.hindsight import checkpoint_positions, default_portfolio, hindsight_search
from kubesage.core.sim.online_switch import ONLINE_POLICIES, online_switch_search
from kubesage.core.sim.protocol import fgd_arrivals
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload

CHECKPOINTS = (0.0, 60.0, 90.0, 110.0)
NODES = synthetic_cluster(24, seed=7)
WORKLOAD = synthetic_workload(300, seed=7)
CAPACITY = ClusterState(NODES).gpu_capacity_milli_total
ARRIVALS = fgd_arrivals(WORKLOAD, gpu_capacity_milli=CAPACITY, seed=7)
PORTFOLIO = {name: default_portfolio(WORKLOAD)[name] for name in ONLINE_POLICIES}


def test_with_fgd_alone_it_is_fgds_run() -> None:
    portfolio = {"fgd": PORTFOLIO["fgd"]}
    online = online_switch_search(
        NODES, ARRIVALS, WORKLOAD, seed=7, portfolio=portfolio, checkpoints_pct=CHECKPOINTS
    )
    hindsight = hindsight_search(
        NODES, ARRIVALS, seed=7, portfolio=portfolio, checkpoints_pct=CHECKPOINTS
    )
    assert online.allocation_pct == pytest.approx(hindsight.base.allocation_pct)
    assert online.policies == ("fgd",) * len(checkpoint_positions(ARRIVALS, CAPACITY, CHECKPOINTS))


def test_its_choices_never_read_the_arrivals_still_to_come() -> None:
    positions = checkpoint_positions(ARRIVALS, CAPACITY, CHECKPOINTS)
    assert len(positions) == 4
    # Another future after the third checkpoint: the same pods, reversed.
    other = [*ARRIVALS[: positions[2]], *reversed(ARRIVALS[positions[2] :])]
    first, second = (
        online_switch_search(
            NODES, arrivals, WORKLOAD, seed=7, portfolio=PORTFOLIO, checkpoints_pct=CHECKPOINTS
        )
        for arrivals in (ARRIVALS, other)
    )
    assert first.policies[:3] == second.policies[:3]
    assert first.rollouts == len(PORTFOLIO) * 2 * len(positions)
    assert 0 < first.allocation_pct <= 100


def test_checkpoints_past_the_last_arrival_leave_the_base_policys_run() -> None:
    online = online_switch_search(
        NODES, ARRIVALS, WORKLOAD, seed=7, portfolio=PORTFOLIO, checkpoints_pct=(500.0,)
    )
    alone = online_switch_search(
        NODES, ARRIVALS, WORKLOAD, seed=7, portfolio={"fgd": PORTFOLIO["fgd"]}
    )
    assert online.policies == () and online.rollouts == 0
    assert online.allocation_pct == pytest.approx(alone.allocation_pct)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"base": "k8s-default"}, "base policy 'k8s-default'"),
        ({"futures": 0}, "futures must be at least 1"),
    ],
)
def test_bad_settings_are_refused(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        online_switch_search(
            NODES,
            ARRIVALS,
            WORKLOAD,
            seed=7,
            portfolio=PORTFOLIO,
            **arguments,  # type: ignore[arg-type]
        )
