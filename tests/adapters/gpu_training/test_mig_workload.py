"""The synthetic MIG cluster and request mix."""

from __future__ import annotations

from collections import Counter

import pytest

from kubesage.adapters.gpu_training.mig_workload import DEFAULT_MIX, mig_cluster, mig_workload
from kubesage.core.errors import InputError
from kubesage.core.state import ClusterState


def test_the_mix_follows_its_weights_and_the_seed() -> None:
    pods = mig_workload(4_000, seed=7)
    assert pods == mig_workload(4_000, seed=7)
    assert pods != mig_workload(4_000, seed=8)
    counts = Counter(p.mig.profile for p in pods if p.mig)
    for profile, weight in DEFAULT_MIX.items():
        assert counts[profile] / len(pods) == pytest.approx(weight, abs=0.03)
    times = [p.creation_time_s for p in pods]
    assert times == sorted(times)
    assert all(
        p.deletion_time_s and p.creation_time_s and p.deletion_time_s > p.creation_time_s
        for p in pods
    )


def test_every_request_fits_an_empty_mig_gpu_of_the_cluster() -> None:
    state = ClusterState(mig_cluster(2, gpus_per_node=2, gpu_model="A100-40GB"))
    pods = mig_workload(200, seed=1, gpu_model="A100-40GB", mix={"1g.5gb": 1, "7g.40gb": 1})
    assert {p.mig.profile for p in pods if p.mig} == {"1g.5gb", "7g.40gb"}
    assert all(state.feasible(p).all() for p in pods)


def test_unknown_profiles_and_models_are_named() -> None:
    with pytest.raises(InputError, match="no profile of the mix exists on A100-40GB"):
        mig_workload(10, seed=1, gpu_model="A100-40GB", mix={"1g.20gb": 1})
    with pytest.raises(InputError, match="T4"):
        mig_cluster(1, gpu_model="T4")
