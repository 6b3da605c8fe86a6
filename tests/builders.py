"""Test builders: ``node("n1", gpus=8)``, ``pod("p", milli=500)``, ``cluster(...)``."""

from __future__ import annotations

from pathlib import Path

from kubesage.core.paths import shared_trace_dir
from kubesage.core.state import ClusterState
from kubesage.core.types import NodeSpec, PodRequest


def node(
    name: str = "n0",
    *,
    cpu: int = 96_000,
    memory: int = 393_216,
    gpus: int = 8,
    model: str | None = "G2",
    rack: str | None = None,
) -> NodeSpec:
    return NodeSpec(
        name=name,
        cpu_milli=cpu,
        memory_mib=memory,
        gpu_count=gpus,
        gpu_model=model if gpus else None,
        rack=rack,
    )


def pod(
    name: str = "p0",
    *,
    cpu: int = 4_000,
    memory: int = 8_192,
    gpus: int | None = None,
    milli: int | None = None,
    models: tuple[str, ...] = (),
    created: float | None = None,
    deleted: float | None = None,
) -> PodRequest:
    """A pod; ``milli`` alone means a sharing pod on one GPU, ``gpus`` alone whole GPUs."""
    if gpus is None:
        gpus = 1 if milli is not None else 0
    if milli is None:
        milli = 1000 if gpus else 0
    return PodRequest(
        name=name,
        cpu_milli=cpu,
        memory_mib=memory,
        num_gpu=gpus,
        gpu_milli=milli,
        gpu_models=models,
        creation_time_s=created,
        deletion_time_s=deleted,
    )


def pod_category(pod: PodRequest) -> str:
    """``cpu``, ``share`` or ``gpu<k>``: the openb README's pod categories."""
    if pod.num_gpu == 0:
        return "cpu"
    if pod.is_gpu_sharing:
        return "share"
    return f"gpu{pod.num_gpu}"


def cluster(*nodes: NodeSpec) -> ClusterState:
    return ClusterState(list(nodes))


def set_gpu_free(state: ClusterState, node_index: int, free: list[int]) -> None:
    """Occupy GPUs so node ``node_index`` has exactly ``free`` milli free per GPU."""
    for gpu, left in enumerate(free):
        used = 1000 - left
        if used:
            request = (
                pod(f"fill-{node_index}-{gpu}-{used}", cpu=0, memory=0, milli=used)
                if used < 1000
                else pod(f"fill-{node_index}-{gpu}", cpu=0, memory=0, gpus=1)
            )
            state.allocate(request, state.placement(node_index, [gpu], request))


def shared_data_dir() -> Path | None:
    """The shared data folder, found by the commands' own rule
    (:func:`kubesage.core.paths.shared_trace_dir`: a ``$KUBESAGE_SHARED_DATA`` that names
    no folder is an error, not a skip); None when it holds neither trace."""
    for trace in ("openb", "genai"):
        found = shared_trace_dir(trace)
        if found is not None:
            return found.parent
    return None
