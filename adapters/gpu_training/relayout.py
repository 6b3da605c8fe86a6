"""MIG re-layout plans: what each MIG node's GPUs hold after migrations, as mig-parted config.

After the defragmenter or the compactor moves MIG instances, every MIG node a
move touches gets a new layout: one list of instances per GPU. The plan carries it
as a mig-parted ``version: v1`` config (GPUs with equal instance counts grouped
under one ``devices`` entry) named after the node and its layout, and the node
label ``nvidia.com/mig.config=<name>`` that makes the GPU Operator's MIG Manager
apply it.

mig-parted takes instance *counts*, not start slots: the driver places them. A GPU
whose counts change is cleared and re-created whole (every GPU and compute instance on
it destroyed first), so a pod staying on such a GPU would lose its instance under it:
:func:`staying_pods` names them, and the defragmenter evicts and binds them again in
place in the same plan. The
per-GPU layouts (with slots) are kept in the plan for the scheduler's own
bookkeeping and for review; after MIG Manager reports the node's new state,
collect it again (NVML) rather than assume the slots.

Where NVIDIA's DRA driver publishes partitionable MIG devices (KEP-4815), the same
plan is carried out without the label: each moved pod's bind allocates, in its
ResourceClaim, the partition device of its profile at its start slot (the driver
creates the instance), so the per-GPU layouts here are exact there. The live label
actuator recognises such a node and skips the label
(:class:`~kubesage.core.k8s.actuators.LiveNodeLabeler`); the core maps slots to
devices (:func:`~kubesage.core.k8s.dra_allocation.wanted_devices`). This module
decides the layout either way.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubesage.adapters.gpu_training.mig import MigInstance, layout_errors
from kubesage.core.errors import InputError
from kubesage.core.k8s.mig_manager import MIG_CONFIG_LABEL, own_config_name
from kubesage.core.loop.actions import LabelNode
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import Migration, Placement, PodRequest

Layout = tuple[MigInstance, ...]


@dataclass(frozen=True)
class RelayoutPlan:
    """The new MIG layout of one node."""

    node: str
    gpu_model: str
    layouts: tuple[Layout, ...]
    """Instances per GPU index, ordered by start slot."""
    config_name: str
    mig_parted: dict[str, object]

    @property
    def label(self) -> tuple[str, str]:
        """The node label to set: ``(nvidia.com/mig.config, config_name)``."""
        return MIG_CONFIG_LABEL, self.config_name


def node_layouts(
    state: ClusterState, running: Mapping[str, tuple[PodRequest, Placement]], node: int
) -> tuple[Layout, ...]:
    """The MIG instances each GPU of ``node`` holds, from the running pods."""
    per_gpu: list[list[MigInstance]] = [[] for _ in range(int(state.gpu_count[node]))]
    for pod, placement in running.values():
        if placement.node_index == node and pod.mig is not None:
            assert placement.mig_start is not None
            per_gpu[placement.gpu_indices[0]].append(
                MigInstance(pod.mig.profile, placement.mig_start)
            )
    return tuple(tuple(sorted(g, key=lambda i: (i.start, i.profile))) for g in per_gpu)


def mig_parted_node_config(
    name: str, gpu_model: str, layouts: Sequence[Layout]
) -> dict[str, object]:
    """A mig-parted config giving each GPU of a node its own instance counts."""
    groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for gpu, layout in enumerate(layouts):
        errors = layout_errors(gpu_model, layout)
        if errors:
            raise InputError(f"invalid MIG layout for GPU {gpu} ({gpu_model}): {'; '.join(errors)}")
        counts = tuple(sorted(Counter(i.profile for i in layout).items()))
        groups.setdefault(counts, []).append(gpu)
    return {
        "version": "v1",
        "mig-configs": {
            name: [
                {"devices": gpus, "mig-enabled": True, "mig-devices": dict(counts)}
                for counts, gpus in groups.items()
            ]
        },
    }


def staying_pods(
    state: ClusterState,
    running: Mapping[str, tuple[PodRequest, Placement]],
    moves: Sequence[Migration],
    arriving: tuple[PodRequest, Placement] | None = None,
) -> list[str]:
    """The running MIG pods that ``moves`` (and a pod ``arriving`` at its placement) leave
    in place on a GPU whose instance counts they change: mig-parted would destroy their
    instances to re-create the GPU's."""
    moved = {name for name, _ in moves}
    after = dict(running)
    for name, target in moves:
        after[name] = (after[name][0], target)
    touched = _touched(running, moves)
    if arriving is not None and arriving[0].mig is not None:
        after["\0arriving"] = arriving  # no pod's namespace/name
        touched.add(arriving[1].node_index)
    staying = []
    for node in sorted(touched):
        before_layouts = node_layouts(state, running, node)
        after_layouts = node_layouts(state, after, node)
        changed = {
            gpu
            for gpu, (old, new) in enumerate(zip(before_layouts, after_layouts, strict=True))
            if Counter(i.profile for i in old) != Counter(i.profile for i in new)
        }
        staying += [
            name
            for name, (pod, placement) in running.items()
            if name not in moved
            and pod.mig is not None
            and placement.node_index == node
            and placement.gpu_indices[0] in changed
        ]
    return sorted(staying)


def _touched(
    running: Mapping[str, tuple[PodRequest, Placement]], moves: Sequence[Migration]
) -> set[int]:
    """The nodes ``moves`` take MIG instances from or to."""
    touched: set[int] = set()
    for name, target in moves:
        if name not in running:
            raise InputError(f"migration names pod '{name}', which is not running")
        pod, source = running[name]
        if pod.mig is not None:
            touched.update((source.node_index, target.node_index))
    return touched


def relayout_plans(
    state: ClusterState,
    running: Mapping[str, tuple[PodRequest, Placement]],
    moves: Sequence[Migration],
) -> list[RelayoutPlan]:
    """New layouts for every MIG node that ``moves`` take instances from or to.

    ``state`` and ``running`` are before the moves; neither is changed.
    """
    touched = _touched(running, moves)
    after = dict(running)
    for name, target in moves:
        after[name] = (after[name][0], target)
    plans = []
    for node in sorted(touched):
        model = state.gpu_models[int(state.gpu_model_index[node])]
        layouts = node_layouts(state, after, node)
        digest = hashlib.sha256(
            json.dumps([[(i.profile, i.start) for i in g] for g in layouts]).encode()
        ).hexdigest()[:8]
        config_name = own_config_name(digest)
        plans.append(
            RelayoutPlan(
                node=state.node_names[node],
                gpu_model=model,
                layouts=layouts,
                config_name=config_name,
                mig_parted=mig_parted_node_config(config_name, model, layouts),
            )
        )
    return plans


NO_RELAYOUTS = (
    "re-lays out MIG nodes, which this loop cannot apply (no ConfigMap to publish the "
    "mig-parted config in: kubesage serve --mig-config-map); migration not planned"
)


def relayout_steps(
    reconciler: str,
    state: ClusterState,
    running: Mapping[str, tuple[PodRequest, Placement]],
    moves: Sequence[Migration],
    plan_id: str,
    why: str,
    applicable: bool,
) -> list[LabelNode] | str:
    """A mig-parted label step for every MIG node whose layout ``moves`` change, or why
    none can be applied (``applicable``: the loop can publish mig-parted configs); then
    no migration is planned: no evictions for a layout nobody applies."""
    try:
        relayouts = relayout_plans(state, running, moves)
    except InputError as exc:
        return f"{why}: no MIG re-layout can be planned ({exc}); migration not planned"
    if relayouts and not applicable:
        return f"{why}: the migration {NO_RELAYOUTS}"
    return [
        LabelNode(
            reconciler=reconciler,
            explanation=(
                f"{why}: MIG layout of {relayout.node} becomes "
                + "; ".join(
                    f"GPU {gpu}: " + (",".join(f"{i.profile}@{i.start}" for i in layout) or "-")
                    for gpu, layout in enumerate(relayout.layouts)
                )
            ),
            plan=plan_id,
            node=relayout.node,
            labels=dict([relayout.label]),
            mig_parted=relayout.mig_parted,
        )
        for relayout in relayouts
    ]
