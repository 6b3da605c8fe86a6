"""openb variants generated from a base pod list: names, the share each kind sets,
determinism, and — on the real trace where it is present — the same statistics as the
variants the public trace ships."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kubesage.core.errors import InputError
from kubesage.core.traces import read_pods, write_pods
from kubesage.core.traces.openb_variants import (
    PUBLISHED_VARIANTS,
    openb_variant,
    parse_variant,
    variant_statistics,
)
from kubesage.core.traces.synthetic import synthetic_workload
from kubesage.core.types import PodRequest
from tests.builders import shared_data_dir

MODELS = {"G2": 4392, "T4": 842, "V100M32": 204}


@pytest.fixture(scope="module")
def base() -> list[PodRequest]:
    return synthetic_workload(6_000, seed=3)


@pytest.mark.parametrize(
    ("name", "kind", "share"),
    [("gpushare60", "gpushare", 0.6), ("gpushare100", "gpushare", 1.0),
     ("multigpu30", "multigpu", 0.3), ("gpuspec25", "gpuspec", 0.25),
     ("cpu050", "cpu", 0.05), ("cpu250", "cpu", 0.25), ("multigpu5", "multigpu", 0.05),
     ("cpu0", "cpu", 0.0), ("cpu000", "cpu", 0.0)],
)  # fmt: skip
def test_parse_variant(name: str, kind: str, share: float) -> None:
    variant = parse_variant(name)
    assert (variant.kind, variant.share) == (kind, pytest.approx(share))


@pytest.mark.parametrize(
    "name", ["default", "gpushare", "gpushare0", "multigpu100", "cpu1000", "cpu5", "x20"]
)
def test_bad_variant_names_are_refused_by_name(name: str) -> None:
    with pytest.raises(InputError, match=repr(name)):
        parse_variant(name)


@pytest.mark.parametrize("name", PUBLISHED_VARIANTS)
def test_each_published_variant_sets_its_share(base: list[PodRequest], name: str) -> None:
    variant = parse_variant(name)
    pods = openb_variant(base, name, seed=1, models=MODELS)
    stats = variant_statistics(pods)
    before = variant_statistics(base)
    # Drawing with replacement moves a share by sampling noise only (6,000 pods).
    assert stats[variant.kind] == pytest.approx(variant.share, abs=0.025)
    assert len({pod.name for pod in pods}) == len(pods)
    if variant.kind == "gpushare":
        assert stats["pods"] == before["pods"]
        assert sum(pod.num_gpu == 0 for pod in pods) == sum(pod.num_gpu == 0 for pod in base)
    if variant.kind == "gpuspec":  # the same pods, some constrained
        assert [p.cpu_milli for p in pods] == [p.cpu_milli for p in base]
        assert {p.gpu_models for p in pods if p.gpu_models} <= {(m,) for m in MODELS}
    if variant.kind == "cpu":  # every GPU pod kept
        assert Counter(p.num_gpu for p in pods if p.num_gpu) == Counter(
            p.num_gpu for p in base if p.num_gpu
        )


def test_cpu0_as_the_trace_names_it_is_the_gpu_pods_alone(base: list[PodRequest]) -> None:
    pods = openb_variant(base, "cpu0", seed=1)
    assert variant_statistics(pods)["cpu"] == 0.0
    assert Counter(p.num_gpu for p in pods) == Counter(p.num_gpu for p in base if p.num_gpu)


def test_same_seed_same_list_other_seed_other_list(base: list[PodRequest]) -> None:
    first = openb_variant(base, "gpushare60", seed=5)
    assert first == openb_variant(base, "gpushare60", seed=5)
    assert first != openb_variant(base, "gpushare60", seed=6)


def test_gpuspec_draws_the_given_constraints(base: list[PodRequest]) -> None:
    specs = [PodRequest(name="s", cpu_milli=1, memory_mib=1, num_gpu=1, gpu_milli=1000,
                        gpu_models=("P100", "T4"))]  # fmt: skip
    pods = openb_variant(base, "gpuspec10", seed=0, specs=specs)
    assert {p.gpu_models for p in pods if p.gpu_models} == {("P100", "T4")}


def test_missing_inputs_are_named(base: list[PodRequest]) -> None:
    with pytest.raises(InputError, match="GPUs per model"):
        openb_variant(base, "gpuspec20")
    with pytest.raises(InputError, match="empty"):
        openb_variant([], "cpu100")
    cpu_only = [pod for pod in base if pod.num_gpu == 0]
    for name in ("gpushare40", "cpu100", "gpuspec25"):
        with pytest.raises(InputError, match="the base has no GPU pods"):
            openb_variant(cpu_only, name, models=MODELS)
    whole = [pod for pod in base if not pod.is_gpu_sharing]
    with pytest.raises(InputError, match="no GPU-sharing pods"):
        openb_variant(whole, "gpushare40")
    sharing = [pod for pod in base if pod.is_gpu_sharing or pod.num_gpu == 0]
    with pytest.raises(InputError, match="every GPU pod of the base shares a GPU"):
        openb_variant(sharing, "gpushare40")


@pytest.mark.parametrize(
    ("first", "then"), [("multigpu40", "multigpu20"), ("gpuspec33", "gpuspec10")]
)
def test_a_kind_that_only_adds_refuses_a_base_already_above_it(
    base: list[PodRequest], first: str, then: str
) -> None:
    heavier = openb_variant(base, first, seed=0, models=MODELS)
    with pytest.raises(InputError, match=r"already request \d+\.\d% of its GPU, .* below"):
        openb_variant(heavier, then, seed=0, models=MODELS)


def test_gpuspec_counts_the_constraints_the_base_already_has(base: list[PodRequest]) -> None:
    # gpuspec25 from a gpuspec20 list adds about five points, not another 25.
    twenty = openb_variant(base, "gpuspec20", seed=0, models=MODELS)
    stats = variant_statistics(openb_variant(twenty, "gpuspec25", seed=1, models=MODELS))
    assert stats["gpuspec"] == pytest.approx(0.25, abs=0.01)


def test_written_variant_reads_back(base: list[PodRequest], tmp_path: Path) -> None:
    pods = openb_variant(base, "gpuspec33", seed=2, models=MODELS)
    write_pods(pods, tmp_path / "v.csv")
    assert read_pods(tmp_path / "v.csv") == pods


@pytest.mark.parametrize("name", ["gpushare40", "multigpu20", "gpuspec20", "cpu050"])
def test_generated_variants_match_the_shipped_ones(name: str) -> None:
    """Generated from the real ``default``, each variant the trace ships is matched on
    what its kind controls (and on the pod count, within the draw's noise)."""
    root = shared_data_dir()
    if root is None or not (root / "openb").is_dir():
        pytest.skip("the openb trace is not in ../shared/data/openb")
    openb = root / "openb"
    default = read_pods(openb / "openb_pod_list_default.csv")
    shipped = read_pods(openb / f"openb_pod_list_{name}.csv")
    specs = read_pods(openb / "openb_pod_list_gpuspec20.csv")
    generated = variant_statistics(openb_variant(default, name, seed=0, specs=specs))
    expected = variant_statistics(shipped)
    for key in ("gpushare", "multigpu", "gpuspec", "cpu"):
        assert generated[key] == pytest.approx(expected[key], abs=0.01), key
    assert generated["pods"] == pytest.approx(expected["pods"], rel=0.01)
