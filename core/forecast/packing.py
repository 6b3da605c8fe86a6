"""Sticky first-fit-decreasing packing of GPU-sharing pods onto GPUs.

Every few minutes the pods' reservations (a forecast peak of each resource — GPU
duty cycle and GPU memory) are packed onto GPUs so that each GPU's summed
reservations fit its capacity. Moving a running pod costs a restart, so the rule
prefers to leave a pod where it is:

1. **keep**: every pod still present stays on its GPU; where a GPU's pods no longer
   fit, pods are moved off it, the largest first (fewest moves), until the rest fit;
2. **place**: the moved pods and the new ones go, largest first, to the first GPU
   (lowest id) with room, else to a new GPU (the lowest unused id);
3. **drain**: while the GPU with the smallest reservation can be emptied into the
   other GPUs' room (first fit, largest first), its pods move and it is freed — a
   move is only made when it frees a GPU.

"Largest" is a pod's dominant share (its largest reservation over the capacity). A
pod whose reservation exceeds a whole GPU gets a GPU to itself. One rule for every
policy, so policies differ only by the reservations they ask for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import InputError

UNPLACED = -1


@dataclass(frozen=True)
class Packing:
    """``gpu[p]``: the GPU id of pod ``p`` (``UNPLACED`` for pods not asked for)."""

    gpu: IntArray
    moved: int
    """Pods present before and now that changed GPU."""

    @property
    def gpus_used(self) -> int:
        return int(np.unique(self.gpu[self.gpu != UNPLACED]).size)


class _Bins:
    """GPUs by id with their summed reservations."""

    def __init__(self, capacity: FloatArray) -> None:
        self.capacity = capacity
        self.load: dict[int, FloatArray] = {}
        self.pods: dict[int, list[int]] = {}

    def fits(self, gpu: int, demand: FloatArray) -> bool:
        return bool(np.all(self.load[gpu] + demand <= self.capacity * (1 + 1e-9)))

    def add(self, gpu: int, pod: int, demand: FloatArray) -> None:
        if gpu not in self.load:
            self.load[gpu] = np.zeros_like(self.capacity)
            self.pods[gpu] = []
        self.load[gpu] = self.load[gpu] + demand
        self.pods[gpu].append(pod)

    def remove(self, gpu: int, pod: int, demand: FloatArray) -> None:
        self.load[gpu] = self.load[gpu] - demand
        self.pods[gpu].remove(pod)
        if not self.pods[gpu]:
            del self.load[gpu], self.pods[gpu]

    def first_fit(self, demand: FloatArray, exclude: int = UNPLACED) -> int:
        for gpu in sorted(self.load):
            if gpu != exclude and self.fits(gpu, demand):
                return gpu
        return UNPLACED

    def new_id(self) -> int:
        used = set(self.load)
        return next(i for i in range(len(used) + 1) if i not in used)


def pack(
    demand: FloatArray,
    capacity: FloatArray,
    present: np.ndarray,
    previous: IntArray | None = None,
) -> Packing:
    """Pack the ``present`` pods' reservations ``demand[p, r]`` onto GPUs of ``capacity[r]``,
    starting from ``previous`` (GPU ids, ``UNPLACED`` for none); see the module docstring."""
    demand = np.asarray(demand, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    pods = demand.shape[0]
    if demand.ndim != 2 or demand.shape[1] != capacity.size or np.any(capacity <= 0):
        raise InputError(
            f"demand must be (pods, {capacity.size}) and capacity positive; "
            f"got {demand.shape} and {capacity.tolist()}"
        )
    if not np.all(np.isfinite(demand[present])) or np.any(demand[present] < 0):
        raise InputError("reservations must be finite and non-negative")
    before = np.full(pods, UNPLACED, dtype=np.int64) if previous is None else np.asarray(previous)
    size = (demand / capacity[None]).max(axis=1)
    bins = _Bins(capacity)
    waiting: list[int] = []
    # 1. keep: pods stay where they were; overfull GPUs shed their largest pods.
    for kept in np.flatnonzero(present & (before != UNPLACED)):
        bins.add(int(before[kept]), int(kept), demand[kept])
    for gpu in sorted(bins.load):
        while not np.all(bins.load[gpu] <= capacity * (1 + 1e-9)) and len(bins.pods[gpu]) > 1:
            largest = max(bins.pods[gpu], key=lambda p: (size[p], p))
            bins.remove(gpu, largest, demand[largest])
            waiting.append(largest)
    waiting += [int(p) for p in np.flatnonzero(present & (before == UNPLACED))]
    # 2. place: largest first, first fit, else a new GPU.
    for pod in sorted(waiting, key=lambda p: (-size[p], p)):
        target = bins.first_fit(demand[pod])
        bins.add(target if target != UNPLACED else bins.new_id(), pod, demand[pod])
    # 3. drain: empty the least reserved GPU into the others while that frees it.
    _drain(bins, demand, size)
    gpu_of = np.full(pods, UNPLACED, dtype=np.int64)
    for gpu, members in bins.pods.items():
        gpu_of[members] = gpu
    moved = int(np.sum(present & (before != UNPLACED) & (gpu_of != before)))
    return Packing(gpu=gpu_of, moved=moved)


def _drain(bins: _Bins, demand: FloatArray, size: FloatArray) -> None:
    tried: set[int] = set()
    while True:
        candidates = [g for g in bins.load if g not in tried]
        if len(bins.load) < 2 or not candidates:
            return
        gpu = min(candidates, key=lambda g: (float((bins.load[g] / bins.capacity).max()), g))
        tried.add(gpu)
        members = sorted(bins.pods[gpu], key=lambda p: (-size[p], p))
        trial = _Bins(bins.capacity)
        for other in bins.load:
            if other != gpu:
                trial.load[other] = bins.load[other].copy()
                trial.pods[other] = list(bins.pods[other])
        targets: list[int] = []
        for pod in members:
            target = trial.first_fit(demand[pod])
            if target == UNPLACED:
                break
            trial.add(target, pod, demand[pod])
            targets.append(target)
        if len(targets) == len(members):
            bins.load, bins.pods = trial.load, trial.pods
            tried.clear()  # the others' room changed: each may drain now
