"""Node churn on the embedded cluster: nodes joining and leaving while it serves.

On a live cluster the informer rebuilds the state when the node set changes
(:class:`~kubesage.core.k8s.informer.ClusterSync`); the embedded cluster has no API
server, so whatever drives it (``benchmarks/soak.py``) changes its nodes here. Each
change builds a new :class:`ClusterState` over the new node list under the cluster's
lock and replaces the old one:

- the nodes both states share keep their free amounts — what the pre-fill and the
  binds took (the pre-fill's pods are not tracked one by one, so the free arrays are
  carried over rather than the pods placed again);
- bound pods keep their placements, renumbered to the new node positions;
- the pods bound on a removed node become pending, as their controllers would
  re-create them (the control loop places them again).

A cordon needs nothing here: like ``ClusterSync``, the embedded state keeps a cordoned
node and its pods; kube-scheduler's own ``NodeUnschedulable`` filter stops sending it
to the extender.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.k8s.embedded import EmbeddedCluster, PendingPod
from kubesage.core.observability import metrics
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import NodeSpec


def add_nodes(cluster: EmbeddedCluster, specs: Sequence[NodeSpec]) -> None:
    """Nodes join the cluster (empty), after the ones it has."""
    with cluster.locked() as (state, _):
        clash = sorted(set(state.node_index) & {spec.name for spec in specs})
        if clash:
            raise InputError(f"nodes already in the embedded cluster: {', '.join(clash[:5])}")
        _replace(cluster, [*state.nodes, *specs], removed=set())


def remove_nodes(cluster: EmbeddedCluster, names: Collection[str]) -> list[PendingPod]:
    """Nodes leave the cluster; the pods bound there become pending (returned)."""
    with cluster.locked() as (state, _):
        unknown = sorted(set(names) - set(state.node_index))
        if unknown:
            raise InputError(f"nodes not in the embedded cluster: {', '.join(unknown[:5])}")
        kept = [spec for spec in state.nodes if spec.name not in names]
        if not kept:
            raise InputError("cannot remove every node of the embedded cluster")
        return _replace(cluster, kept, removed=set(names))


def _replace(
    cluster: EmbeddedCluster, specs: list[NodeSpec], removed: set[str]
) -> list[PendingPod]:
    """The new state over ``specs`` (the caller holds the lock); see the module docstring."""
    old = cluster.state  # never has cordoned GPUs: only what-if copies cordon them
    new = ClusterState(specs)
    pairs = [(old.node_index[n], i) for i, n in enumerate(new.node_names) if n in old.node_index]
    if pairs:
        source = np.array([before for before, _ in pairs], dtype=np.int64)
        target = np.array([after for _, after in pairs], dtype=np.int64)
        for name in ClusterState.FREE_ARRAYS:
            before, after = getattr(old, name), getattr(new, name)
            if before.ndim == 1:
                after[target] = before[source]
            else:  # (nodes, GPUs) or (nodes, pod kinds): the widest node may have left
                columns = min(before.shape[1], after.shape[1])
                after[target, :columns] = before[source, :columns]
        new.gpu_free_milli_total = int(new.gpu_free_milli.sum())
    evicted: list[PendingPod] = []
    for key, bound in list(cluster.bound.items()):
        if bound.node in removed:
            del cluster.bound[key]
            uid = "" if key == f"{bound.namespace}/{bound.name}" else key
            pending = PendingPod(
                bound.namespace,
                bound.name,
                uid,
                bound.request,
                bound.node,
                labels=bound.labels,
                annotations=bound.annotations,
            )
            cluster.pending[key] = pending
            evicted.append(pending)
        else:
            placement = bound.placement.model_copy(
                update={"node_index": new.node_index[bound.node]}
            )
            cluster.bound[key] = replace(bound, placement=placement)
    cluster.state = new
    metrics.CLUSTER_NODES.set(new.num_nodes)
    return evicted
