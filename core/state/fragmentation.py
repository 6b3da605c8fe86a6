"""The FGD fragmentation measure (Weng et al., "Beware of Fragmentation", ATC '23).

A node's idle GPU capacity is a *fragment* with respect to a pod when that pod could
not use it. Over a distribution of typical pods ``(pod_t, p_t)`` the node's expected
fragment is::

    F(node) = Σ_t p_t · ( G                                      unless pod_t fits (Q3)
                          Σ_{gpu: free < gpu_milli_t} free       when pod_t fits )

where ``G`` is the node's total idle milli-GPU and "fits" means the node's GPU model
is allowed, its CPU suffices, and at least ``num_gpu_t`` GPUs each have
``gpu_milli_t`` free. CPU-only typical pods never fit in this sense, so they count
all idle GPU milli (the paper's "XL/XR" classes, and its simulator's behaviour).

The cluster's fragmentation amount is Σ F over nodes; the fragmentation ratio is
that amount over the cluster's idle milli-GPU (when the typical-pod percentages sum
to 1, Σ_t p_t·G over nodes is exactly the idle milli-GPU).

The typical pods come from the workload itself: pods are bucketed by exact
``(cpu_milli, gpu_milli, num_gpu, gpu_models)``, sorted by popularity, and the
smallest most-popular prefix covering ``coverage`` (95 %) of pods is kept with its
percentages rescaled to sum to 1 — as the paper's simulator does.

Memory plays no part in the measure, as in the paper.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import BoolArray, FloatArray, IntArray
from kubesage.core.errors import InputError
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import PodRequest

DEFAULT_COVERAGE = 0.95
"""Share of the workload's pods the typical pods must cover (the paper's setting)."""


@dataclass(frozen=True)
class TypicalPod:
    """One bucket of the typical-pod distribution."""

    cpu_milli: int
    gpu_milli: int
    num_gpu: int
    gpu_models: tuple[str, ...]
    probability: float


def typical_pods(
    workload: Sequence[PodRequest],
    *,
    coverage: float = DEFAULT_COVERAGE,
    include_cpu_pods: bool = True,
) -> tuple[TypicalPod, ...]:
    """The most popular pod shapes covering ``coverage`` of ``workload``, renormalised."""
    if not 0.0 < coverage <= 1.0:
        raise InputError(f"coverage must be in (0, 1], got {coverage}")
    counts: Counter[tuple[int, int, int, str]] = Counter()
    for pod in workload:
        if pod.num_gpu == 0 and not include_cpu_pods:
            continue
        counts[(pod.cpu_milli, pod.gpu_milli, pod.num_gpu, "|".join(pod.gpu_models))] += 1
    total = sum(counts.values())
    if total == 0:
        raise InputError("cannot derive typical pods from an empty workload")
    # Most popular first; equal counts ordered by the shape itself, descending, so the
    # result does not depend on the workload's order.
    ranked = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
    kept: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for shape, count in ranked:
        if covered >= coverage * total:
            break
        kept.append((shape, count))
        covered += count
    return tuple(
        TypicalPod(
            cpu_milli=cpu,
            gpu_milli=milli,
            num_gpu=num,
            gpu_models=tuple(models.split("|")) if models else (),
            probability=count / covered,
        )
        for (cpu, milli, num, models), count in kept
    )


class FragmentationMeasure:
    """Vectorised F(node) over many node states at once, for one cluster's GPU models."""

    def __init__(self, typical: Sequence[TypicalPod], gpu_models: tuple[str, ...]):
        if not typical:
            raise InputError("the fragmentation measure needs at least one typical pod")
        self.typical = tuple(typical)
        self.gpu_models = gpu_models
        self.probability_total = float(sum(t.probability for t in typical))
        gpu_pods = [t for t in typical if t.gpu_milli > 0]
        self._thresholds: IntArray = np.array(
            sorted({t.gpu_milli for t in gpu_pods}), dtype=np.int64
        )
        threshold_index = {milli: i for i, milli in enumerate(self._thresholds.tolist())}
        self._pod_threshold: IntArray = np.array(
            [threshold_index[t.gpu_milli] for t in gpu_pods], dtype=np.int64
        )
        self._pod_num_gpu: IntArray = np.array([t.num_gpu for t in gpu_pods], dtype=np.int64)
        self._pod_cpu_milli: IntArray = np.array([t.cpu_milli for t in gpu_pods], dtype=np.int64)
        self._pod_probability: FloatArray = np.array(
            [t.probability for t in gpu_pods], dtype=np.float64
        )
        # Row m says which GPU typical pods may run on model m; the extra last row is
        # for nodes without GPUs (index -1), where nothing fits.
        access = np.zeros((len(gpu_models) + 1, len(gpu_pods)), dtype=bool)
        for column, pod in enumerate(gpu_pods):
            for row, model in enumerate(gpu_models):
                access[row, column] = not pod.gpu_models or model in pod.gpu_models
        self._access: BoolArray = access

    def node_fragment(
        self, cpu_free_milli: IntArray, gpu_free_milli: IntArray, gpu_model_index: IntArray
    ) -> FloatArray:
        """F for M node states: ``cpu_free_milli`` (M,), ``gpu_free_milli`` (M, G), models (M,)."""
        idle = gpu_free_milli.sum(axis=1).astype(np.float64)
        fragment: FloatArray = idle * self.probability_total
        if self._pod_probability.size == 0:
            return fragment
        # For each distinct GPU share d: how many GPUs have >= d free, and how much they hold.
        enough = gpu_free_milli[:, None, :] >= self._thresholds[None, :, None]  # (M, D, G)
        usable = np.where(enough, gpu_free_milli[:, None, :], 0).sum(axis=2)  # (M, D)
        gpus_with_room = enough.sum(axis=2)  # (M, D)
        fits = (
            (gpus_with_room[:, self._pod_threshold] >= self._pod_num_gpu)
            & (cpu_free_milli[:, None] >= self._pod_cpu_milli)
            & self._access[gpu_model_index]
        )  # (M, T_gpu)
        fragment -= (fits * usable[:, self._pod_threshold]) @ self._pod_probability
        return fragment

    def of_state(self, state: ClusterState) -> FloatArray:
        """F for every node of ``state``."""
        self._check_models(state)
        return self.node_fragment(state.cpu_free_milli, state.gpu_free_milli, state.gpu_model_index)

    def cluster_fragmentation(self, state: ClusterState) -> tuple[float, float]:
        """``(fragment amount in milli-GPU, fragmentation ratio 0..1)`` of the whole cluster."""
        amount = float(self.of_state(state).sum())
        idle = state.gpu_free_milli_total * self.probability_total
        return amount, (amount / idle if idle > 0 else 0.0)

    def _check_models(self, state: ClusterState) -> None:
        if state.gpu_models != self.gpu_models:
            raise InputError(
                "fragmentation measure was built for GPU models "
                f"{self.gpu_models}, the cluster has {state.gpu_models}"
            )
