"""Builders for the control loop's WorldView over a real ClusterState (reconciler tests)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubesage.core.loop.actions import ObjectRef, PodRef
from kubesage.core.loop.forecasts import ForecastPanel
from kubesage.core.loop.view import PodInfo, WorldView
from kubesage.core.perception import Snapshot
from kubesage.core.state import ClusterState
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import Placement, PodRequest


def request(
    name: str,
    *,
    gpus: int = 1,
    milli: int = 1000,
    qos: str = "LS",
    cpu: int = 1_000,
    memory: int = 1_024,
    namespace: str = "default",
) -> PodRequest:
    """A pod request named ``namespace/name``, as the Kubernetes layer names them."""
    return PodRequest(
        name=f"{namespace}/{name}",
        cpu_milli=cpu,
        memory_mib=memory,
        num_gpu=gpus,
        gpu_milli=milli if gpus else 0,
        qos=qos,
    )


def info(
    pod: PodRequest,
    placement: Placement | None = None,
    *,
    owner: ObjectRef | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    loop_places: bool | None = None,
    claimable: bool = False,
) -> PodInfo:
    """The pod as the loop sees it; a pending one is the loop's to place (as on the
    embedded cluster) unless ``loop_places=False``."""
    namespace, name = pod.name.split("/", 1)
    return PodInfo(
        ref=PodRef(namespace, name),
        request=pod,
        placement=placement,
        owner=owner,
        labels=dict(labels or {}),
        annotations=dict(annotations or {}),
        loop_places=placement is None if loop_places is None else loop_places,
        claimable=claimable,
    )


def run(
    state: ClusterState,
    pod: PodRequest,
    node: str,
    gpus: Sequence[int],
    **options: Any,
) -> PodInfo:
    """Allocate ``pod`` on ``node``'s ``gpus`` in ``state``; its PodInfo, running."""
    placement = state.placement(state.node_index[node], gpus, pod)
    state.allocate(pod, placement)
    return info(pod, placement, **options)


def view(
    state: ClusterState,
    pods: Iterable[PodInfo],
    *,
    tick: int = 1,
    now_s: float = 0.0,
    topology: DRTG | None = None,
    snapshots: Mapping[str, Snapshot[Any]] | None = None,
    memory: Mapping[str, Any] | None = None,
) -> WorldView:
    return WorldView(
        tick=tick,
        now_s=now_s,
        state=state.copy(),
        pods={str(p.ref): p for p in pods},
        topology=topology,
        forecasts=ForecastPanel(),  # cold start: knows nothing yet
        snapshots=dict(snapshots or {}),
        data_age_s=0.0,
        memory=dict(memory or {}),
    )
