"""The synthetic MIG cluster and request mix."""

from __future__ import annotations

from collections import Counter

import pytest

from kubesage.adapters.gpu_training.mig_workload import (
    DEFAULT_MIX,
    default_mix,
    mig_cluster,
    mig_workload,
)
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


def test_the_default_mix_keeps_its_shapes_on_another_model() -> None:
    # By profile ID, not name: H100's 1g.10gb is A100-40GB's 1g.5gb (A100-40GB's own
    # 1g.10gb is the double-memory 1g), so the mix is not collapsed onto one profile.
    assert default_mix("A100-40GB") == {
        "1g.5gb": 0.30,
        "1g.10gb": 0.10,
        "2g.10gb": 0.20,
        "3g.20gb": 0.15,
        "4g.20gb": 0.10,
        "7g.40gb": 0.15,
    }
    drawn = {pod.mig.profile for pod in mig_workload(400, seed=1, gpu_model="A100-40GB") if pod.mig}
    assert drawn == set(default_mix("A100-40GB"))
