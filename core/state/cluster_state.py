"""ClusterState: the cluster's resources as numpy struct-of-arrays.

Every policy scores all nodes at once, so per-node quantities live in flat arrays
indexed by node, and per-GPU free milli-GPU in an ``(N, G)`` matrix where ``G`` is
the largest GPU count of any node (columns past a node's own GPU count have zero
capacity and zero free, so they never fit anything and add nothing to sums).

Invariants (checked on every change, property-tested): free amounts stay within
``[0, capacity]``; ``release`` is the exact inverse of ``allocate``; the derived
per-node summaries (largest free GPU share, number of wholly free GPUs) always
match the matrix.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kubesage.core.arrays import BoolArray, IntArray
from kubesage.core.errors import CapacityError, InputError
from kubesage.core.state.fit import fit_mask
from kubesage.core.types import (
    GPU_MILLI_PER_GPU,
    MIG_COMPUTE_SLICES,
    MIG_MEMORY_SLICES,
    MigShape,
    NodeSpec,
    Placement,
    PodRequest,
)

NO_GPU_MODEL = -1
"""Model index of a node without GPUs."""

# Stamps are unique across every ClusterState in the process, so a cache keyed on
# (lineage, node stamp) can never confuse two states that diverged after a copy.
_stamps = itertools.count(1)
_lineages = itertools.count(1)


class ClusterState:
    """Capacity and free resources of N nodes, vectorised."""

    FREE_ARRAYS = (
        "cpu_free_milli",
        "memory_free_mib",
        "gpu_free_milli",
        "gpu_max_free_milli",
        "gpu_whole_free_count",
        "gpu_free_milli_node",
        "gpu_pod_count",
        "gpu_pod_kinds",
        "mig_free_slices",
        "mig_free_compute",
        "mig_free_media",
    )
    """The arrays that allocate and release change (everything else is fixed capacity)."""

    def __init__(self, nodes: Sequence[NodeSpec]):
        if not nodes:
            raise InputError("a cluster needs at least one node")
        names = [node.name for node in nodes]
        self.node_index: dict[str, int] = {}
        for index, name in enumerate(names):
            if name in self.node_index:
                raise InputError(f"duplicate node name '{name}'")
            self.node_index[name] = index
        self.nodes: tuple[NodeSpec, ...] = tuple(nodes)
        self.node_names: tuple[str, ...] = tuple(names)
        self.gpu_models: tuple[str, ...] = tuple(
            sorted({node.gpu_model for node in nodes if node.gpu_count and node.gpu_model})
        )
        model_lookup = {model: index for index, model in enumerate(self.gpu_models)}

        self.cpu_capacity_milli: IntArray = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self.memory_capacity_mib: IntArray = np.array([n.memory_mib for n in nodes], dtype=np.int64)
        self.gpu_count: IntArray = np.array([n.gpu_count for n in nodes], dtype=np.int64)
        self.gpu_model_index: IntArray = np.array(
            [
                model_lookup[n.gpu_model] if n.gpu_count and n.gpu_model else NO_GPU_MODEL
                for n in nodes
            ],
            dtype=np.int64,
        )
        max_gpus = max(1, int(self.gpu_count.max()))
        columns = np.arange(max_gpus)
        self.gpu_capacity_milli: IntArray = np.where(
            columns[None, :] < self.gpu_count[:, None], GPU_MILLI_PER_GPU, 0
        ).astype(np.int64)
        self.gpu_capacity_milli_total = int(self.gpu_capacity_milli.sum())
        self.cpu_capacity_milli_total = int(self.cpu_capacity_milli.sum())
        self.cpu_capacity_milli_max = int(self.cpu_capacity_milli.max())
        self.memory_capacity_mib_max = int(self.memory_capacity_mib.max())
        """The largest node's CPU and memory (capacities are fixed: read once)."""

        self.cpu_free_milli: IntArray = self.cpu_capacity_milli.copy()
        self.memory_free_mib: IntArray = self.memory_capacity_mib.copy()
        self.gpu_free_milli: IntArray = self.gpu_capacity_milli.copy()
        self.gpu_max_free_milli: IntArray = self.gpu_free_milli.max(axis=1)
        self.gpu_whole_free_count: IntArray = (
            (self.gpu_free_milli == GPU_MILLI_PER_GPU).sum(axis=1).astype(np.int64)
        )
        self.gpu_free_milli_total = self.gpu_capacity_milli_total
        self.gpu_free_milli_node: IntArray = self.gpu_free_milli.sum(axis=1)
        """Free milli-GPU per node, summed over its GPUs."""
        self.gpu_pod_count: IntArray = np.zeros((len(nodes), max_gpus + 1), dtype=np.int64)
        """GPU pods per node by kind: column 0 sharing pods, column k pods of k whole GPUs."""
        self.gpu_pod_kinds: IntArray = np.zeros(len(nodes), dtype=np.int64)
        """How many different kinds of GPU pod each node runs."""
        self.node_mig_enabled: BoolArray = np.array(
            [n.mig_enabled and n.gpu_count > 0 for n in nodes], dtype=bool
        )
        """Nodes whose GPUs are in MIG mode (they take MIG requests only)."""
        mig_gpu = self.node_mig_enabled[:, None] & (self.gpu_capacity_milli > 0)
        self.mig_free_slices: IntArray = np.where(mig_gpu, (1 << MIG_MEMORY_SLICES) - 1, 0)
        """Bit s set: memory slice s of that GPU is free (MIG GPUs only)."""
        self.mig_free_compute: IntArray = np.where(mig_gpu, MIG_COMPUTE_SLICES, 0)
        """Free compute slices per MIG GPU."""
        self.mig_free_media: IntArray = np.where(mig_gpu, 1, 0)
        """1 where a MIG GPU's media engines are free for a ``+me`` instance."""
        self.mig_instances: dict[int, frozenset[tuple[int, str, int]]] = {
            i: frozenset(n.mig_instances)
            for i, n in enumerate(nodes)
            if n.mig_instances is not None and self.node_mig_enabled[i]
        }
        """Nodes with a fixed MIG layout: the instances that exist (``NodeSpec.mig_instances``)."""
        self._model_masks: dict[tuple[str, ...], BoolArray] = {}
        self.capacity_cache: dict[Hashable, npt.NDArray[Any]] = {}
        """Arrays derived from the read-only capacity arrays only, by key (the fit rule
        keeps its per-request-shape capacity checks here); shared by copies, as those
        arrays are."""
        self.lineage = next(_lineages)
        """Shared with copies: equal (lineage, node stamp) means equal node state."""
        self.node_version: IntArray = np.zeros(len(nodes), dtype=np.int64)
        """Per-node stamp, renewed on every change, for caches that recompute changed nodes only."""
        self._cordoned: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        """Free milli, MIG slices, MIG compute and media engines hidden by :meth:`cordon_gpu`."""
        for array in (
            self.node_mig_enabled,
            self.cpu_capacity_milli,
            self.memory_capacity_mib,
            self.gpu_count,
            self.gpu_model_index,
            self.gpu_capacity_milli,
        ):
            array.setflags(write=False)

    # -- size and totals ---------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def max_gpus_per_node(self) -> int:
        return int(self.gpu_free_milli.shape[1])

    @property
    def gpu_allocated_milli_total(self) -> int:
        return self.gpu_capacity_milli_total - self.gpu_free_milli_total

    @property
    def gpu_allocation_ratio(self) -> float:
        """Allocated milli-GPU over capacity, 0..1 (0 for a cluster without GPUs)."""
        if self.gpu_capacity_milli_total == 0:
            return 0.0
        return self.gpu_allocated_milli_total / self.gpu_capacity_milli_total

    # -- fit checks ----------------------------------------------------------------------

    def gpu_model_mask(self, allowed_models: tuple[str, ...]) -> BoolArray:
        """Nodes whose GPU model is allowed (every GPU node when the tuple is empty)."""
        mask = self._model_masks.get(allowed_models)
        if mask is None:
            if allowed_models:
                wanted = [i for i, model in enumerate(self.gpu_models) if model in allowed_models]
                mask = np.isin(self.gpu_model_index, np.array(wanted, dtype=np.int64))
            else:
                mask = self.gpu_model_index != NO_GPU_MODEL
            mask.setflags(write=False)
            self._model_masks[allowed_models] = mask
        return mask

    def feasible(self, request: PodRequest, nodes: IntArray | None = None) -> BoolArray:
        """Boolean mask over nodes that can host ``request`` right now (over ``nodes``
        only, in their order, when given): the fit rule of :mod:`kubesage.core.state.fit`."""
        return fit_mask(self, request, nodes)

    def mig_slots(self, shape: MigShape, nodes: IntArray | None = None) -> BoolArray:
        """``(N, G, S)``: can an instance of ``shape`` start at its s-th allowed slot there?"""
        free = self.mig_free_slices if nodes is None else self.mig_free_slices[nodes]
        compute = self.mig_free_compute if nodes is None else self.mig_free_compute[nodes]
        masks = np.array([_slice_mask(start, shape.memory_slices) for start in shape.starts])
        slots: BoolArray = ((free[:, :, None] & masks) == masks) & (
            compute[:, :, None] >= shape.compute_slices
        )
        if shape.media_engines:
            media = self.mig_free_media if nodes is None else self.mig_free_media[nodes]
            slots &= media[:, :, None] > 0
        if self.mig_instances:
            published = self._published_slots(shape)
            slots &= published if nodes is None else published[nodes]
        return slots

    def _published_slots(self, shape: MigShape) -> BoolArray:
        """``(N, G, S)``: False where a node's fixed MIG layout has no ``shape`` instance
        at that slot (True on nodes whose layout is not fixed)."""
        key = ("mig_published", shape.profile, shape.starts)
        allowed = self.capacity_cache.get(key)
        if allowed is None:
            allowed = np.ones((*self.gpu_capacity_milli.shape, len(shape.starts)), dtype=bool)
            for node, instances in self.mig_instances.items():
                allowed[node] = False
                for gpu, profile, start in instances:
                    if (
                        profile == shape.profile
                        and start in shape.starts
                        and gpu < len(allowed[node])
                    ):
                        allowed[node, gpu, shape.starts.index(start)] = True
            allowed.setflags(write=False)
            self.capacity_cache[key] = allowed
        return allowed

    def gpus_that_fit(self, node: int, request: PodRequest) -> IntArray:
        """Indices of the GPUs on ``node`` with room for one share of ``request``."""
        free = self.gpu_free_milli[node, : self.gpu_count[node]]
        return np.flatnonzero(free >= request.gpu_milli).astype(np.int64)

    # -- changes -------------------------------------------------------------------------

    def allocate(self, request: PodRequest, placement: Placement) -> None:
        """Take ``request``'s resources at ``placement``; raise CapacityError if it does not fit."""
        node = self._check_placement(request, placement)
        if self.cpu_free_milli[node] < request.cpu_milli:
            raise CapacityError(f"{request.name}: not enough CPU on {placement.node}")
        if self.memory_free_mib[node] < request.memory_mib:
            raise CapacityError(f"{request.name}: not enough memory on {placement.node}")
        if request.num_gpu and not self.gpu_model_mask(request.gpu_models)[node]:
            raise CapacityError(
                f"{request.name}: GPU model of {placement.node} is not in {request.gpu_models}"
            )
        if request.num_gpu and (request.mig is not None) != bool(self.node_mig_enabled[node]):
            raise CapacityError(
                f"{request.name}: {'a MIG' if request.mig else 'a whole-GPU or shared'} request "
                f"cannot use {placement.node}, whose GPUs are "
                f"{'in' if self.node_mig_enabled[node] else 'not in'} MIG mode"
            )
        if request.mig is not None:
            gpu = placement.gpu_indices[0]
            mask = self._mig_mask(request, placement)
            if request.mig.media_engines and self.mig_free_media[node, gpu] < 1:
                raise CapacityError(
                    f"{request.name}: {request.mig.profile} needs the media engines of GPU "
                    f"{gpu} on {placement.node}, which another instance holds (one per GPU)"
                )
            if (self.mig_free_slices[node, gpu] & mask) != mask or (
                self.mig_free_compute[node, gpu] < request.mig.compute_slices
            ):
                raise CapacityError(
                    f"{request.name}: {request.mig.profile} does not fit at slice "
                    f"{placement.mig_start} of GPU {gpu} on {placement.node}"
                )
            instance = (gpu, request.mig.profile, placement.mig_start)
            if node in self.mig_instances and instance not in self.mig_instances[node]:
                raise CapacityError(
                    f"{request.name}: {placement.node} has no {request.mig.profile} instance "
                    f"at slice {placement.mig_start} of GPU {gpu} (its MIG layout is fixed)"
                )
        for gpu, milli in placement.gpu_milli_by_index:
            if self.gpu_free_milli[node, gpu] < milli:
                raise CapacityError(
                    f"{request.name}: GPU {gpu} on {placement.node} has "
                    f"{self.gpu_free_milli[node, gpu]} milli free, needs {milli}"
                )
        self._apply(node, request, placement, sign=-1)

    def release(self, request: PodRequest, placement: Placement) -> None:
        """Give back what :meth:`allocate` took; raise CapacityError if it was not taken."""
        node = self._check_placement(request, placement)
        if self.cpu_free_milli[node] + request.cpu_milli > self.cpu_capacity_milli[node]:
            raise CapacityError(f"{request.name}: releasing more CPU than {placement.node} has")
        if self.memory_free_mib[node] + request.memory_mib > self.memory_capacity_mib[node]:
            raise CapacityError(f"{request.name}: releasing more memory than {placement.node} has")
        for gpu, milli in placement.gpu_milli_by_index:
            if self.gpu_free_milli[node, gpu] + milli > GPU_MILLI_PER_GPU:
                raise CapacityError(
                    f"{request.name}: releasing {milli} milli on GPU {gpu} of {placement.node} "
                    "that was not allocated"
                )
        if request.mig is not None:
            mask = self._mig_mask(request, placement)
            if self.mig_free_slices[node, placement.gpu_indices[0]] & mask:
                raise CapacityError(
                    f"{request.name}: releasing MIG slices of {placement.node} that are free"
                )
        self._apply(node, request, placement, sign=+1)

    @staticmethod
    def _mig_mask(request: PodRequest, placement: Placement) -> int:
        assert request.mig is not None
        if placement.mig_start not in request.mig.starts:
            raise CapacityError(
                f"{request.name}: {request.mig.profile} cannot start at slice "
                f"{placement.mig_start} (allowed: {request.mig.starts})"
            )
        return _slice_mask(placement.mig_start, request.mig.memory_slices)

    def _check_placement(self, request: PodRequest, placement: Placement) -> int:
        node = placement.node_index
        if node >= self.num_nodes or self.node_names[node] != placement.node:
            raise CapacityError(
                f"{request.name}: placement names node '{placement.node}' at index {node}, "
                "which is not in this cluster"
            )
        gpus = placement.gpu_indices
        if len(gpus) != request.num_gpu or len(set(gpus)) != len(gpus):
            raise CapacityError(
                f"{request.name}: needs {request.num_gpu} distinct GPUs, placement has {gpus}"
            )
        for gpu, milli in placement.gpu_milli_by_index:
            if not 0 <= gpu < self.gpu_count[node]:
                raise CapacityError(f"{request.name}: {placement.node} has no GPU {gpu}")
            if milli != request.gpu_milli:
                raise CapacityError(
                    f"{request.name}: placement takes {milli} milli on GPU {gpu}, "
                    f"request asks {request.gpu_milli}"
                )
        return node

    def _apply(self, node: int, request: PodRequest, placement: Placement, sign: int) -> None:
        self.cpu_free_milli[node] += sign * request.cpu_milli
        self.memory_free_mib[node] += sign * request.memory_mib
        for gpu, milli in placement.gpu_milli_by_index:
            self.gpu_free_milli[node, gpu] += sign * milli
            self.gpu_free_milli_total += sign * milli
        if request.mig is not None:
            gpu = placement.gpu_indices[0]
            mask = self._mig_mask(request, placement)
            self.mig_free_slices[node, gpu] += sign * mask  # the bits are all clear or all set
            self.mig_free_compute[node, gpu] += sign * request.mig.compute_slices
            self.mig_free_media[node, gpu] += sign * int(request.mig.media_engines)
        if request.num_gpu:
            self.gpu_pod_count[node, gpu_pod_kind(request)] -= sign
            self.gpu_pod_kinds[node] = int(np.count_nonzero(self.gpu_pod_count[node]))
        self._refresh_gpu_totals(node)

    def _refresh_gpu_totals(self, node: int) -> None:
        row = self.gpu_free_milli[node]
        self.gpu_free_milli_node[node] = row.sum()
        self.gpu_max_free_milli[node] = row.max()
        self.gpu_whole_free_count[node] = int((row == GPU_MILLI_PER_GPU).sum())
        self.node_version[node] = next(_stamps)

    # -- cordoned GPUs --------------------------------------------------------------------

    def cordon_gpu(self, node: int, gpu: int) -> None:
        """Hide what is free on one GPU, so that nothing is placed there until uncordoned.

        For what-if planning on a copy (e.g. "re-place these pods anywhere but here").
        Do not allocate or release on a cordoned GPU.
        """
        key = (node, gpu)
        if key in self._cordoned:
            raise InputError(f"GPU {gpu} of {self.node_names[node]} is already cordoned")
        self._cordoned[key] = (
            int(self.gpu_free_milli[node, gpu]),
            int(self.mig_free_slices[node, gpu]),
            int(self.mig_free_compute[node, gpu]),
            int(self.mig_free_media[node, gpu]),
        )
        self.gpu_free_milli_total -= int(self.gpu_free_milli[node, gpu])
        self.gpu_free_milli[node, gpu] = 0
        self.mig_free_slices[node, gpu] = 0
        self.mig_free_compute[node, gpu] = 0
        self.mig_free_media[node, gpu] = 0
        self._refresh_gpu_totals(node)

    def uncordon_gpu(self, node: int, gpu: int) -> None:
        """Give a cordoned GPU its free capacity back."""
        saved = self._cordoned.pop((node, gpu), None)
        if saved is None:
            raise InputError(f"GPU {gpu} of {self.node_names[node]} is not cordoned")
        milli, slices, compute, media = saved
        self.gpu_free_milli[node, gpu] = milli
        self.gpu_free_milli_total += milli
        self.mig_free_slices[node, gpu] = slices
        self.mig_free_compute[node, gpu] = compute
        self.mig_free_media[node, gpu] = media
        self._refresh_gpu_totals(node)

    # -- copies --------------------------------------------------------------------------

    def copy(self) -> ClusterState:
        """An independent copy of the free amounts; capacity arrays are shared (read-only)."""
        clone = object.__new__(ClusterState)
        clone.__dict__.update(self.__dict__)
        for name in (*self.FREE_ARRAYS, "node_version"):
            setattr(clone, name, getattr(self, name).copy())
        clone._cordoned = dict(self._cordoned)
        return clone

    def placement(
        self,
        node: int,
        gpu_indices: Sequence[int],
        request: PodRequest,
        mig_start: int | None = None,
    ) -> Placement:
        """Build a Placement on ``node`` taking ``request.gpu_milli`` on each listed GPU."""
        return Placement(
            node=self.node_names[node],
            node_index=node,
            gpu_milli_by_index=tuple((int(g), request.gpu_milli) for g in gpu_indices),
            mig_start=mig_start,
        )


def gpu_pod_kind(request: PodRequest) -> int:
    """Column of :attr:`ClusterState.gpu_pod_count` for a GPU request (0 = sharing)."""
    return 0 if request.is_gpu_sharing else request.num_gpu


def _slice_mask(start: int, size: int) -> int:
    """Bits ``start .. start+size−1`` set."""
    return ((1 << size) - 1) << start
