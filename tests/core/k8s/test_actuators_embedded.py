"""Embedded actuators: evict and re-bind keep the embedded ClusterState consistent."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.k8s.actuators import embedded_actuators
from kubesage.core.k8s.binding import BindActuator
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.embedded_actuators import EmbeddedEvictor
from kubesage.core.loop.actions import Bind, Evict, PodRef
from kubesage.core.loop.reconciler import Actuator, Outcome
from kubesage.core.policy.base import PolicyContext
from kubesage.core.policy.gpu_choice import placement_on
from kubesage.core.policy.registry import make_policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import PodRequest
from tests.builders import node, pod

WHY = {"reconciler": "test", "explanation": "a test asked"}
SHARING = pod("share", milli=500)
WHOLE = pod("whole", gpus=2)


def free(state: ClusterState) -> tuple[list[int], list[int], list[list[int]]]:
    """Everything a leak would show in: free CPU, memory and milli-GPU per node."""
    return (
        state.cpu_free_milli.tolist(),
        state.memory_free_mib.tolist(),
        np.asarray(state.gpu_free_milli).tolist(),
    )


@pytest.fixture
def cluster() -> EmbeddedCluster:
    return EmbeddedCluster([node("n0", gpus=4), node("n1", gpus=4)], [SHARING, WHOLE], "test")


@pytest.fixture
def actuators(cluster: EmbeddedCluster) -> tuple[BindActuator, EmbeddedEvictor]:
    policy = make_policy("fgd", PolicyContext(seed=0, workload=tuple(cluster.workload)))
    binder, evictor = embedded_actuators(cluster, policy)
    assert isinstance(binder, BindActuator) and isinstance(evictor, EmbeddedEvictor)
    return binder, evictor


def bind(cluster: EmbeddedCluster, name: str, request: PodRequest, node_name: str) -> Bind:
    """A Bind as a reconciler makes it: the node and the lowest-index GPUs with room."""
    with cluster.locked() as (state, _):
        placement = placement_on(state, state.node_index[node_name], request)
    return Bind(pod=PodRef("ml", name, f"uid-{name}"), request=request, placement=placement, **WHY)


def test_evict_then_rebind_leaks_no_capacity(
    cluster: EmbeddedCluster, actuators: tuple[BindActuator, EmbeddedEvictor]
) -> None:
    binder, evictor = actuators
    empty = free(cluster.state)
    assert binder.execute(bind(cluster, "a", SHARING, "n0")).outcome is Outcome.DONE
    assert binder.execute(bind(cluster, "b", WHOLE, "n0")).outcome is Outcome.DONE
    with_both = free(cluster.state)

    result = evictor.execute(Evict(pod=PodRef("ml", "b", "uid-b"), **WHY))
    assert (result.outcome, result.detail) == (
        Outcome.DONE,
        "pod ml/b evicted from n0; pending",
    )
    assert list(cluster.bound) == ["uid-a"]
    assert [(p.name, p.uid, p.evicted_from) for p in cluster.pending.values()] == [
        ("b", "uid-b", "n0")
    ]

    assert binder.execute(bind(cluster, "b", WHOLE, "n1")).outcome is Outcome.DONE
    assert cluster.pending == {}
    assert cluster.bound["uid-b"].node == "n1"
    for name in ("a", "b"):
        evictor.execute(Evict(pod=PodRef("ml", name), **WHY))  # by name, without the UID
    assert free(cluster.state) == empty
    assert free(cluster.state) != with_both
    assert cluster.bound == {}


def test_evicting_a_pod_that_is_not_bound_is_done(
    cluster: EmbeddedCluster, actuators: tuple[BindActuator, EmbeddedEvictor]
) -> None:
    binder, evictor = actuators
    result = evictor.execute(Evict(pod=PodRef("ml", "ghost"), **WHY))
    assert (result.outcome, result.detail) == (
        Outcome.DONE,
        "pod ml/ghost is not bound in the embedded cluster",
    )
    binder.execute(bind(cluster, "a", SHARING, "n0"))
    other_uid = Evict(pod=PodRef("ml", "a", "uid-of-another-a"), **WHY)
    assert evictor.execute(other_uid).outcome is Outcome.DONE  # that pod is not bound
    assert list(cluster.bound) == ["uid-a"]


def test_a_bind_that_no_longer_fits_is_refused_and_takes_nothing(
    cluster: EmbeddedCluster, actuators: tuple[BindActuator, EmbeddedEvictor]
) -> None:
    binder, _ = actuators
    assert binder.execute(bind(cluster, "a", WHOLE, "n0")).outcome is Outcome.DONE
    assert binder.execute(bind(cluster, "b", WHOLE, "n0")).outcome is Outcome.DONE
    before = free(cluster.state)
    result = binder.execute(bind(cluster, "c", WHOLE, "n0"))
    assert result.outcome is Outcome.REFUSED
    assert "no longer fits on n0" in result.detail
    assert free(cluster.state) == before
    elsewhere = binder.execute(bind(cluster, "a", WHOLE, "n1"))
    assert (elsewhere.outcome, "already bound to n0" in elsewhere.detail) == (
        Outcome.REFUSED,
        True,
    )


def test_embedded_actuators_are_actuators(
    actuators: tuple[BindActuator, EmbeddedEvictor],
) -> None:
    assert all(isinstance(actuator, Actuator) for actuator in actuators)
    assert [sorted(map(str, a.kinds)) for a in actuators] == [["bind"], ["evict"]]
