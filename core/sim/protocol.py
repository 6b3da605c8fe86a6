"""The FGD paper's arrival protocol: shuffle, then inflate or deflate the workload.

From the paper's simulator (hkust-adsl/kubernetes-scheduler-simulator): pods are
sorted by name and shuffled with the run's seed; then, while the total GPU request
is below ``tune × cluster GPU capacity``, pods are drawn with replacement from the
original workload and appended (clones named ``<name>-tuned-<i>``), stopping at the
first draw that would overshoot; a workload already above the target instead loses
randomly chosen pods until it is not — and gets the last one back (at the end of
the sequence) when that lands nearer the target: on a small cluster one 8-GPU pod is
several percent of capacity, and stopping short by that much would leave no event at
130 % arrived. Pods then arrive one by one and never leave.

One deliberate difference: the simulator compares the target with a clone's
per-GPU share rather than its whole request (so an 8-GPU clone can overshoot by up
to 7 GPUs); here the whole request is compared.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.types import PodRequest

DEFAULT_TUNE = 1.3
"""Requested GPU as a multiple of cluster GPU capacity (the paper's 130 %)."""


def check_gpu_capacity(gpu_capacity_milli: int) -> None:
    """Refuse a cluster without GPUs: every figure here is a share of GPU capacity."""
    if gpu_capacity_milli <= 0:
        raise InputError(
            "the cluster has no GPUs: the simulator measures GPU allocation as a share of "
            "GPU capacity"
        )


def fgd_arrivals(
    pods: Sequence[PodRequest],
    *,
    gpu_capacity_milli: int,
    seed: int,
    tune: float = DEFAULT_TUNE,
) -> list[PodRequest]:
    """The arrival sequence for one seed: shuffled, then tuned to ``tune × capacity``."""
    if not pods:
        raise InputError("the workload has no pods")
    if tune < 0:
        raise InputError(f"tune must be >= 0, got {tune}")
    rng = np.random.default_rng(seed)
    by_name = sorted(pods, key=lambda pod: pod.name)
    order = rng.permutation(len(by_name))
    arrivals = [by_name[i] for i in order]
    check_gpu_capacity(gpu_capacity_milli)
    if tune == 0:
        return arrivals
    target = tune * gpu_capacity_milli
    requested = sum(pod.total_gpu_milli for pod in arrivals)
    if requested < target:
        if not any(pod.total_gpu_milli for pod in by_name):
            raise InputError("cannot inflate a workload without GPU requests to a GPU target")
        clone_index = 0
        while True:
            original = by_name[int(rng.integers(len(by_name)))]
            if requested + original.total_gpu_milli > target:
                break
            requested += original.total_gpu_milli
            arrivals.append(
                original.model_copy(update={"name": f"{original.name}-tuned-{clone_index}"})
            )
            clone_index += 1
    else:
        removed: PodRequest | None = None
        while requested > target and arrivals:
            removed = arrivals.pop(int(rng.integers(len(arrivals))))
            requested -= removed.total_gpu_milli
        if removed is not None:
            over_with_it = requested + removed.total_gpu_milli - target
            if over_with_it < target - requested:  # putting it back lands nearer the target
                arrivals.append(removed)
    return arrivals
