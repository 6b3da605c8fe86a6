"""Synthetic clusters and workloads shaped like the openb GPU trace.

``make run`` and the tests need a realistic cluster and workload without network
access or the real trace files, so this module draws them from tables that
summarise Alibaba's openb trace (cluster-trace-gpu-v2023, ``default`` pod list,
8,152 pods on 1,213 GPU nodes). The tables are aggregate statistics, not trace
rows:

* node types: GPU model, GPUs per node, CPU and memory, weighted by how many openb
  GPU nodes have that shape;
* pod categories: CPU-only 13.3 %, GPU-sharing 37.8 %, one whole GPU 48.0 %, two
  GPUs 0.20 %, four 0.18 %, eight 0.54 %;
* per category, the most common (CPU, memory) request shapes covering at least 90 %
  of that category's pods, weighted by their counts;
* GPU-sharing pods' milli-GPU share, weighted by its histogram;
* arrivals as a Poisson process and lifetimes log-normal with the trace's median
  (540 s) and 90th percentile (6,574 s), for time replay.

Everything is drawn from a ``numpy.random.Generator`` seeded by the caller, so a
seed gives the same cluster and workload on every machine.
"""

from __future__ import annotations

import math

import numpy as np

from kubesage.core.types import GPU_MILLI_PER_GPU, NodeSpec, PodRequest

# (gpu_model, gpus, cpu_milli, memory_mib, openb node count)
OPENB_NODE_TYPES: tuple[tuple[str, int, int, int, int], ...] = (
    ("G2", 8, 96_000, 393_216, 549),
    ("T4", 2, 104_000, 524_288, 387),
    ("P100", 2, 16_000, 122_880, 107),
    ("G3", 8, 128_000, 786_432, 39),
    ("V100M16", 4, 32_000, 131_072, 28),
    ("P100", 2, 64_000, 262_144, 22),
    ("V100M32", 8, 96_000, 786_432, 21),
    ("V100M16", 1, 8_000, 32_768, 19),
    ("T4", 4, 96_000, 393_216, 17),
    ("V100M32", 4, 48_000, 376_832, 9),
    ("V100M16", 8, 64_000, 262_144, 8),
    ("P100", 1, 8_000, 61_440, 3),
    ("P100", 2, 8_000, 61_440, 2),
    ("A10", 1, 128_000, 1_048_576, 2),
)

GPU_MEMORY_MIB: dict[str, int] = {
    "G2": 16_384,
    "G3": 32_768,
    "T4": 15_360,
    "P100": 16_384,
    "V100M16": 16_384,
    "V100M32": 32_768,
    "A10": 24_576,
}
"""Per-GPU memory by openb model name (G2/G3 are anonymised; sizes are estimates)."""

# category -> (num_gpu, share of pods)
OPENB_POD_CATEGORIES: dict[str, tuple[int, float]] = {
    "cpu": (0, 1088 / 8152),
    "share": (1, 3078 / 8152),
    "gpu1": (1, 3911 / 8152),
    "gpu2": (2, 16 / 8152),
    "gpu4": (4, 15 / 8152),
    "gpu8": (8, 44 / 8152),
}

# category -> ((cpu_milli, memory_mib, count), ...): shapes covering >= 90 % of the category
OPENB_POD_SHAPES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "cpu": (
        (12_500, 57_344, 364),
        (32_000, 49_152, 284),
        (8_000, 30_517, 163),
        (15_400, 51_200, 120),
        (16_500, 51_200, 95),
    ),
    "share": (
        (3_152, 5_600, 1122),
        (11_908, 47_104, 625),
        (8_000, 30_517, 486),
        (4_000, 22_888, 189),
        (4_000, 15_258, 182),
        (4_152, 10_600, 152),
        (4_000, 30_517, 136),
    ),
    "gpu1": (
        (11_300, 49_152, 857),
        (11_400, 48_128, 534),
        (3_152, 5_600, 470),
        (18_708, 64_512, 255),
        (9_810, 41_560, 195),
        (12_000, 24_576, 158),
        (15_700, 58_368, 158),
        (11_908, 47_104, 153),
        (16_000, 32_768, 108),
        (8_000, 16_384, 104),
        (4_000, 24_576, 104),
        (12_000, 16_384, 99),
        (14_200, 58_368, 93),
        (24_200, 93_184, 84),
        (11_400, 77_824, 65),
        (8_000, 32_768, 55),
        (11_900, 77_824, 51),
    ),
    "gpu2": ((16_200, 66_560, 7), (6_000, 65_536, 3), (30_200, 160_768, 3), (17_400, 43_008, 2)),
    "gpu4": ((32_200, 132_096, 9), (32_000, 131_072, 3), (60_200, 320_512, 3)),
    "gpu8": (
        (88_000, 327_680, 18),
        (64_200, 263_168, 18),
        (120_000, 737_280, 3),
        (64_000, 262_144, 3),
    ),
}

# gpu_milli of GPU-sharing pods -> count in openb default
OPENB_SHARE_MILLI: tuple[tuple[int, int], ...] = (
    (50, 7),
    (110, 24),
    (140, 1),
    (160, 74),
    (220, 62),
    (230, 140),
    (270, 4),
    (290, 1),
    (320, 328),
    (330, 7),
    (350, 6),
    (370, 47),
    (440, 2),
    (460, 128),
    (470, 750),
    (480, 19),
    (550, 72),
    (590, 75),
    (650, 253),
    (810, 1078),
)

LIFETIME_MEDIAN_S = 540.0
LIFETIME_P90_S = 6_574.0
_Z90 = 1.2815515655446004  # standard normal 90th percentile


def synthetic_cluster(
    num_nodes: int,
    *,
    seed: int = 0,
    nodes_per_rack: int = 32,
    racks_per_zone: int = 8,
) -> list[NodeSpec]:
    """``num_nodes`` GPU nodes drawn from the openb node-type mix, laid out in racks and zones."""
    if num_nodes <= 0:
        raise ValueError(f"num_nodes must be positive, got {num_nodes}")
    if nodes_per_rack <= 0 or racks_per_zone <= 0:
        raise ValueError(
            f"nodes_per_rack and racks_per_zone must be positive, got {nodes_per_rack} "
            f"and {racks_per_zone}"
        )
    rng = np.random.default_rng(seed)
    weights = np.array([t[4] for t in OPENB_NODE_TYPES], dtype=float)
    kinds = rng.choice(len(OPENB_NODE_TYPES), size=num_nodes, p=weights / weights.sum())
    nodes = []
    width = max(5, len(str(num_nodes - 1)))
    for index, kind in enumerate(kinds):
        model, gpus, cpu, memory, _ = OPENB_NODE_TYPES[int(kind)]
        rack = index // nodes_per_rack
        nodes.append(
            NodeSpec(
                name=f"synthetic-node-{index:0{width}d}",
                cpu_milli=cpu,
                memory_mib=memory,
                gpu_count=gpus,
                gpu_model=model,
                gpu_memory_mib=GPU_MEMORY_MIB[model],
                rack=f"rack-{rack}",
                zone=f"zone-{rack // racks_per_zone}",
            )
        )
    return nodes


def synthetic_workload(
    num_pods: int,
    *,
    seed: int = 0,
    gpu_models: tuple[str, ...] = (),
    gpu_constraint_fraction: float = 0.0,
    mean_interarrival_s: float = 60.0,
) -> list[PodRequest]:
    """``num_pods`` pods drawn from the openb request statistics.

    ``gpu_constraint_fraction`` of the GPU pods get a one-model constraint drawn from
    ``gpu_models`` (the ``gpuspec`` variants stress this); arrivals and lifetimes are
    filled in for time replay.
    """
    if num_pods <= 0:
        raise ValueError(f"num_pods must be positive, got {num_pods}")
    if not 0.0 <= gpu_constraint_fraction <= 1.0:
        raise ValueError(
            f"gpu_constraint_fraction must be in [0, 1], got {gpu_constraint_fraction}"
        )
    if mean_interarrival_s <= 0:
        raise ValueError(f"mean_interarrival_s must be positive, got {mean_interarrival_s}")
    if gpu_constraint_fraction and not gpu_models:
        raise ValueError("gpu_constraint_fraction needs gpu_models to draw from")
    rng = np.random.default_rng(seed)
    names = list(OPENB_POD_CATEGORIES)
    shares = np.array([OPENB_POD_CATEGORIES[c][1] for c in names])
    categories = rng.choice(len(names), size=num_pods, p=shares / shares.sum())
    share_values = np.array([m for m, _ in OPENB_SHARE_MILLI])
    share_weights = np.array([c for _, c in OPENB_SHARE_MILLI], dtype=float)
    arrivals = np.cumsum(rng.exponential(mean_interarrival_s, size=num_pods))
    sigma = math.log(LIFETIME_P90_S / LIFETIME_MEDIAN_S) / _Z90
    lifetimes = rng.lognormal(math.log(LIFETIME_MEDIAN_S), sigma, size=num_pods)
    width = max(5, len(str(num_pods - 1)))
    pods = []
    for index in range(num_pods):
        category = names[int(categories[index])]
        num_gpu = OPENB_POD_CATEGORIES[category][0]
        shapes = OPENB_POD_SHAPES[category]
        counts = np.array([s[2] for s in shapes], dtype=float)
        cpu, memory, _ = shapes[int(rng.choice(len(shapes), p=counts / counts.sum()))]
        if category == "share":
            gpu_milli = int(rng.choice(share_values, p=share_weights / share_weights.sum()))
        else:
            gpu_milli = GPU_MILLI_PER_GPU if num_gpu else 0
        allowed: tuple[str, ...] = ()
        if num_gpu and gpu_constraint_fraction and rng.random() < gpu_constraint_fraction:
            allowed = (str(rng.choice(gpu_models)),)
        creation = float(round(arrivals[index], 3))
        pods.append(
            PodRequest(
                name=f"synthetic-pod-{index:0{width}d}",
                cpu_milli=cpu,
                memory_mib=memory,
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_models=allowed,
                qos="LS" if rng.random() < 0.57 else "BE",
                creation_time_s=creation,
                deletion_time_s=float(round(creation + lifetimes[index], 3)),
            )
        )
    return pods
