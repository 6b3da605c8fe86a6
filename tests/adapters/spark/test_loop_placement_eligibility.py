"""``spark-placement`` puts no executor on a node its spec rules out (cordoned, tainted
against its tolerations, outside its nodeSelector or required node affinity:
``PodInfo.eligible_nodes``), so its plans are not refused by the bind's node check."""

from __future__ import annotations

import dataclasses

import pytest

from kubesage.adapters.spark.loop_placement import SparkPlacementReconciler
from kubesage.core.state import ClusterState
from kubesage.core.topology.examples import example_topology
from kubesage.core.topology.graph import DRTG
from tests.adapters.spark.test_loop_placement import binds, executors, only_plan, view


@pytest.fixture(scope="module")
def cpu_racks() -> DRTG:
    """The shipped example: 4 racks of 10 nodes (64 cores, 512 GiB), 2 zones."""
    return DRTG.from_yaml(example_topology("cpu-racks"))


def test_executors_go_only_where_their_node_constraints_let_them(cpu_racks: DRTG) -> None:
    state = ClusterState(cpu_racks.node_specs())
    free = SparkPlacementReconciler().reconcile(view(state, executors(8), cpu_racks))
    first_choice = {bind.placement.node for bind in binds(only_plan(free))}
    allowed = frozenset(cpu_racks.node_names) - first_choice  # e.g. those nodes cordoned
    constrained = [dataclasses.replace(pod, eligible_nodes=allowed) for pod in executors(8)]
    answer = SparkPlacementReconciler().reconcile(view(state, constrained, cpu_racks))
    nodes = {bind.placement.node for bind in binds(only_plan(answer))}
    assert nodes and nodes <= allowed


def test_executors_no_node_may_take_get_a_note_and_no_plan(cpu_racks: DRTG) -> None:
    state = ClusterState(cpu_racks.node_specs())
    nowhere = [dataclasses.replace(pod, eligible_nodes=frozenset()) for pod in executors(4)]
    answer = SparkPlacementReconciler().reconcile(view(state, nowhere, cpu_racks))
    assert answer.actions == []
    assert any("no node its executors may use has room" in note for note in answer.notes)
