"""The FGD arrival protocol: shuffle by seed, inflate or deflate to the target."""

from __future__ import annotations

import pytest

from kubesage.core.errors import InputError
from kubesage.core.sim.protocol import fgd_arrivals
from tests.builders import pod

WORKLOAD = [pod(f"p{i:02d}", gpus=1 + i % 2) for i in range(10)] + [pod("cpu-only")]
REQUESTED = sum(p.total_gpu_milli for p in WORKLOAD)  # 15,000 milli


def test_inflates_to_the_target_with_clones_of_originals() -> None:
    arrivals = fgd_arrivals(WORKLOAD, gpu_capacity_milli=20_000, seed=42, tune=1.3)
    total = sum(p.total_gpu_milli for p in arrivals)
    assert 26_000 - 2_000 < total <= 26_000  # stops before the draw that would overshoot
    clones = arrivals[len(WORKLOAD) :]
    assert clones and all("-tuned-" in p.name for p in clones)
    assert [int(p.name.rsplit("-", 1)[1]) for p in clones] == list(range(len(clones)))
    originals = {p.name: p for p in WORKLOAD}
    for clone in clones:
        source = originals[clone.name.split("-tuned-")[0]]
        assert clone.model_dump(exclude={"name"}) == source.model_dump(exclude={"name"})
    assert sorted(p.name for p in arrivals[: len(WORKLOAD)]) == sorted(originals)


def test_deflates_by_dropping_random_pods() -> None:
    arrivals = fgd_arrivals(WORKLOAD, gpu_capacity_milli=10_000, seed=1, tune=1.0)
    assert sum(p.total_gpu_milli for p in arrivals) <= 10_000 + 1_000  # within half a pod
    assert len(arrivals) < len(WORKLOAD)
    assert {p.name for p in arrivals} <= {p.name for p in WORKLOAD}


def test_deflation_ends_nearest_the_target_when_a_large_pod_goes_last() -> None:
    # One pod of 8 GPUs among 1- and 2-GPU pods: stopping right after it is removed
    # can land 8 GPUs short of the target; it comes back when that lands nearer.
    workload = [*WORKLOAD, pod("big", gpus=8)]  # 23,000 milli
    target = 16_000
    for seed in range(40):
        arrivals = fgd_arrivals(workload, gpu_capacity_milli=target, seed=seed, tune=1.0)
        total = sum(p.total_gpu_milli for p in arrivals)
        assert abs(total - target) <= 4_000, (seed, total)  # half the largest pod at most
        assert len({p.name for p in arrivals}) == len(arrivals)


def test_a_cluster_without_gpus_is_refused() -> None:
    with pytest.raises(InputError, match="the cluster has no GPUs"):
        fgd_arrivals(WORKLOAD, gpu_capacity_milli=0, seed=0)


def test_same_seed_same_sequence_other_seed_other_order() -> None:
    a = fgd_arrivals(WORKLOAD, gpu_capacity_milli=20_000, seed=42)
    b = fgd_arrivals(list(reversed(WORKLOAD)), gpu_capacity_milli=20_000, seed=42)
    c = fgd_arrivals(WORKLOAD, gpu_capacity_milli=20_000, seed=43)
    assert [p.name for p in a] == [p.name for p in b]  # input order does not matter
    assert [p.name for p in a] != [p.name for p in c]


def test_tune_zero_only_shuffles() -> None:
    arrivals = fgd_arrivals(WORKLOAD, gpu_capacity_milli=1_000, seed=5, tune=0)
    assert sorted(p.name for p in arrivals) == sorted(p.name for p in WORKLOAD)


@pytest.mark.parametrize(
    ("pods", "tune", "message"),
    [([], 1.3, "no pods"), (WORKLOAD, -1.0, "tune must be"), ([pod("c")], 1.3, "without GPU")],
)
def test_bad_input(pods: list, tune: float, message: str) -> None:
    with pytest.raises(InputError, match=message):
        fgd_arrivals(pods, gpu_capacity_milli=10_000, seed=0, tune=tune)
