"""Utilisation profiles: the GenAI trace when it is there, synthetic ones like it when not."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from kubesage.core.scenario.model import UtilisationProfiles
from kubesage.core.scenario.profiles import (
    GIB,
    TRACE_STATISTICS,
    load_profiles,
    synthetic_profiles,
)
from tests.builders import shared_data_dir
from tests.services import missing


def _measured(profiles: UtilisationProfiles) -> dict[str, float]:
    """The statistics TRACE_STATISTICS holds, measured on ``profiles``."""
    duty = profiles.duty_pct
    idle = duty == 0
    busy = duty[duty > 0]
    memory = profiles.memory_bytes
    return {
        "zero_share": float(idle.mean()),
        "p_on": float((~idle[1:] & idle[:-1]).sum() / idle[:-1].sum()),
        "p_off": float((idle[1:] & ~idle[:-1]).sum() / (~idle[:-1]).sum()),
        "nonzero_mean": float(busy.mean()),
        "nonzero_median": float(np.median(busy)),
        "memory_level_gib": float(np.median(np.median(memory, axis=0)) / GIB),
        "memory_cv": float(np.median(memory.std(axis=0) / memory.mean(axis=0))),
    }


def _expected() -> dict[str, float]:
    stats = TRACE_STATISTICS
    return {
        "zero_share": stats.zero_share,
        "p_on": stats.p_on,
        "p_off": stats.p_off,
        "nonzero_mean": stats.nonzero_duty_mean,
        "nonzero_median": dict(stats.duty_quantiles)[0.5],
        "memory_level_gib": dict(stats.memory_level_quantiles_gib)[0.5],
        "memory_cv": stats.memory_cv,
    }


TOLERANCE = {
    "zero_share": 0.02,
    "p_on": 0.02,
    "p_off": 0.02,
    "nonzero_mean": 1.5,
    "nonzero_median": 1.5,
    "memory_level_gib": 1.0,
    "memory_cv": 0.03,
}


def test_the_genai_trace_gives_one_profile_per_pod_and_its_measured_statistics() -> None:
    data = shared_data_dir()
    if data is None or not (data / "genai").is_dir():
        missing("the shared GenAI trace (../shared/data/genai)")
        return
    profiles = load_profiles(data)
    assert profiles.source.startswith("genai trace")
    assert profiles.count == TRACE_STATISTICS.pods
    assert profiles.duty_pct.shape == (TRACE_STATISTICS.steps, TRACE_STATISTICS.pods)
    assert profiles.memory_bytes.shape == profiles.duty_pct.shape
    assert profiles.step_s == pytest.approx(TRACE_STATISTICS.step_s)
    assert profiles.duty_pct.min() >= 0 and profiles.duty_pct.max() <= 100
    assert profiles.memory_bytes.min() >= 0
    measured, expected = _measured(profiles), _expected()
    # The constants were measured on exactly this; only rounding separates them.
    for name in ("zero_share", "p_on", "p_off", "nonzero_mean", "nonzero_median"):
        assert measured[name] == pytest.approx(expected[name], abs=0.01), name


def test_synthetic_profiles_land_near_the_trace_statistics() -> None:
    profiles = synthetic_profiles(0)
    assert profiles.source.startswith("synthetic")
    assert profiles.count == TRACE_STATISTICS.pods
    assert profiles.step_s == TRACE_STATISTICS.step_s
    measured, expected = _measured(profiles), _expected()
    for name, tolerance in TOLERANCE.items():
        assert measured[name] == pytest.approx(expected[name], abs=tolerance), name
    assert profiles.duty_pct.min() >= 0 and profiles.duty_pct.max() <= 100


def test_synthetic_profiles_are_the_same_for_a_seed() -> None:
    first, again, other = synthetic_profiles(3), synthetic_profiles(3), synthetic_profiles(4)
    assert np.array_equal(first.duty_pct, again.duty_pct)
    assert np.array_equal(first.memory_bytes, again.memory_bytes)
    assert not np.array_equal(first.duty_pct, other.duty_pct)


def test_without_the_trace_the_profiles_are_synthetic_and_say_so(tmp_path: Path) -> None:
    assert load_profiles(None).source.startswith("synthetic")
    assert load_profiles(tmp_path).source.startswith("synthetic")
    (tmp_path / "genai").mkdir()
    _write(tmp_path / "genai" / "pod_gpu_duty_cycle_anon.csv.gz", [("a", 0, 5.0)])
    # Duty cycle without GPU memory is not enough.
    assert load_profiles(tmp_path).source.startswith("synthetic")


def _write(path: Path, rows: list[tuple[str, float, float]]) -> None:
    with gzip.open(path, "wt") as handle:
        handle.write("value,timestamp_anon,container_ip\n")
        for pod, timestamp, value in rows:
            handle.write(f"{value},{timestamp},{pod}\n")


def test_missing_samples_read_as_idle_and_as_the_last_memory_value(tmp_path: Path) -> None:
    genai = tmp_path / "genai"
    genai.mkdir()
    _write(
        genai / "pod_gpu_duty_cycle_anon.csv.gz",
        [("a", t, 10.0 + t / 60) for t in (0, 60, 120, 180, 240)]
        + [("b", 0, 50.0), ("b", 240, 70.0), ("c", 0, 1.0), ("c", 60, 2.0)],
    )
    _write(
        genai / "pod_gpu_memory_used_bytes_anon.csv.gz",
        [("a", 60, 100.0), ("a", 180, 300.0)] + [("b", t, 7.0) for t in (0, 60, 120, 180, 240)],
    )
    # Files the profiles do not use (and a pod only they know) change nothing.
    _write(genai / "pod_memory_util_anon.csv.gz", [("a", 0, 0.5), ("z", 0, 0.1)])
    profiles = load_profiles(tmp_path)
    assert profiles.source.startswith("genai trace")
    assert profiles.step_s == 60.0
    assert profiles.count == 2  # c has no GPU memory series
    duty = profiles.duty_pct
    memory = profiles.memory_bytes
    assert duty[:, 0].tolist() == [10.0, 11.0, 12.0, 13.0, 14.0]
    assert duty[:, 1].tolist() == [50.0, 0.0, 0.0, 0.0, 70.0]
    assert memory[:, 0].tolist() == [100.0, 100.0, 100.0, 300.0, 300.0]
    assert memory[:, 1].tolist() == [7.0] * 5
    assert profiles.duty_at(0, 61.0) == 11.0
    assert profiles.duty_at(0, 5 * 60.0) == 10.0  # wraps around
