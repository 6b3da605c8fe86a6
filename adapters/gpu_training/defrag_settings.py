"""What ``gpu-defrag`` may do: its settings, the running pods it never moves, and the
nodes a moved pod may go to (:mod:`~kubesage.adapters.gpu_training.defrag_reconciler`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from kubesage.adapters.gpu_training.defrag import job_member
from kubesage.core.loop.view import PodInfo

NODE_BOUND_OWNERS = ("DaemonSet", "Node")  # re-create a pod on its node (Node: static pods)
REPLACING_OWNERS = ("ReplicaSet", "StatefulSet", "ReplicationController")
"""Controllers that re-create an evicted pod as it was, anywhere its constraints allow.
A Job counts the eviction as a failure against its ``backoffLimit`` (and a one-pod
training run loses its progress); an Argo Workflow's or a Tekton TaskRun's step is not
re-created at all: the step fails."""


@dataclass(frozen=True)
class DefragSettings:
    """How far ``gpu-defrag`` may go."""

    eviction_budget: int = 4
    """Most pods evicted per tick over all its plans (the loop's per-tick eviction
    budget; 0: nothing is migrated, and the notes say what waits)."""
    relayout_budget: int | None = None
    """Most MIG node re-layouts (``label-node`` steps) per tick over all its plans (the
    loop's label-node budget; None: unlimited). A plan needing more is not asked for."""
    max_priority: int = 0
    """Pods above this priority never move."""
    max_trials: int = 32
    """Most candidate migrations tried (each on a copy of the cluster) per pending pod."""
    compact_free_share: float = 0.05
    """Compact in the background while fewer than this share of GPUs are empty (0: never)."""
    compact_interval_s: float = 600.0
    """Least time between two compaction rounds."""
    evicted_pods_come_back: bool = False
    """True where an evicted pod comes back pending under its own name (the embedded
    cluster, the simulator). False (a live cluster): a pod without an owner never moves."""
    movable_owners: tuple[str, ...] = REPLACING_OWNERS
    """On a live cluster, the controller kinds whose pods may move (the pod's controller
    ``ownerReference``); the pods of any other controller never do."""
    relayouts: bool = False
    """True where the loop can apply a MIG re-layout (its ``label-node`` actuator publishes
    mig-parted configs: ``--mig-config-map``). False: MIG instances never move."""


def never_moves(info: PodInfo, settings: DefragSettings) -> bool:
    """Whether ``info`` must not be evicted, whatever its QoS (the module docstring)."""
    comes_back = settings.evicted_pods_come_back or (
        info.owner is not None and info.owner.kind in settings.movable_owners
    )
    return (
        not comes_back  # a notebook, a Job's pod, a workflow's step
        or info.terminating  # its room frees itself; evicting it again does nothing
        or (info.owner is not None and info.owner.kind in NODE_BOUND_OWNERS)
        or info.gang is not None
        or info.request.gang_id is not None
        or job_member(info.labels, info.annotations)
        or (info.request.mig is not None and not settings.relayouts)
    )


def pinned_pods(infos: Mapping[str, PodInfo], settings: DefragSettings) -> frozenset[str]:
    """The names of the running pods in ``infos`` that :func:`never_moves` keeps."""
    return frozenset(name for name, info in infos.items() if never_moves(info, settings))


def allowed_nodes(infos: Mapping[str, PodInfo]) -> dict[str, Collection[str]]:
    """The nodes each running pod's own constraints (node selector, required affinity,
    taints) allow it onto, for the pods that have such constraints: a moved pod is
    re-placed only there, as the scheduler would re-place its replacement."""
    return {
        name: info.eligible_nodes for name, info in infos.items() if info.eligible_nodes is not None
    }
