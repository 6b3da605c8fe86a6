"""Node churn on the embedded cluster: added and removed nodes keep the books straight."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.k8s.actuators import embedded_actuators
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.embedded_nodes import add_nodes, remove_nodes
from kubesage.core.loop.actions import Bind, Evict, PodRef
from kubesage.core.loop.reconciler import Outcome
from kubesage.core.policy.base import PolicyContext
from kubesage.core.policy.gpu_choice import placement_on
from kubesage.core.policy.registry import make_policy
from kubesage.core.types import PodRequest
from tests.builders import node, pod

WHY = {"reconciler": "test", "explanation": "a test asked"}
SHARING = pod("share", milli=500)
WHOLE = pod("whole", gpus=2)


@pytest.fixture
def cluster() -> EmbeddedCluster:
    return EmbeddedCluster(
        [node("n0", gpus=4), node("n1", gpus=4), node("n2", gpus=8)], [SHARING, WHOLE], "test"
    )


def bind(cluster: EmbeddedCluster, name: str, request: PodRequest, node_name: str) -> None:
    policy = make_policy("fgd", PolicyContext(seed=0, workload=tuple(cluster.workload)))
    binder, _ = embedded_actuators(cluster, policy)
    with cluster.locked() as (state, _):
        placement = placement_on(state, state.node_index[node_name], request)
    action = Bind(
        pod=PodRef("ml", name, f"uid-{name}"), request=request, placement=placement, **WHY
    )
    assert binder.execute(action).outcome is Outcome.DONE


def free_of(cluster: EmbeddedCluster, name: str) -> tuple[int, int, list[int]]:
    state = cluster.state
    index = state.node_index[name]
    return (
        int(state.cpu_free_milli[index]),
        int(state.memory_free_mib[index]),
        np.asarray(state.gpu_free_milli[index]).tolist(),
    )


def test_added_nodes_are_empty_and_the_others_keep_what_is_taken(cluster: EmbeddedCluster) -> None:
    bind(cluster, "a", SHARING, "n1")
    before = free_of(cluster, "n1")
    add_nodes(cluster, [node("n3", gpus=2)])
    assert cluster.state.node_names == ("n0", "n1", "n2", "n3")
    assert free_of(cluster, "n1") == before
    assert cluster.state.gpu_free_milli_total == 18_000 - 500
    assert cluster.state.gpu_whole_free_count[cluster.state.node_index["n3"]] == 2
    with pytest.raises(InputError, match="already in the embedded cluster: n3"):
        add_nodes(cluster, [node("n3", gpus=2)])


def test_removed_nodes_send_their_pods_to_pending_and_the_rest_renumber(
    cluster: EmbeddedCluster,
) -> None:
    bind(cluster, "a", SHARING, "n0")
    bind(cluster, "b", WHOLE, "n2")
    kept = free_of(cluster, "n2")
    pending = remove_nodes(cluster, ["n0"])
    assert [(p.name, p.uid, p.evicted_from) for p in pending] == [("a", "uid-a", "n0")]
    assert list(cluster.pending) == ["uid-a"] and list(cluster.bound) == ["uid-b"]
    assert cluster.state.node_names == ("n1", "n2")
    assert free_of(cluster, "n2") == kept
    assert cluster.bound["uid-b"].placement.node_index == 1
    # The renumbered placement releases cleanly: every GPU is free again afterwards.
    policy = make_policy("fgd", PolicyContext(seed=0, workload=tuple(cluster.workload)))
    _, evictor = embedded_actuators(cluster, policy)
    assert evictor.execute(Evict(pod=PodRef("ml", "b", "uid-b"), **WHY)).outcome is Outcome.DONE
    assert cluster.state.gpu_free_milli_total == 12_000
    with pytest.raises(InputError, match="not in the embedded cluster: n0"):
        remove_nodes(cluster, ["n0"])
    with pytest.raises(InputError, match="every node"):
        remove_nodes(cluster, ["n1", "n2"])


def test_a_waiting_reader_sees_the_state_that_replaced_the_one_it_waited_for(
    cluster: EmbeddedCluster,
) -> None:
    seen: list[tuple[str, ...]] = []
    with cluster.locked():
        reader = threading.Thread(target=lambda: seen.append(_names(cluster)))
        reader.start()
        time.sleep(0.1)  # the reader now waits on the lock, asked for before the change
        add_nodes(cluster, [node("n3", gpus=1)])
    reader.join(5)
    assert seen == [("n0", "n1", "n2", "n3")]


def _names(cluster: EmbeddedCluster) -> tuple[str, ...]:
    with cluster.locked() as (_, names):
        return tuple(names)
