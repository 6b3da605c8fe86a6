"""Training-phase detection on generated utilisation, and elastic scale plans."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.adapters.gpu_training.elastic import (
    PhaseDetector,
    Segment,
    detect_phases,
    scale_plan,
)
from kubesage.core.errors import InputError

STEP = 10.0


def series(*parts: tuple[float, int], noise: float = 4.0, seed: int = 0) -> np.ndarray:
    """Concatenated phases (level %, samples) with noise and a few spikes."""
    rng = np.random.default_rng(seed)
    values = np.concatenate([np.full(n, level) for level, n in parts])
    values = values + rng.normal(0, noise, values.size)
    spikes = rng.choice(values.size, size=values.size // 50, replace=False)
    values[spikes] = rng.uniform(0, 100, spikes.size)
    return np.clip(values, 0, 100)


def test_detects_train_validation_train() -> None:
    utilisation = series((92, 180), (35, 60), (90, 180))
    segments = detect_phases(utilisation, PhaseDetector(step_s=STEP))
    assert [s.phase for s in segments] == ["train", "validation", "train"]
    validation = segments[1]
    assert abs(validation.start_s - 1800) <= 3 * STEP
    assert abs(validation.end_s - 2400) <= 3 * STEP


def test_short_dips_and_spikes_do_not_make_phases() -> None:
    utilisation = series((90, 100), (40, 3), (90, 100))  # a 30 s dip
    assert [s.phase for s in detect_phases(utilisation)] == ["train"]


def test_idle_is_told_apart_from_validation() -> None:
    utilisation = series((90, 60), (1, 60), (90, 60), noise=1.0)
    assert [s.phase for s in detect_phases(utilisation)] == ["train", "idle", "train"]


def test_annotations_override_the_detector() -> None:
    utilisation = series((90, 120))
    segments = detect_phases(utilisation, annotations=[(600.0, "validation")])
    assert [(s.phase, s.start_s) for s in segments] == [("train", 0.0), ("validation", 600.0)]
    with pytest.raises(InputError, match="unknown phase"):
        detect_phases(utilisation, annotations=[(0.0, "eval")])  # type: ignore[list-item]


def test_bad_utilisation_is_refused() -> None:
    with pytest.raises(InputError, match="percentages"):
        detect_phases([10.0, 120.0])


def test_scale_plan_shrinks_through_long_validation_only() -> None:
    segments = [
        Segment("train", 0, 3600),
        Segment("validation", 3600, 4200),
        Segment("train", 4200, 7800),
        Segment("validation", 7800, 7860),
    ]
    plan = scale_plan(segments, min_nodes=1, max_nodes=4, gpus_per_node=8, restart_cost_s=30)
    # 600 s validation: gain 3·8·600 = 14,400 GPU-s, cost 2·30·4·8 = 1,920.
    # The 60 s one is not worth two restarts.
    assert [(step.at_s, step.nodes) for step in plan.steps] == [(3600, 1), (4200, 4)]
    assert plan.freed_gpu_s == pytest.approx(14_400 - 1_920)
    assert plan.freed_fraction == pytest.approx((14_400 - 1_920) / (7860 * 32))


def test_scale_plan_arguments() -> None:
    with pytest.raises(InputError, match="min_nodes"):
        scale_plan([], min_nodes=3, max_nodes=2, gpus_per_node=8)
    assert (
        scale_plan(
            [Segment("validation", 0, 10_000)], min_nodes=2, max_nodes=2, gpus_per_node=8
        ).steps
        == ()
    )
