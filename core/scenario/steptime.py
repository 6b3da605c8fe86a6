"""The step-time model: how fast a training job trains on the GPUs it was given.

One optimiser step of a job of ``P`` parameters on ``n`` GPUs, ``D`` tokens a step
(``TrainingSpec.global_batch_tokens``, the same whatever ``n``: a shrunk job keeps
its global batch by accumulating gradients):

* compute ``t_c = 6·P·D / (n · peak · MFU)``: forward and backward cost about
  6 FLOPs per parameter per token (Kaplan et al. 2020, *Scaling Laws for Neural
  Language Models*, §2.1; the same count as Narayanan et al. 2021, *Efficient
  Large-Scale Language Model Training on GPU Clusters Using Megatron-LM*, whose
  FLOPs count without activation recomputation is 6 · params · tokens for large
  hidden sizes); ``peak`` is the GPU's dense BF16 Tensor Core rate
  (:data:`GPU_MODELS`), ``MFU`` the share of it large dense training reaches (:data:`MFU`).
* communication ``t_a = f · B · 2(n−1)/n / busbw``: a ring AllReduce of ``B`` bytes
  sends ``2(n−1)/n · B`` bytes over every ring hop, so it takes that over the
  slowest hop's bandwidth, which is what NCCL calls the bus bandwidth
  (``busbw = algbw · 2(n−1)/n`` with ``algbw = B / t``; NVIDIA nccl-tests,
  ``doc/PERFORMANCE.md``). ``B`` is the gradient of the whole model in BF16,
  :data:`GRADIENT_BYTES_PER_PARAM` bytes a parameter. ``f`` is 1 for plain data
  parallelism and :data:`ZERO3_TRAFFIC_FACTOR` for a model whose training state
  does not fit one GPU (see :func:`parallelism`). A one-GPU job has no AllReduce.
* step ``t = t_c + t_a − overlap · min(t_c, t_a)``: by default nothing overlaps
  (``overlap = 0``: the AllReduce starts after the backward pass); ``overlap = 1``
  hides the shorter of the two entirely.

:func:`ring_busbw_with_contention` gives each job's busbw from the DRTG for the rings
of all jobs running at once, sharing rack and zone uplinks between them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.scenario.model import TrainingSpec
from kubesage.core.topology.graph import DRTG
from kubesage.core.topology.indicators import available_bandwidth


@dataclass(frozen=True)
class GpuModel:
    """What the step-time model needs to know about a GPU type."""

    peak_bf16_dense_tflops: float
    """Dense (no structured sparsity) BF16 Tensor Core peak, TFLOP/s."""
    memory_gb: float
    """GPU memory, GB (10⁹ bytes)."""
    source: str


GPU_MODELS: dict[str, GpuModel] = {
    "H100-80GB": GpuModel(
        peak_bf16_dense_tflops=989.0,
        memory_gb=80.0,
        source="NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: BF16 Tensor Core "
        "1,979 TFLOPS with sparsity, so 989 dense; 80 GB HBM3",
    ),
    "H200-141GB": GpuModel(
        peak_bf16_dense_tflops=989.0,
        memory_gb=141.0,
        source="NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: BF16 Tensor Core "
        "1,979 TFLOPS with sparsity (the H100's compute), so 989 dense; 141 GB HBM3e",
    ),
}
"""GPU types by the DRTG node templates' ``gpu_model`` names."""

MFU = 0.40
"""Model FLOPs utilisation of large dense training on H100s: Meta's Llama 3 405B
pre-training reports 38–43 % BF16 MFU on 8 192–16 384 H100s (Dubey et al. 2024,
*The Llama 3 Herd of Models*, Table 4). That figure already pays for the
communication the job could not hide, so counting the AllReduce on top (with no
overlap) errs on the slow side, for every placement alike."""
FLOPS_PER_PARAM_TOKEN = 6.0
"""Training FLOPs per parameter per token (Kaplan et al. 2020, §2.1)."""
GRADIENT_BYTES_PER_PARAM = 2.0
"""Gradients are reduced in BF16 (2 bytes each); a job that reduces in FP32 would
move twice as much."""
TRAINING_STATE_BYTES_PER_PARAM = 16.0
"""Mixed-precision Adam holds 16 bytes a parameter: FP16/BF16 weights and gradients
(2 + 2) and FP32 master weights, momentum and variance (12); Rajbhandari et al.
2020, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, §3.1.
Activations come on top and are not counted."""
ZERO3_TRAFFIC_FACTOR = 1.5
"""ZeRO stage 3 (PyTorch FSDP's full sharding) moves 3Ψ a step against data
parallelism's 2Ψ: a reduce-scatter of the gradients plus an all-gather of the
parameters for the forward and again for the backward pass (ZeRO paper, §7.2.2)."""


class Parallelism(StrEnum):
    DATA_PARALLEL = "data-parallel"
    """Every GPU holds the whole training state; gradients are all-reduced."""
    ZERO3 = "zero-3"
    """The state is sharded over the job's GPUs (ZeRO-3 / FSDP)."""


def gpu_model(name: str | None) -> GpuModel:
    """The GPU type called ``name``; InputError naming the known ones otherwise."""
    if name is None or name not in GPU_MODELS:
        raise InputError(f"unknown GPU model {name!r}; known: {', '.join(GPU_MODELS)}")
    return GPU_MODELS[name]


def _check_params(model_params_b: float) -> None:
    if not (math.isfinite(model_params_b) and model_params_b > 0):
        raise InputError(
            f"model size must be a positive number of parameters, got {model_params_b}"
        )


def parallelism(model_params_b: float, gpu: str) -> Parallelism:
    """Data parallelism when the training state (16 bytes a parameter) fits one GPU's
    memory (up to 5 B parameters on an 80 GB GPU, 8.8 B on 141 GB), else ZeRO-3."""
    _check_params(model_params_b)
    state_gb = model_params_b * TRAINING_STATE_BYTES_PER_PARAM
    return Parallelism.DATA_PARALLEL if state_gb <= gpu_model(gpu).memory_gb else Parallelism.ZERO3


def min_gpus(model_params_b: float, gpu: str) -> int:
    """The fewest GPUs whose memory holds the job's sharded training state (ZeRO-3);
    the step-time model assumes a job has at least these."""
    _check_params(model_params_b)
    state_gb = model_params_b * TRAINING_STATE_BYTES_PER_PARAM
    return max(1, math.ceil(state_gb / gpu_model(gpu).memory_gb - 1e-9))


def compute_time_s(spec: TrainingSpec, gpus: int, gpu: str) -> float:
    """Seconds of computation per step on ``gpus`` GPUs of type ``gpu``."""
    _check_gpus(gpus)
    _check_params(spec.model_params_b)
    if spec.global_batch_tokens < 1:
        raise InputError(f"global_batch_tokens must be positive, got {spec.global_batch_tokens}")
    flops = FLOPS_PER_PARAM_TOKEN * spec.model_params_b * 1e9 * spec.global_batch_tokens
    return flops / (gpus * gpu_model(gpu).peak_bf16_dense_tflops * 1e12 * MFU)


def allreduce_time_s(spec: TrainingSpec, gpus: int, gpu: str, busbw_gbps: float) -> float:
    """Seconds per step of gradient traffic over a ring of ``gpus`` GPUs at
    ``busbw_gbps`` (GB/s, NCCL's bus bandwidth); 0 for one GPU."""
    _check_gpus(gpus)
    if math.isnan(busbw_gbps) or busbw_gbps <= 0:
        raise InputError(f"bus bandwidth must be positive GB/s, got {busbw_gbps}")
    sharded = parallelism(spec.model_params_b, gpu) is Parallelism.ZERO3
    factor = ZERO3_TRAFFIC_FACTOR if sharded else 1.0
    if gpus == 1:
        return 0.0
    gradient_bytes = GRADIENT_BYTES_PER_PARAM * spec.model_params_b * 1e9
    return factor * gradient_bytes * 2 * (gpus - 1) / gpus / (busbw_gbps * 1e9)


def step_time_s(
    spec: TrainingSpec, gpus: int, gpu_model: str, busbw_gbps: float, *, overlap: float = 0.0
) -> float:
    """Seconds per optimiser step (see the module docstring); ``overlap`` in [0, 1] is the
    share of the shorter of compute and communication hidden under the other."""
    if not 0.0 <= overlap <= 1.0:
        raise InputError(f"overlap must be in [0, 1], got {overlap}")
    compute = compute_time_s(spec, gpus, gpu_model)
    communication = allreduce_time_s(spec, gpus, gpu_model, busbw_gbps)
    return compute + communication - overlap * min(compute, communication)


def tokens_per_s(
    spec: TrainingSpec, gpus: int, gpu_model: str, busbw_gbps: float, *, overlap: float = 0.0
) -> float:
    """Training throughput: the step's tokens over its time."""
    return spec.global_batch_tokens / step_time_s(
        spec, gpus, gpu_model, busbw_gbps, overlap=overlap
    )


def _check_gpus(gpus: int) -> None:
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise InputError(f"gpus must be a positive whole number, got {gpus!r}")


# -- bus bandwidth of rings placed on the DRTG -----------------------------------------


def _slowest_hop_gbps(drtg: DRTG, ring: Sequence[int]) -> float:
    """The ring's slowest hop alone on the cluster (its own hops sharing NICs and uplinks):
    NCCL's bus bandwidth of the ring (``DRTG.ring_bus_bandwidth``)."""
    return drtg.ring_bus_bandwidth(ring)


def _check_rings(drtg: DRTG, rings: Mapping[str, Sequence[int]]) -> None:
    owner: dict[int, str] = {}
    for name, ring in rings.items():
        for gpu in ring:
            if isinstance(gpu, bool) or not 0 <= int(gpu) < drtg.num_gpus:
                raise InputError(f"ring '{name}': GPU {gpu} is not in [0, {drtg.num_gpus})")
            if int(gpu) in owner:
                raise InputError(
                    f"GPU {gpu} is in ring '{owner[int(gpu)]}' and ring '{name}'; "
                    "training members take whole GPUs"
                )
            owner[int(gpu)] = name
        if len(ring) == 0:
            raise InputError(f"ring '{name}' has no GPUs")


def _uplinks_left(drtg: DRTG, ring: Sequence[int]) -> list[tuple[int, ...]]:
    """For each hop ``i → i+1`` of the ring, the rack and zone uplink edges it leaves or
    enters through (none inside a rack)."""
    hops: list[tuple[int, ...]] = []
    for i, gpu in enumerate(ring):
        rack_a = int(drtg.node_rack[drtg.gpu_node[gpu]])
        rack_b = int(drtg.node_rack[drtg.gpu_node[ring[(i + 1) % len(ring)]]])
        edges: tuple[int, ...] = ()
        if rack_a != rack_b:
            edges = (int(drtg.rack_uplink_edge[rack_a]), int(drtg.rack_uplink_edge[rack_b]))
            zone_a, zone_b = int(drtg.rack_zone[rack_a]), int(drtg.rack_zone[rack_b])
            if zone_a != zone_b:
                edges += (int(drtg.zone_uplink_edge[zone_a]), int(drtg.zone_uplink_edge[zone_b]))
        hops.append(edges)
    return hops


def ring_busbw_with_contention(drtg: DRTG, rings: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """NCCL bus bandwidth (GB/s) of each ring (global GPU ids in ring order) when all of
    them run at once; ``inf`` for a one-GPU ring.

    Each ring alone gets its slowest hop on the DRTG (NVSwitch inside a node, the NIC
    rails, rack and zone uplinks shared by its own hops through them). On top of that,
    ``k`` rings crossing the same rack or zone uplink each get ``1/k`` of its available
    bandwidth, which that ring's hops through the uplink share again; a ring's busbw
    is the minimum over its hops. A ring crosses an uplink in both directions equally
    often, and links are full duplex, so counting rings per uplink is counting them
    per direction. Paths inside a node (NVSwitch, PCIe) and the NICs are not shared
    between jobs: members take whole GPUs, and a NIC serves a pair of GPUs.
    """
    _check_rings(drtg, rings)
    hops = {name: _uplinks_left(drtg, ring) for name, ring in rings.items() if len(ring) > 1}
    rings_on: dict[int, int] = {}
    for ring_hops in hops.values():
        for edge in {edge for hop in ring_hops for edge in hop}:
            rings_on[edge] = rings_on.get(edge, 0) + 1
    edges = np.array(sorted(rings_on), dtype=np.int64)
    available = dict(
        zip(edges.tolist(), available_bandwidth(drtg.indicators[edges]).tolist(), strict=True)
    )
    result: dict[str, float] = {}
    for name, ring in rings.items():
        if len(ring) < 2:
            result[name] = math.inf
            continue
        own_hops: dict[int, int] = {}
        for hop in hops[name]:
            for edge in hop:
                own_hops[edge] = own_hops.get(edge, 0) + 1
        # A ring enters a rack (or zone) as often as it leaves it, and own_hops counts
        # both: half of it is the ring's hops through the uplink in each direction.
        slowest = _slowest_hop_gbps(drtg, ring)
        for edge, count in own_hops.items():
            slowest = min(slowest, available[edge] / (rings_on[edge] * (count / 2)))
        result[name] = slowest
    return result


def ring_busbw(drtg: DRTG, ring: Sequence[int]) -> float:
    """NCCL bus bandwidth (GB/s) of one ring alone on the cluster; ``inf`` for one GPU."""
    return ring_busbw_with_contention(drtg, {"ring": ring})["ring"]
