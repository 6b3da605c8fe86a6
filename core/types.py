"""Typed specs at the core's edges: nodes, requests, placements and decisions.

These are pydantic models (validated, frozen) used where data enters or leaves the
core. Hot paths work on :class:`kubesage.core.state.ClusterState`'s numpy arrays
instead; a spec is converted once, when a node joins the state or a request arrives.

Units are in the names: ``_milli`` is thousandths of a CPU core or of one GPU,
``_mib`` is mebibytes, ``_s`` is seconds.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

GPU_MILLI_PER_GPU = 1000
"""One whole GPU in milli-GPU."""
MAX_GPUS_PER_NODE = 64
"""The most GPUs a node may have (and so a pod may ask for)."""

NonNegativeInt = Annotated[int, Field(ge=0)]

MIG_MEMORY_SLICES = 8
"""Memory slices of a MIG-capable GPU (A100, H100, H200)."""
MIG_COMPUTE_SLICES = 7


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeSpec(_Frozen):
    """One schedulable node. GPUs in a node are homogeneous (one model)."""

    name: str = Field(min_length=1)
    """Node name, unique in a cluster."""
    cpu_milli: NonNegativeInt
    """Allocatable CPU in milli-cores."""
    memory_mib: NonNegativeInt
    """Allocatable memory in MiB."""
    gpu_count: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_NODE)] = 0
    """Number of GPUs on the node."""
    gpu_model: str | None = None
    """GPU model name (for example ``V100M32``, ``H100-80GB``); ``None`` when there are no GPUs."""
    gpu_memory_mib: NonNegativeInt | None = None
    """Memory of one GPU in MiB, when known."""
    mig_enabled: bool = False
    """The node's GPUs are in MIG mode: they take MIG requests only."""
    mig_instances: tuple[tuple[int, str, int], ...] | None = None
    """Where the MIG layout is fixed (static instances a DRA driver publishes): the
    instances that exist, as ``(GPU index, profile, start slice)``; MIG requests go to
    these only. None (the default): any valid slot of any profile can be created."""
    zone: str | None = None
    """Value of the ``topology.kubernetes.io/zone`` label."""
    rack: str | None = None
    """Rack the node sits in (from a rack label or a topology file)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Other node labels, kept for selectors."""

    @model_validator(mode="after")
    def _gpu_model_present(self) -> NodeSpec:
        if self.gpu_count > 0 and not self.gpu_model:
            raise ValueError(f"node '{self.name}' has {self.gpu_count} GPUs but no gpu_model")
        return self


class MigShape(_Frozen):
    """The geometry of a MIG profile, as the core needs it (adapters know the names)."""

    profile: str
    """Profile name, e.g. ``3g.40gb``."""
    memory_slices: Annotated[int, Field(ge=1, le=MIG_MEMORY_SLICES)]
    compute_slices: Annotated[int, Field(ge=1, le=MIG_COMPUTE_SLICES)]
    starts: tuple[int, ...]
    """Allowed start memory slices."""
    media_engines: bool = False
    """The instance takes the GPU's media engines (a ``+me`` profile): one per GPU."""

    @model_validator(mode="after")
    def _fits(self) -> MigShape:
        if not self.starts:
            raise ValueError(f"MIG profile {self.profile} has no allowed start slot")
        for start in self.starts:
            if not 0 <= start <= MIG_MEMORY_SLICES - self.memory_slices:
                raise ValueError(f"MIG profile {self.profile} cannot start at slice {start}")
        return self

    @property
    def gpu_milli(self) -> int:
        """The GPU share the instance counts as: its share of the memory slices."""
        return GPU_MILLI_PER_GPU * self.memory_slices // MIG_MEMORY_SLICES


class PodRequest(_Frozen):
    """What one pod asks for.

    GPU requests follow the openb convention: ``num_gpu == 1`` with
    ``gpu_milli < 1000`` is a GPU-sharing pod taking that share of a single GPU;
    otherwise every one of ``num_gpu`` GPUs is taken whole (``gpu_milli == 1000``).
    """

    name: str = Field(min_length=1)
    """Pod name, unique in a workload."""
    cpu_milli: NonNegativeInt
    """Requested CPU in milli-cores."""
    memory_mib: NonNegativeInt
    """Requested memory in MiB."""
    num_gpu: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_NODE)] = 0
    """Number of GPUs."""
    gpu_milli: Annotated[int, Field(ge=0, le=GPU_MILLI_PER_GPU)] = 0
    """Share of each GPU in milli-GPU (1000 = whole)."""
    gpu_models: tuple[str, ...] = ()
    """Allowed GPU models; empty means any model."""
    qos: str = "LS"
    """Quality-of-service class from the trace (``LS``, ``BE``, ``Guaranteed``, ...)."""
    priority: int = 0
    """Scheduling priority; higher is more important (used by defragmentation)."""
    gang_id: str | None = None
    """Pods sharing a gang id are placed all-or-nothing."""
    mig: MigShape | None = None
    """A MIG instance request: one instance of this profile on a MIG-mode GPU."""
    creation_time_s: float | None = None
    """Arrival time in a time replay."""
    deletion_time_s: float | None = None
    """Departure time in a time replay."""

    @model_validator(mode="after")
    def _gpu_shape(self) -> PodRequest:
        if self.mig is not None and (self.num_gpu != 1 or self.gpu_milli != self.mig.gpu_milli):
            raise ValueError(
                f"pod '{self.name}': a MIG request takes num_gpu=1 and gpu_milli="
                f"{self.mig.gpu_milli} ({self.mig.profile})"
            )
        if self.num_gpu == 0 and self.gpu_milli != 0:
            raise ValueError(f"pod '{self.name}': gpu_milli={self.gpu_milli} with num_gpu=0")
        if self.num_gpu > 0 and self.gpu_milli == 0:
            raise ValueError(f"pod '{self.name}': num_gpu={self.num_gpu} with gpu_milli=0")
        if self.num_gpu > 1 and self.gpu_milli != GPU_MILLI_PER_GPU:
            raise ValueError(
                f"pod '{self.name}': a multi-GPU pod must take whole GPUs "
                f"(num_gpu={self.num_gpu}, gpu_milli={self.gpu_milli})"
            )
        if (
            self.creation_time_s is not None
            and self.deletion_time_s is not None
            and self.deletion_time_s < self.creation_time_s
        ):
            raise ValueError(
                f"pod '{self.name}': deletion_time_s {self.deletion_time_s} is before "
                f"creation_time_s {self.creation_time_s}"
            )
        return self

    @property
    def is_gpu_sharing(self) -> bool:
        """True for a pod that takes part of one GPU by time-sharing (not a MIG instance)."""
        return self.mig is None and self.num_gpu == 1 and self.gpu_milli < GPU_MILLI_PER_GPU

    @property
    def total_gpu_milli(self) -> int:
        """All the milli-GPU this pod takes across its GPUs."""
        return self.num_gpu * self.gpu_milli


class Placement(_Frozen):
    """Where a request went: a node and the milli-GPU taken on each chosen GPU."""

    node: str
    """Node name."""
    node_index: NonNegativeInt
    """Index of the node in the ClusterState it was made against."""
    gpu_milli_by_index: tuple[tuple[int, int], ...] = ()
    """``(gpu_index, milli)`` pairs, one per GPU used."""
    mig_start: Annotated[int, Field(ge=0, lt=MIG_MEMORY_SLICES)] | None = None
    """For a MIG request: the memory slice its instance starts at."""

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        return tuple(index for index, _ in self.gpu_milli_by_index)


Migration = tuple[str, Placement]
"""A running pod (by name) and where it moves to (the simulator's defragmenter and the
GPU adapter's defrag planner both speak it)."""


class Decision(_Frozen):
    """A policy's answer for one request."""

    request: str
    """Name of the request decided."""
    placement: Placement | None
    """The chosen placement, or ``None`` when no node fits."""
    score: float
    """The chosen node's score under the policy (higher is better)."""
    policy: str
    """Name of the policy that decided."""
    explanation: str
    """One human sentence: why this node (or why none)."""
    feasible_nodes: NonNegativeInt = 0
    """How many nodes passed the fit check."""

    @property
    def scheduled(self) -> bool:
        return self.placement is not None
