"""The room a cluster has for Spark executors, on a topology's nodes.

:func:`~kubesage.adapters.spark.placement.place_executors` reads a ClusterState in the
topology's (DRTG's) node order. A cluster's state is in its own order and may lack
some of the topology's nodes, or have more:

- :func:`topology_room` gives the topology's nodes with the cluster's free CPU and memory,
  and with every GPU that has any use hidden (executors ask for whole GPUs); a node the
  cluster lacks has no room;
- :func:`only_on` takes the room off the nodes the executors may not use;
- :func:`live_room` reads a live cluster once (its nodes and pods, through the
  informer the control loop uses) for ``kubesage spark conf --kubeconfig``: the room
  now, with nodes an executor cannot go to (cordoned, tainted) ruled out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubesage.core.errors import InputError
from kubesage.core.listing import a_few
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import GPU_MILLI_PER_GPU, PodRequest

EXECUTOR_POD: dict[str, Any] = {"metadata": {"name": "executor"}, "spec": {}}
"""An executor pod as kubesage's templates write it, for kube-scheduler's node filters:
no tolerations, no node selector (its rack affinity is what is being planned)."""


@dataclass(frozen=True)
class TopologyRoom:
    """The cluster's room on the topology's nodes, in the topology's order, and the
    topology's nodes the cluster lacks."""

    state: ClusterState
    missing: tuple[str, ...]

    def check_shared(self, drtg: DRTG) -> None:
        """An InputError when the topology shares no node with the cluster."""
        if len(self.missing) == drtg.num_nodes:
            raise InputError(self.disjoint(drtg))

    @staticmethod
    def disjoint(drtg: DRTG) -> str:
        return (
            f"none of the topology's {drtg.num_nodes} nodes is in the cluster (e.g. "
            f"'{drtg.node_names[0]}'); is the topology this cluster's?"
        )

    def missing_note(self) -> str | None:
        """What to tell about the topology's nodes the cluster lacks (None: none)."""
        if not self.missing:
            return None
        return (
            f"{len(self.missing)} topology node(s) are not in the cluster and take no "
            f"executors: {a_few(self.missing)}"
        )


def topology_room(drtg: DRTG, state: ClusterState) -> TopologyRoom:
    """``state``'s room on ``drtg``'s nodes, in ``drtg``'s order (see the module docstring)."""
    if state.node_names == drtg.node_names:
        return TopologyRoom(state.copy(), ())
    specs = drtg.node_specs()
    known = [name in state.node_index for name in drtg.node_names]
    aligned = ClusterState(
        [
            state.nodes[state.node_index[spec.name]] if here else spec
            for spec, here in zip(specs, known, strict=True)
        ]
    )
    for node, (name, here) in enumerate(zip(drtg.node_names, known, strict=True)):
        if here:
            index = state.node_index[name]
            cpu, memory = int(state.cpu_free_milli[index]), int(state.memory_free_mib[index])
            gpus_free = state.gpu_free_milli[index]
        else:
            cpu, memory, gpus_free = 0, 0, None
        used = PodRequest(
            name=f"in-use/{name}",
            cpu_milli=max(0, int(aligned.cpu_capacity_milli[node]) - cpu),
            memory_mib=max(0, int(aligned.memory_capacity_mib[node]) - memory),
        )
        if used.cpu_milli or used.memory_mib:
            aligned.allocate(used, aligned.placement(node, [], used))
        for gpu in range(int(aligned.gpu_count[node])):
            if gpus_free is None or int(gpus_free[gpu]) < GPU_MILLI_PER_GPU:
                aligned.cordon_gpu(node, gpu)  # in use: no whole GPU for an executor
    missing = tuple(name for name, here in zip(drtg.node_names, known, strict=True) if not here)
    return TopologyRoom(aligned, missing)


def only_on(state: ClusterState, nodes: frozenset[str] | None) -> ClusterState:
    """``state`` with no room left on the nodes outside ``nodes`` (the executors' node
    constraints rule them out: cordoned, tainted, not selected); itself when none is."""
    if nodes is None:
        return state
    kept = state.copy()
    for index, name in enumerate(kept.node_names):
        cpu, memory = int(kept.cpu_free_milli[index]), int(kept.memory_free_mib[index])
        if name in nodes or not (cpu > 0 or memory > 0):
            continue
        ruled_out = PodRequest(
            name=f"ruled-out/{name}", cpu_milli=max(0, cpu), memory_mib=max(0, memory)
        )
        kept.allocate(ruled_out, kept.placement(index, [], ruled_out))
    return kept


def live_room(
    drtg: DRTG, api: Any, *, timeout_s: float | None = None
) -> tuple[TopologyRoom, list[str]]:
    """A live cluster's room for executors on ``drtg``'s nodes now, and what to tell the
    user about it: the room kube-scheduler's preemptions hold for nominated pods is
    kept, and nodes an executor may not use (:func:`node_refusal`) have none.
    DependencyError when the cluster is not listed within ``timeout_s`` (default:
    :data:`~kubesage.core.k8s.cluster_snapshot.LIST_TIMEOUT_S`); InputError when the
    topology shares no node with it."""
    from kubesage.core.k8s.binding import node_refusal
    from kubesage.core.k8s.cluster_snapshot import live_snapshot

    snapshot = live_snapshot(api, timeout_s=timeout_s)
    room = topology_room(drtg, snapshot.state)
    node_objects = snapshot.nodes
    room.check_shared(drtg)
    usable = frozenset(
        name for name, node in node_objects.items() if node_refusal(EXECUTOR_POD, node) is None
    )
    notes = [note for note in (room.missing_note(),) if note is not None]
    ruled_out = sorted(set(drtg.node_names) - set(room.missing) - usable)
    if ruled_out:
        notes.append(
            f"{len(ruled_out)} topology node(s) take no executors (cordoned or tainted): "
            f"{a_few(ruled_out)}"
        )
    state = only_on(room.state, usable)
    present = [i for i, name in enumerate(drtg.node_names) if name not in room.missing]
    cores = int(room.state.cpu_capacity_milli[present].sum())
    free = int(room.state.cpu_free_milli[present].sum())
    notes.append(
        f"live cluster: {len(present)} of the topology's {drtg.num_nodes} nodes, "
        f"{(cores - free) / 1000:.0f} of their {cores / 1000:.0f} cores in use"
    )
    return TopologyRoom(state, room.missing), notes
