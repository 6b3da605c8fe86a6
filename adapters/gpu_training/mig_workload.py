"""A synthetic MIG cluster and a timed mix of MIG instance requests.

No public trace records MIG instance requests, so the defragmentation benchmark
draws them: GPUs of one model in MIG mode, and requests whose profiles follow a
mix that is an assumption of this module, not a measurement — many small
inference slices and fewer large training ones (weights below, by profile name on
H100-80GB; on another model each is its profile of the same ``nvidia-smi`` profile ID,
the same shape: ``1g.10gb`` is ``1g.5gb`` on A100-40GB; a mix the caller gives is by
that model's own names, and profiles it lacks are skipped). Arrivals are a Poisson
process, lifetimes log-normal (median 30 min, 90th percentile 4 h), QoS best-effort 40 %,
latency-sensitive 50 %, Guaranteed 10 %. Seeded: a seed gives the same cluster
and workload everywhere. Compress the result to the load wanted with
:func:`kubesage.core.sim.compression.compress_to_peak_load`.
"""

from __future__ import annotations

import math

import numpy as np

from kubesage.adapters.gpu_training.mig import catalogue, mig_request
from kubesage.core.errors import InputError
from kubesage.core.types import NodeSpec, PodRequest

DEFAULT_MIX: dict[str, float] = {
    "1g.10gb": 0.30,
    "1g.20gb": 0.10,
    "2g.20gb": 0.20,
    "3g.40gb": 0.15,
    "4g.40gb": 0.10,
    "7g.80gb": 0.15,
}
"""Share of requests per profile (H100-80GB names; see the module docstring)."""

QOS_MIX = (("BE", 0.4), ("LS", 0.5), ("Guaranteed", 0.1))


def default_mix(gpu_model: str) -> dict[str, float]:
    """:data:`DEFAULT_MIX` in ``gpu_model``'s names: each H100-80GB profile mapped to the
    one with the same profile ID (the same compute and memory share)."""
    reference = {p.name: p.profile_id for p in catalogue("H100-80GB").profiles}
    by_id = {p.profile_id: p.name for p in catalogue(gpu_model).profiles}
    return {
        by_id[reference[name]]: weight
        for name, weight in DEFAULT_MIX.items()
        if reference[name] in by_id
    }


MEDIAN_LIFETIME_S = 1_800.0
P90_LIFETIME_S = 14_400.0
_Z90 = 1.2815515655446004


def mig_cluster(
    nodes: int, *, gpus_per_node: int = 8, gpu_model: str = "H100-80GB"
) -> list[NodeSpec]:
    """``nodes`` MIG-mode nodes of ``gpus_per_node`` ``gpu_model`` GPUs."""
    catalogue(gpu_model)  # raises for a model without MIG
    if nodes < 1 or gpus_per_node < 1:
        raise InputError("a MIG cluster needs at least one node with one GPU")
    return [
        NodeSpec(
            name=f"mig-{i:04d}",
            cpu_milli=16_000 * gpus_per_node,
            memory_mib=131_072 * gpus_per_node,
            gpu_count=gpus_per_node,
            gpu_model=gpu_model,
            mig_enabled=True,
        )
        for i in range(nodes)
    ]


def mig_workload(
    count: int,
    *,
    seed: int,
    gpu_model: str = "H100-80GB",
    mix: dict[str, float] | None = None,
    mean_interarrival_s: float = 60.0,
) -> list[PodRequest]:
    """``count`` timed MIG requests drawn from ``mix`` (profile → weight)."""
    if count < 1:
        raise InputError(f"count must be at least 1, got {count}")
    if mean_interarrival_s <= 0:
        raise InputError(f"mean_interarrival_s must be positive, got {mean_interarrival_s}")
    known = {p.name for p in catalogue(gpu_model).profiles}
    chosen = mix if mix is not None else default_mix(gpu_model)
    weights = {name: w for name, w in chosen.items() if name in known and w > 0}
    if not weights:
        raise InputError(f"no profile of the mix exists on {gpu_model} (has: {sorted(known)})")
    names = sorted(weights)
    probabilities = np.array([weights[n] for n in names]) / sum(weights.values())
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(mean_interarrival_s, size=count))
    sigma = math.log(P90_LIFETIME_S / MEDIAN_LIFETIME_S) / _Z90
    lifetimes = rng.lognormal(math.log(MEDIAN_LIFETIME_S), sigma, size=count)
    profiles = rng.choice(len(names), size=count, p=probabilities)
    qos_names = [q for q, _ in QOS_MIX]
    qos = rng.choice(len(qos_names), size=count, p=[share for _, share in QOS_MIX])
    requests = []
    for i in range(count):
        request = mig_request(f"mig-{i:06d}", gpu_model, names[int(profiles[i])])
        requests.append(
            request.model_copy(
                update={
                    "qos": qos_names[int(qos[i])],
                    "creation_time_s": float(arrivals[i]),
                    "deletion_time_s": float(arrivals[i] + lifetimes[i]),
                }
            )
        )
    return requests
