"""Synthetic openb-like clusters and workloads: determinism, shape and the documented mix."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from kubesage.core.traces.synthetic import (
    GPU_MEMORY_MIB,
    LIFETIME_MEDIAN_S,
    LIFETIME_P90_S,
    OPENB_NODE_TYPES,
    OPENB_POD_SHAPES,
    OPENB_SHARE_MILLI,
    synthetic_cluster,
    synthetic_workload,
)
from kubesage.core.types import PodRequest
from tests.builders import pod_category

BIG = 20_000

# The module docstring's shares (openb default: 8,152 pods).
DOCUMENTED_SHARES = {
    "cpu": 1088 / 8152,  # 13.3 %
    "share": 3078 / 8152,  # 37.8 %
    "gpu1": 3911 / 8152,  # 48.0 %
    "gpu2": 16 / 8152,  # 0.20 %
    "gpu4": 15 / 8152,  # 0.18 %
    "gpu8": 44 / 8152,  # 0.54 %
}


@pytest.fixture(scope="module")
def big_workload() -> list[PodRequest]:
    return synthetic_workload(BIG, seed=7)


# --------------------------------------------------------------------------- determinism


def test_workload_same_seed_same_pods() -> None:
    assert synthetic_workload(300, seed=3) == synthetic_workload(300, seed=3)


def test_workload_different_seed_different_pods() -> None:
    a, b = synthetic_workload(300, seed=3), synthetic_workload(300, seed=4)
    assert a != b
    # not just the arrival times: the request shapes differ too
    shapes = [[(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) for p in w] for w in (a, b)]
    assert shapes[0] != shapes[1]


def test_cluster_same_seed_same_nodes() -> None:
    assert synthetic_cluster(200, seed=5) == synthetic_cluster(200, seed=5)


def test_cluster_different_seed_different_nodes() -> None:
    a, b = synthetic_cluster(200, seed=5), synthetic_cluster(200, seed=6)
    assert [(n.gpu_model, n.gpu_count) for n in a] != [(n.gpu_model, n.gpu_count) for n in b]


def test_constraint_seed_is_deterministic() -> None:
    kwargs = {"gpu_models": ("G2", "T4", "V100M32"), "gpu_constraint_fraction": 0.5}
    assert synthetic_workload(200, seed=1, **kwargs) == synthetic_workload(200, seed=1, **kwargs)


# --------------------------------------------------------------------------- workload shape


def test_category_shares_match_the_documented_mix(big_workload: list[PodRequest]) -> None:
    counts = Counter(pod_category(p) for p in big_workload)
    assert set(counts) <= set(DOCUMENTED_SHARES)
    for name, share in DOCUMENTED_SHARES.items():
        expected = BIG * share
        sd = math.sqrt(BIG * share * (1 - share))
        # 4.5 binomial standard deviations: ±1.5 points for the big categories, about
        # ±40 % of the count for the 0.2 % ones; swapping or dropping a category fails.
        assert abs(counts[name] - expected) <= 4.5 * sd, (name, counts[name], expected)


def test_share_pods_take_part_of_one_gpu(big_workload: list[PodRequest]) -> None:
    allowed = {milli for milli, _ in OPENB_SHARE_MILLI}
    shares = [p for p in big_workload if p.num_gpu == 1 and p.gpu_milli < 1000]
    assert shares
    for p in shares:
        assert 0 < p.gpu_milli < 1000
        assert p.gpu_milli in allowed
    # the most common share in openb (810 milli, 1,078 of 3,078) is the most common here
    assert Counter(p.gpu_milli for p in shares).most_common(1)[0][0] == 810


def test_gpu_pods_take_whole_gpus_and_cpu_pods_none(big_workload: list[PodRequest]) -> None:
    for p in big_workload:
        if p.num_gpu > 1:
            assert p.gpu_milli == 1000
            assert p.num_gpu in (2, 4, 8)
        elif p.num_gpu == 0:
            assert p.gpu_milli == 0


def test_request_shapes_come_from_the_category_tables(big_workload: list[PodRequest]) -> None:
    for p in big_workload:
        shapes = {(cpu, memory) for cpu, memory, _ in OPENB_POD_SHAPES[pod_category(p)]}
        assert (p.cpu_milli, p.memory_mib) in shapes


def test_names_unique_and_times_consistent(big_workload: list[PodRequest]) -> None:
    assert len({p.name for p in big_workload}) == BIG
    created = [p.creation_time_s for p in big_workload]
    assert all(t is not None and t > 0 for t in created)
    assert created == sorted(created)
    for p in big_workload:
        assert p.deletion_time_s is not None and p.creation_time_s is not None
        assert p.deletion_time_s >= p.creation_time_s
    assert {p.qos for p in big_workload} == {"LS", "BE"}
    assert all(p.gpu_models == () for p in big_workload)


def test_arrivals_and_lifetimes_follow_the_documented_statistics(
    big_workload: list[PodRequest],
) -> None:
    created = np.array([p.creation_time_s for p in big_workload])
    gaps = np.diff(created)
    assert gaps.mean() == pytest.approx(60.0, rel=0.05)  # default mean_interarrival_s
    lifetimes = np.array([p.deletion_time_s - p.creation_time_s for p in big_workload])
    assert np.median(lifetimes) == pytest.approx(LIFETIME_MEDIAN_S, rel=0.06)
    assert np.quantile(lifetimes, 0.9) == pytest.approx(LIFETIME_P90_S, rel=0.08)


def test_mean_interarrival_is_honoured() -> None:
    pods = synthetic_workload(2000, seed=2, mean_interarrival_s=5.0)
    last = pods[-1].creation_time_s
    assert last is not None
    assert last / len(pods) == pytest.approx(5.0, rel=0.1)


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_gpu_constraint_fraction_is_honoured(fraction: float) -> None:
    models = ("G2", "T4", "V100M32")
    pods = synthetic_workload(
        4000, seed=11, gpu_models=models if fraction else (), gpu_constraint_fraction=fraction
    )
    gpu_pods = [p for p in pods if p.num_gpu > 0]
    constrained = [p for p in gpu_pods if p.gpu_models]
    assert all(p.gpu_models == () for p in pods if p.num_gpu == 0)
    for p in constrained:
        assert len(p.gpu_models) == 1
        assert p.gpu_models[0] in models
    share = len(constrained) / len(gpu_pods)
    sd = math.sqrt(fraction * (1 - fraction) / len(gpu_pods))
    assert abs(share - fraction) <= 4.5 * sd + 1e-12
    if fraction:
        assert {p.gpu_models[0] for p in constrained} == set(models)


# --------------------------------------------------------------------------- cluster shape


def test_node_types_only_from_the_openb_table() -> None:
    nodes = synthetic_cluster(1213, seed=0)
    known = {(model, gpus, cpu, memory) for model, gpus, cpu, memory, _ in OPENB_NODE_TYPES}
    for n in nodes:
        assert (n.gpu_model, n.gpu_count, n.cpu_milli, n.memory_mib) in known
        assert n.gpu_model is not None
        assert n.gpu_memory_mib == GPU_MEMORY_MIB[n.gpu_model]
    assert len({n.name for n in nodes}) == len(nodes)
    # G2 8-GPU nodes are 549 of 1,213 openb GPU nodes (45 %): the most common type here too
    kinds = Counter((n.gpu_model, n.gpu_count) for n in nodes)
    assert kinds.most_common(1)[0][0] == ("G2", 8)
    assert kinds[("G2", 8)] / len(nodes) == pytest.approx(549 / 1213, abs=0.07)


@pytest.mark.parametrize(
    ("num_nodes", "per_rack", "racks_per_zone", "racks", "zones"),
    [
        (100, 32, 8, 4, 1),
        (100, 10, 3, 10, 4),
        (7, 1, 2, 7, 4),
        (1, 32, 8, 1, 1),
    ],
)
def test_racks_and_zones(
    num_nodes: int, per_rack: int, racks_per_zone: int, racks: int, zones: int
) -> None:
    nodes = synthetic_cluster(
        num_nodes, seed=1, nodes_per_rack=per_rack, racks_per_zone=racks_per_zone
    )
    assert len(nodes) == num_nodes
    for index, n in enumerate(nodes):
        rack = index // per_rack
        assert n.rack == f"rack-{rack}"
        assert n.zone == f"zone-{rack // racks_per_zone}"
    assert len({n.rack for n in nodes}) == racks
    assert len({n.zone for n in nodes}) == zones
    rack_sizes = Counter(n.rack for n in nodes)
    assert max(rack_sizes.values()) <= per_rack


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_pods": 0}, "num_pods must be positive"),
        ({"num_pods": -5}, "num_pods must be positive"),
        ({"num_pods": 10, "gpu_constraint_fraction": -0.1}, r"must be in \[0, 1\]"),
        ({"num_pods": 10, "gpu_constraint_fraction": 1.5}, r"must be in \[0, 1\]"),
        ({"num_pods": 10, "gpu_constraint_fraction": 0.5}, "needs gpu_models"),
        ({"num_pods": 10, "mean_interarrival_s": -1.0}, None),  # numpy rejects it
    ],
)
def test_workload_bad_arguments(kwargs: dict, message: str | None) -> None:
    with pytest.raises(ValueError, match=message):
        synthetic_workload(**kwargs)


@pytest.mark.parametrize("num_nodes", [0, -1])
def test_cluster_bad_node_count(num_nodes: int) -> None:
    with pytest.raises(ValueError, match="num_nodes must be positive"):
        synthetic_cluster(num_nodes)


@pytest.mark.parametrize(
    "kwargs", [{"nodes_per_rack": 0}, {"racks_per_zone": 0}, {"nodes_per_rack": -4}]
)
def test_cluster_bad_layout(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        synthetic_cluster(10, **kwargs)
