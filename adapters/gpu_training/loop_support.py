"""What the GPU adapter's reconcilers share: reading a loop view in the planners' terms.

The planners (:mod:`~kubesage.adapters.gpu_training.defrag`,
:mod:`~kubesage.adapters.gpu_training.relayout`) speak in running pods keyed by the
request's name and :data:`~kubesage.core.types.Migration` pairs; the loop speaks in
:class:`~kubesage.core.loop.view.PodInfo` keyed by ``namespace/name``. These helpers
translate between the two and say where a placement is; plan ids come from the loop's
:func:`~kubesage.core.loop.actions.digest` (the same intent on a later tick, or on a
new leader, gets the same id).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubesage.core.k8s.gang import GangAnnotationError, GangSpec, gang_of, names_a_gang
from kubesage.core.loop.actions import ObjectRef, PodRef
from kubesage.core.loop.view import PodInfo, WorldView
from kubesage.core.types import Placement, PodRequest

Running = tuple[PodRequest, Placement]


def running_pods(view: WorldView) -> tuple[dict[str, Running], dict[str, PodInfo]]:
    """Running pods as the planners want them (by request name), and each one's PodInfo."""
    running: dict[str, Running] = {}
    infos: dict[str, PodInfo] = {}
    pods = view.running
    for name in sorted(pods):  # the names, not (name, info) pairs: one object fewer a pod
        info = pods[name]
        assert info.placement is not None
        running[info.request.name] = (info.request, info.placement)
        infos[info.request.name] = info
    return running, infos


def where(placement: Placement) -> str:
    """``node`` with its GPUs (or MIG slot), as explanations say it."""
    gpus = ",".join(str(g) for g in placement.gpu_indices)
    text = f"{placement.node}" + (f" GPU {gpus}" if gpus else "")
    if placement.mig_start is not None:
        text += f" slot {placement.mig_start}"
    return text


def placement_key(placement: Placement) -> list[Any]:
    """The parts of a placement that identify it (for digests)."""
    return [placement.node, list(placement.gpu_indices), placement.mig_start]


def gang_spec(info: PodInfo) -> GangSpec | None:
    """The pod's named gang (the secondary scheduler's annotations); None without one.

    A malformed gang annotation reads as no gang here: the secondary scheduler reports it
    on the pod.
    """
    if not names_a_gang(info.annotations, info.labels):
        return None  # most pods name none: spare building the object (every pod, every tick)
    pod: Mapping[str, Any] = {
        "metadata": {
            "namespace": info.ref.namespace,
            "name": info.ref.name,
            "annotations": dict(info.annotations),
            "labels": dict(info.labels),
        }
    }
    try:
        spec = gang_of(pod)
    except GangAnnotationError:
        return None
    return spec if spec.named else None


def pod_object(ref: PodRef) -> ObjectRef:
    """A pod as an API object (for a Patch of its annotations)."""
    return ObjectRef(api_version="v1", kind="Pod", namespace=ref.namespace, name=ref.name)
