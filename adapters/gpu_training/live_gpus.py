"""The GPUs of a topology that are free on the live cluster now (``gpu launch
--kubeconfig``).

Without a cluster, a launch plans on every GPU of the topology as free, and two launches
can choose the same GPUs. With one, the cluster is listed once: a GPU is free when no pod
holds any of it (a GPU shared by pods or carved into MIG instances is not), on a node of
the topology the cluster has and the launch's pods may use (not cordoned, no taint they
do not tolerate: they carry no tolerations).
"""

from __future__ import annotations

from typing import Any

from kubesage.adapters.gpu_training.gang_reconciler import free_gpus
from kubesage.core.arrays import BoolArray
from kubesage.core.errors import InputError
from kubesage.core.listing import a_few
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import GPU_MILLI_PER_GPU, PodRequest

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
    free = free_gpus(drtg, snapshot.state, [MEMBER], nodes=usable)
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
    notes.append(f"live cluster: {int(free.sum())} of the topology's {drtg.num_gpus} GPUs free")
    return free, notes
