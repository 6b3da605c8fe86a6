"""The fit rule on a hand-made cluster whose answers are known: mask, reasons, words."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.state import NO_REASON, ClusterState, FitCheck, fit_mask, fit_report
from kubesage.core.types import MigShape, NodeSpec, PodRequest
from tests.builders import node, pod, set_gpu_free

SLICE_1G = MigShape(profile="1g.10gb", memory_slices=1, compute_slices=1, starts=tuple(range(7)))
SLICE_7G = MigShape(profile="7g.80gb", memory_slices=8, compute_slices=7, starts=(0,))


def mig(name: str, shape: MigShape) -> PodRequest:
    return PodRequest(
        name=name, cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=shape.gpu_milli, mig=shape
    )


def sample() -> ClusterState:
    """big: 8 GPUs, three wholly free, the others half used; t4: 2 T4s; cpu: no GPU;
    mig: 2 A100s in MIG mode; busy: 8 GPUs, no CPU left."""
    state = ClusterState(
        [
            node("big"),
            node("t4", gpus=2, model="T4"),
            node("cpu", gpus=0),
            NodeSpec(
                name="mig",
                cpu_milli=64_000,
                memory_mib=262_144,
                gpu_count=2,
                gpu_model="A100",
                mig_enabled=True,
            ),
            node("busy", cpu=8_000),
        ]
    )
    set_gpu_free(state, 0, [1000, 1000, 1000, 500, 500, 500, 500, 500])
    hog = pod("hog", cpu=8_000, memory=0)
    state.allocate(hog, state.placement(4, (), hog))
    return state


R = FitCheck
CASES = [
    ("cpu-only small", pod(cpu=1_000), [None, None, None, None, R.CPU_FREE]),
    ("too much CPU", pod(cpu=100_000), [R.CPU_CAPACITY] * 5),
    ("too much memory", pod(memory=10**7), [R.MEMORY_CAPACITY] * 5),
    ("four GPUs", pod(gpus=4), [R.WHOLE_GPUS, R.GPU_COUNT, R.GPU_MODEL, R.MIG_MODE, R.CPU_FREE]),
    ("three GPUs", pod(gpus=3, cpu=0), [None, R.GPU_COUNT, R.GPU_MODEL, R.MIG_MODE, None]),
    ("share", pod(milli=600, cpu=0), [None, None, R.GPU_MODEL, R.MIG_MODE, None]),
    (
        "T4 only",
        pod(milli=300, cpu=0, models=("T4",)),
        [R.GPU_MODEL, None, R.GPU_MODEL, R.GPU_MODEL, R.GPU_MODEL],
    ),
    (
        "MIG",
        mig("m", SLICE_7G),
        [R.NOT_MIG_MODE, R.NOT_MIG_MODE, R.GPU_MODEL, None, R.NOT_MIG_MODE],
    ),
]


@pytest.mark.parametrize(
    ("request_", "expected"), [case[1:] for case in CASES], ids=[c[0] for c in CASES]
)
def test_reasons(request_: PodRequest, expected: list[FitCheck | None]) -> None:
    state = sample()
    report = fit_report(state, request_)
    assert [report.reason(i) for i in range(state.num_nodes)] == expected
    assert report.fits.tolist() == [reason is None for reason in expected]
    assert fit_mask(state, request_).tolist() == report.fits.tolist()
    assert report.unresolvable.tolist() == [bool(r and r.unresolvable) for r in expected]


def test_a_full_mig_gpu_has_no_slot_and_the_other_still_fits() -> None:
    state = sample()
    whole = mig("whole", SLICE_7G)
    state.allocate(whole, state.placement(3, (0,), whole, mig_start=0))
    assert fit_report(state, whole).reason(3) is None
    state.allocate(whole, state.placement(3, (1,), whole, mig_start=0))
    report = fit_report(state, mig("small", SLICE_1G))
    assert report.reason(3) is FitCheck.MIG_SLOT and not FitCheck.MIG_SLOT.unresolvable


def test_a_subset_is_the_whole_mask_at_those_nodes() -> None:
    state = sample()
    request = pod(gpus=4)
    nodes = np.array([4, 0, 3], dtype=np.int64)
    subset = fit_report(state, request, nodes)
    whole = fit_report(state, request)
    assert subset.reasons.tolist() == whole.reasons[nodes].tolist()
    assert subset.fits.tolist() == whole.fits[nodes].tolist()


def test_words_counts_and_summary() -> None:
    state = sample()
    request = pod(gpus=4)
    report = fit_report(state, request)
    assert report.words("kubesage: ").tolist() == [
        "kubesage: fewer than 4 wholly free GPUs",
        "kubesage: fewer than 4 GPUs on the node",
        "kubesage: no GPU of an allowed model (any)",
        "kubesage: GPUs are in MIG mode (pod is not MIG)",
        "kubesage: insufficient free CPU for 4000m",
    ]
    assert report.counts() == {
        FitCheck.GPU_MODEL: 1,
        FitCheck.MIG_MODE: 1,
        FitCheck.GPU_COUNT: 1,
        FitCheck.CPU_FREE: 1,
        FitCheck.WHOLE_GPUS: 1,
    }
    assert report.summary(limit=2) == (
        "no GPU of an allowed model (any) (1 node); "
        "GPUs are in MIG mode (pod is not MIG) (1 node); 3 other reason(s)"
    )
    fits = fit_report(state, pod(cpu=0))
    assert (fits.reasons == NO_REASON).all() and fits.counts() == {} and fits.summary() == ""


def test_codes_are_stable() -> None:
    """Codes may be stored or compared across versions: changing one is a breaking change."""
    assert {check.name: int(check) for check in FitCheck} == {
        "CPU_CAPACITY": 1,
        "MEMORY_CAPACITY": 2,
        "GPU_MODEL": 3,
        "NOT_MIG_MODE": 4,
        "MIG_MODE": 5,
        "GPU_COUNT": 6,
        "CPU_FREE": 7,
        "MEMORY_FREE": 8,
        "MIG_SLOT": 9,
        "GPU_SHARE": 10,
        "WHOLE_GPUS": 11,
    }
    assert [check for check in FitCheck if check.unresolvable] == list(FitCheck)[:6]
