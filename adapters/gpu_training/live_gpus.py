"""The GPUs of a topology that are free on the live cluster now (``gpu launch
--kubeconfig``).

Without a cluster, a launch plans on every GPU of the topology as free, and two launches
can choose the same GPUs. With one, the cluster is listed once: a GPU is free when no pod
holds any of it (a GPU shared by pods or carved into MIG instances is not), on a node of
the topology the cluster has and the launch's pods may use (not cordoned, no taint they
do not tolerate: they carry no tolerations). For a MIG launch (``--mig PROFILE``) a GPU
is free when an instance of the profile can start on it now: a MIG-enabled GPU whose
free memory and compute slices hold one at one of the profile's slots, at a slot of an
instance its published layout has (the core's rule, ``ClusterState.mig_slots``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kubesage.adapters.gpu_training.gang_reconciler import free_gpus
from kubesage.core.arrays import BoolArray
from kubesage.core.errors import InputError
from kubesage.core.listing import a_few
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import GPU_MILLI_PER_GPU, PodRequest

if TYPE_CHECKING:
    from kubesage.core.k8s.cluster_snapshot import ClusterSnapshot

TRAINER_POD: dict[str, Any] = {"metadata": {"name": "trainer"}, "spec": {}}
"""A launched pod as kube-scheduler's node filters see it: no tolerations, and no node
selector beyond the node it is planned on."""
MEMBER = PodRequest(
    name="launch/member", cpu_milli=0, memory_mib=0, num_gpu=1, gpu_milli=GPU_MILLI_PER_GPU
)
"""What each GPU of the plan asks of its node (the Jobs set no CPU or memory request)."""


def live_free_gpus(drtg: DRTG, api: Any) -> tuple[BoolArray, list[str]]:
    """Per GPU of ``drtg``, whether it is free on the cluster ``api`` reaches now, and what
    to tell the user about it. DependencyError when the cluster cannot be listed;
    InputError when the topology shares no node with it."""
    snapshot, usable, notes = _listed(drtg, api)
    free = free_gpus(drtg, snapshot.state, [MEMBER], nodes=usable)
    notes.append(f"live cluster: {int(free.sum())} of the topology's {drtg.num_gpus} GPUs free")
    return free, notes


def live_mig_slots(drtg: DRTG, api: Any, profile: str) -> tuple[BoolArray, list[str]]:
    """Per GPU of ``drtg``, whether an instance of MIG ``profile`` can start on it on the
    cluster ``api`` reaches now, and what to tell the user; errors as
    :func:`live_free_gpus`."""
    from kubesage.core.k8s.mig_names import mig_shape

    shape = mig_shape(profile, "--mig")
    snapshot, usable, notes = _listed(drtg, api)
    state = snapshot.state
    free = np.zeros(drtg.num_gpus, dtype=bool)
    for node, name in enumerate(drtg.node_names):
        index = state.node_index.get(name)
        if name not in usable or index is None or not state.node_mig_enabled[index]:
            continue
        slots = state.mig_slots(shape, np.array([index]))[0]  # (G, S)
        gpus = drtg.node_gpus(node)
        count = min(gpus.size, int(state.gpu_count[index]))
        free[gpus[:count]] = slots[:count].any(axis=1)
    notes.append(
        f"live cluster: {int(free.sum())} of the topology's {drtg.num_gpus} GPUs can start "
        f"a {profile} instance now"
    )
    return free, notes


def _listed(drtg: DRTG, api: Any) -> tuple[ClusterSnapshot, set[str], list[str]]:
    """The cluster listed once, the topology's nodes on it that take the launch's pods,
    and notes on the topology nodes that are missing or ruled out."""
    # Imported on use: the kubernetes client is slow to import and most launches ask no cluster.
    from kubesage.core.k8s.binding import node_refusal
    from kubesage.core.k8s.cluster_snapshot import live_snapshot

    snapshot = live_snapshot(api)
    present = [name for name in drtg.node_names if name in snapshot.nodes]
    if not present:
        raise InputError(
            f"the topology shares no node with the cluster (topology: {a_few(drtg.node_names)}; "
            f"cluster: {a_few(sorted(snapshot.nodes))}): `kubesage topology discover` "
            "writes the cluster's"
        )
    usable = {name for name in present if node_refusal(TRAINER_POD, snapshot.nodes[name]) is None}
    notes = []
    if len(present) < drtg.num_nodes:
        missing = [name for name in drtg.node_names if name not in snapshot.nodes]
        notes.append(f"{len(missing)} topology node(s) are not in the cluster: {a_few(missing)}")
    ruled_out = [name for name in present if name not in usable]
    if ruled_out:
        notes.append(
            f"{len(ruled_out)} node(s) take no trainer pods (cordoned or tainted): "
            f"{a_few(ruled_out)}"
        )
    return snapshot, usable, notes
