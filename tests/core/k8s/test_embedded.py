"""The embedded cluster's binds: a namespace/name is bound once, as the API server's
Binding subresource does it (409 already assigned, UID precondition)."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.k8s.binding import BindRefusedError, BindTarget
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.embedded_nodes import remove_nodes
from kubesage.core.policy.base import PolicyContext
from kubesage.core.policy.registry import make_policy
from tests.builders import node, pod

SHARING = pod("share", milli=500)


@pytest.fixture
def cluster() -> EmbeddedCluster:
    return EmbeddedCluster([node("n0", gpus=4), node("n1", gpus=4)], [SHARING], "test")


def gpu_used(cluster: EmbeddedCluster) -> int:
    """Milli-GPUs taken (every node here has 4 GPUs)."""
    total = 4000 * len(cluster.state.node_names)
    return int(total - np.asarray(cluster.state.gpu_free_milli).sum())


def test_a_second_bind_of_a_bound_name_allocates_nothing_more(cluster: EmbeddedCluster) -> None:
    bind = cluster.binder(make_policy("bestfit", PolicyContext()))
    bind(BindTarget("ml", "q", "uid-1", "n0", SHARING))
    assert gpu_used(cluster) == 500
    bind(BindTarget("ml", "q", "uid-1", "n0", SHARING))  # a retry: done already
    bind(BindTarget("ml", "q", "", "n0", SHARING))  # no precondition: the same pod
    with pytest.raises(BindRefusedError, match="Precondition failed: UID in precondition: uid-2"):
        bind(BindTarget("ml", "q", "uid-2", "n0", SHARING))  # re-created under the name
    with pytest.raises(BindRefusedError, match="ml/q is already bound to n0"):
        bind(BindTarget("ml", "q", "", "n1", SHARING))
    assert list(cluster.bound) == ["uid-1"]
    assert gpu_used(cluster) == 500
    bind(BindTarget("other", "q", "uid-3", "n0", SHARING))  # another namespace's q
    assert gpu_used(cluster) == 1000


def test_a_name_freed_by_delete_or_eviction_can_be_bound_again(cluster: EmbeddedCluster) -> None:
    bind = cluster.binder(make_policy("bestfit", PolicyContext()))
    bind(BindTarget("ml", "q", "", "n0", SHARING))  # bound without a UID
    with pytest.raises(BindRefusedError, match="already bound to n0"):
        bind(BindTarget("ml", "q", "uid-9", "n1", SHARING))
    assert cluster.delete("ml", "q")
    bind(BindTarget("ml", "q", "uid-9", "n1", SHARING))
    assert cluster.evict("ml", "q", "uid-9") is not None
    bind(BindTarget("ml", "q", "uid-9", "n0", SHARING))
    assert [(b.namespace, b.name, b.node) for b in cluster.bound.values()] == [("ml", "q", "n0")]
    assert gpu_used(cluster) == 500
    remove_nodes(cluster, ["n0"])  # its pods go back to pending, their names free
    assert cluster.bound == {}
    bind(BindTarget("ml", "q", "uid-9", "n1", SHARING))
    assert gpu_used(cluster) == 500


def test_a_bound_pod_keeps_what_it_was_submitted_with_through_eviction_and_node_removal(
    cluster: EmbeddedCluster,
) -> None:
    labels, annotations = {"spark-role": "executor"}, {"kubesage.io/gang": "job-a"}
    uid = cluster.submit("ml", "w0", SHARING, labels=labels, annotations=annotations).uid
    bind = cluster.binder(make_policy("bestfit", PolicyContext()))
    bind(BindTarget("ml", "w0", "", "n0", SHARING))  # no UID: the pending pod of that name
    assert cluster.pending == {}
    bound = cluster.bound[uid]
    assert (dict(bound.labels), dict(bound.annotations)) == (labels, annotations)
    evicted = cluster.evict("ml", "w0")
    assert evicted is not None and evicted.uid == uid
    assert (dict(evicted.labels), dict(evicted.annotations)) == (labels, annotations)
    bind(BindTarget("ml", "w0", uid, "n1", SHARING))  # placed again: still the same pod
    assert dict(cluster.bound[uid].annotations) == annotations
    remove_nodes(cluster, ["n1"])
    assert dict(cluster.pending[uid].labels) == labels


def test_a_submitted_pod_has_its_own_uid_and_a_bind_must_name_it(
    cluster: EmbeddedCluster,
) -> None:
    first = cluster.submit("ml", "w0", SHARING)
    with pytest.raises(InputError, match="exists already"):
        cluster.submit("ml", "w0", SHARING)
    assert cluster.delete("ml", "w0")
    second = cluster.submit("ml", "w0", SHARING)  # the same name again: another pod
    assert first.uid and second.uid and first.uid != second.uid
    bind = cluster.binder(make_policy("bestfit", PolicyContext()))
    with pytest.raises(BindRefusedError, match=f"UID in object meta: {second.uid}"):
        bind(BindTarget("ml", "w0", first.uid, "n0", SHARING))  # the deleted pod's bind
    assert cluster.bound == {} and list(cluster.pending) == [second.uid]
    bind(BindTarget("ml", "w0", second.uid, "n0", SHARING))
    assert list(cluster.bound) == [second.uid] and cluster.pending == {}
