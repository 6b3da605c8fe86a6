"""Qualifying a candidate policy by replaying the workload's own arrival orders."""

from __future__ import annotations

import re

import pytest

from kubesage.core.errors import InputError
from kubesage.core.sim.qualification import (
    QUALIFY_SEEDS_FROM,
    judge,
    paired_gains,
    qualify,
)
from kubesage.core.sim.runner import RunResult, RunSpec, run_many
from kubesage.core.sim.summary import json_document, missing_points
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload

NODES = synthetic_cluster(24, seed=7)
WORKLOAD = synthetic_workload(300, seed=7)


def test_the_gains_are_the_paired_runs_differences_on_its_own_arrival_orders() -> None:
    verdict = qualify(NODES, WORKLOAD, candidate="bestfit", baseline="fgd", runs=3)
    assert verdict.seeds == (QUALIFY_SEEDS_FROM, QUALIFY_SEEDS_FROM + 1, QUALIFY_SEEDS_FROM + 2)
    specs = [RunSpec(p, s) for p in ("bestfit", "fgd") for s in verdict.seeds]
    results = run_many(specs, NODES, WORKLOAD)
    alloc = {(r.policy, r.seed): r.alloc_at_130 for r in results}
    expected = [alloc[("bestfit", s)] - alloc[("fgd", s)] for s in verdict.seeds]  # type: ignore[operator]
    assert verdict.gains == pytest.approx(expected)
    assert verdict.chosen == ("bestfit" if verdict.lower_bound > 0 else "fgd")


def test_a_policy_never_qualifies_against_itself() -> None:
    verdict = qualify(NODES, WORKLOAD, candidate="fgd", baseline="fgd", runs=2)
    assert verdict.gains == (0.0, 0.0)
    assert not verdict.qualified
    assert verdict.chosen == "fgd"


@pytest.mark.parametrize(
    ("gains", "z", "qualified"),
    [
        ((0.30, 0.25, 0.35, 0.28), 2.0, True),  # ahead on every order, little spread
        ((0.60, -0.20, 0.50, -0.30), 2.0, False),  # ahead on average, within the spread
        ((0.60, -0.20, 0.50, -0.30), 0.0, True),  # z = 0: any mean gain
        ((0.0, 0.0, 0.0), 0.0, False),  # level is not ahead
        ((-0.10, -0.05, -0.12), 0.0, False),
    ],
)
def test_the_candidate_must_be_ahead_beyond_the_spread_of_arrival_orders(
    gains: tuple[float, ...], z: float, qualified: bool
) -> None:
    verdict = judge("ppo", "fgd", range(len(gains)), gains, z)
    assert verdict.qualified is qualified
    assert verdict.chosen == ("ppo" if qualified else "fgd")
    record = verdict.as_dict()
    assert record["qualified"] is qualified
    assert record["lower_bound"] == pytest.approx(verdict.lower_bound, abs=1e-3)


@pytest.mark.parametrize(
    ("gains", "z", "message"),
    [
        ((0.1,), 2.0, "2+ seeds"),
        ((0.1, 0.2), -1.0, "z must be"),
        ((0.1, 0.2), float("nan"), "z must be"),
    ],
)
def test_bad_settings_are_refused(gains: tuple[float, ...], z: float, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        judge("ppo", "fgd", range(len(gains)), gains, z)


def test_too_few_orders_are_refused_before_anything_runs() -> None:
    with pytest.raises(InputError, match="at least 2 arrival orders"):
        qualify(NODES, WORKLOAD, runs=1)


def test_a_run_that_never_reaches_130_percent_is_named_with_where_it_ends() -> None:
    def result(policy: str, seed: int, alloc: float | None, end: float = 130.0) -> RunResult:
        return RunResult(policy, seed, "fgd", 80.0, alloc, None, 0, 0.0, 0.0, 10, 4, 0.1, end)

    results = [result("ppo", 1, 90.0), result("fgd", 1, 89.5), result("ppo", 2, None, 127.6)]
    results.append(result("fgd", 2, 88.0))
    with pytest.raises(
        InputError, match=re.escape("seed 2 end at 127.6 % of GPU capacity for ppo, short of")
    ):
        paired_gains(results, "ppo", "fgd")
    assert paired_gains(results[:2], "ppo", "fgd") == ((1,), (pytest.approx(0.5),))
    with pytest.raises(InputError, match="fgd has no run for seed 2"):
        paired_gains(results[:3], "ppo", "fgd")
    notes = missing_points(results)
    assert notes == [
        "ppo, seed 2: its arrivals end at 127.6 % of GPU capacity, so it has no value at "
        "130 % arrived (within ±1 point) and the means leave it out"
    ]
    assert json_document(results)["notes"] == notes
    assert "notes" not in json_document(results[:2])
    # Arrivals that went past 100 % with no event within ±1 point of it (a small
    # cluster's large steps): not "its arrivals end at".
    stepped = RunResult("fgd", 3, "fgd", None, 90.0, None, 0, 0.0, 0.0, 10, 4, 0.1, 129.8)
    assert missing_points([stepped]) == [
        "fgd, seed 3: no arrival brought the arrived workload within ±1 point of 100 % "
        "(each pod is a large step of a small cluster's capacity), so it has no value there "
        "and the means leave it out"
    ]
