"""Pods no node of a cluster could ever hold, even with the cluster empty.

A trace replayed on another cluster (another variant's pod list, a node list of other
GPU models or sizes) can hold pods that fit no node at all: more GPUs than any node
has, a GPU model no node has, more CPU or memory than any node's allocatable. They fail
at every arrival and still count as arrived work, so a replay on them reads as a policy
that placed badly. :func:`never_fit` finds them with the placement rule itself
(:func:`~kubesage.core.state.fit.fit_report` on the empty cluster), so what it says is
exactly what placement will do: a CPU-only pod's ``gpu_spec`` constrains nothing, as
placement ignores it.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fit import FitCheck, fit_report
from kubesage.core.types import NodeSpec, PodRequest


def never_fit(nodes: Sequence[NodeSpec], pods: Sequence[PodRequest]) -> dict[str, int]:
    """The pods of ``pods`` that no node of ``nodes`` could hold even when empty, counted
    by why, most pods first. Why is the check failed by the node that comes nearest to
    holding the pod (the fit rule's checks run in order; the latest one any node reaches),
    in words with the pod's amounts: ``fewer than 16 GPUs on the node`` where an 8-GPU
    node is nearest, ``no GPU of an allowed model (H100)`` where no node passes that."""
    empty = ClusterState(nodes)
    verdicts: dict[tuple[object, ...], str | None] = {}
    counts: dict[str, int] = {}
    for pod in pods:
        key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models, pod.mig)
        if key not in verdicts:
            verdicts[key] = _why(empty, pod)
        why = verdicts[key]
        if why is not None:
            counts[why] = counts.get(why, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def _why(empty: ClusterState, pod: PodRequest) -> str | None:
    """Why no node of the ``empty`` cluster holds ``pod`` (None when one does)."""
    report = fit_report(empty, pod)
    if report.fits.any():
        return None
    if not report.reasons.size:
        return "the cluster has no nodes"
    return FitCheck(int(report.reasons.max())).words(pod)
