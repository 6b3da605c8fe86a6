"""Gang annotations and all-or-nothing placement on a ClusterState."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pytest

from kubesage.core.durations import parse_duration_s
from kubesage.core.k8s.gang import (
    DEFAULT_WAITING_TIME_S,
    GangAnnotationError,
    gang_of,
    names_a_gang,
    place_all,
)
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.policy.base import Policy
from kubesage.core.rl.cluster_summary import ClusterSummary, global_raw
from kubesage.core.state import ClusterState
from kubesage.core.types import Decision, PodRequest
from tests.builders import cluster, node, pod


def k8s_pod(
    annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "w-0",
            "namespace": "ml",
            "annotations": annotations or {},
            "labels": labels or {},
        }
    }


@pytest.mark.parametrize(
    ("annotations", "labels", "expected"),
    [
        ({}, {}, ("ml/w-0", 1, DEFAULT_WAITING_TIME_S, False)),
        (
            {
                "kubesage.io/gang": "job",
                "kubesage.io/gang-min-available": "4",
                "kubesage.io/gang-waiting-time": "1m30s",
            },
            {},
            ("ml/job", 4, 90.0, True),
        ),
        (
            {
                "gang.scheduling.koordinator.sh/name": "koord",
                "gang.scheduling.koordinator.sh/min-available": "2",
                "gang.scheduling.koordinator.sh/waiting-time": "100s",
            },
            {},
            ("ml/koord", 2, 100.0, True),
        ),
        (
            {"pod-group.scheduling.sigs.k8s.io/min-available": "3"},
            {"pod-group.scheduling.sigs.k8s.io": "pg"},
            ("ml/pg", 3, DEFAULT_WAITING_TIME_S, True),
        ),
    ],
)
def test_gang_annotations(
    annotations: dict[str, str], labels: dict[str, str], expected: tuple[Any, ...]
) -> None:
    gang = gang_of(k8s_pod(annotations, labels))
    assert (gang.key, gang.min_available, gang.waiting_time_s, gang.named) == expected
    assert names_a_gang(annotations, labels) is gang.named  # the cheap test agrees


def test_an_empty_gang_name_names_no_gang() -> None:
    assert not names_a_gang({"kubesage.io/gang": ""}, {"pod-group.scheduling.sigs.k8s.io": ""})
    assert not gang_of(k8s_pod({"kubesage.io/gang": ""})).named


@pytest.mark.parametrize(
    ("annotations", "match"),
    [
        ({"kubesage.io/gang": "g", "kubesage.io/gang-min-available": "0"}, "min-available"),
        ({"kubesage.io/gang": "g", "kubesage.io/gang-min-available": "two"}, "whole number"),
        # A digit to str.isdigit, not to int(): a named error, not a ValueError that
        # would end the scheduler's cycle.
        ({"kubesage.io/gang": "g", "kubesage.io/gang-min-available": "²"}, "whole number"),
        ({"kubesage.io/gang": "g", "kubesage.io/gang-waiting-time": "soon"}, "not a duration"),
        ({"kubesage.io/gang": "g", "kubesage.io/gang-waiting-time": "-5"}, "must be positive"),
    ],
)
def test_bad_gang_annotations_name_pod_and_key(annotations: dict[str, str], match: str) -> None:
    with pytest.raises(GangAnnotationError, match=match) as caught:
        gang_of(k8s_pod(annotations))
    assert "pod ml/w-0" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("2m", 120.0), ("1h30m", 5400.0), ("1.5s", 1.5), ("500ms", 0.5)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration_s(text, "here") == pytest.approx(seconds)


def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    state = cluster(node("a", gpus=4), node("b", gpus=4))
    policy = make_policy("bestfit", PolicyContext())
    members = [(pod(f"m{i}", gpus=4), None) for i in range(3)]
    copy = state.copy()
    outcome = place_all(copy, members, policy)
    assert outcome.placements is None
    assert "m2 (2 of 3 placed)" in outcome.reason
    assert int(state.gpu_free_milli.sum()) == 8_000  # the live state is untouched

    outcome = place_all(state.copy(), members[:2], policy)
    assert outcome.placements is not None
    assert sorted(p.node for p in outcome.placements) == ["a", "b"]


def test_members_only_use_their_eligible_nodes_and_hidden_nodes_get_new_stamps() -> None:
    state = cluster(node("a", gpus=8), node("b", gpus=8), node("c", gpus=8))
    workload = (pod("w1", gpus=1), pod("w2", gpus=2), pod("w3", milli=500))
    policy = make_policy("fgd", PolicyContext(workload=workload))  # caches per node stamp
    only_c = np.array([False, False, True])
    before = state.node_version.copy()
    cpu_before = state.cpu_free_milli.copy()
    outcome = place_all(state, [(pod("x", gpus=2), only_c), (pod("y", gpus=1), only_c)], policy)
    assert outcome.placements is not None
    assert {p.node for p in outcome.placements} == {"c"}
    assert (state.node_version[:2] != before[:2]).all()  # caches recompute a and b
    assert (state.cpu_free_milli[:2] == cpu_before[:2]).all()  # nothing hidden stays hidden
    # A later decision of the same shape over all nodes is not misled by scores cached
    # while a and b were hidden: it matches a fresh policy's (no cache).
    fresh = make_policy("fgd", PolicyContext(workload=workload))
    later = pod("z", gpus=2)
    assert policy.decide(state, later) == fresh.decide(state.copy(), later)


def test_a_summary_kept_across_decisions_sees_the_hidden_nodes_as_hidden() -> None:
    """ppo's cluster vector (kept up to date by node stamp) is, during each member's
    decision, the one computed afresh from the state as the member sees it."""
    state = cluster(*(node(name, gpus=8) for name in "abcd"))
    workload = (pod("w1", gpus=1), pod("w2", gpus=2), pod("w3", milli=500))
    policy = make_policy("ppo", PolicyContext(workload=workload))
    summary = ClusterSummary()
    summary.of(state)  # warmed on every node visible
    seen: list[bool] = []

    class Checked:
        name = "checked"

        def decide(self, state: ClusterState, request: PodRequest) -> Decision:
            seen.append(bool(np.array_equal(summary.of(state), global_raw(state))))
            return policy.decide(state, request)

    only_cd = np.array([False, False, True, True])
    members = [(pod("x", gpus=2), only_cd), (pod("y", gpus=1), None)]
    outcome = place_all(state, members, cast(Policy, Checked()))
    assert outcome.placements is not None
    assert seen == [True, True]
