"""Training phases from GPU utilisation, and elastic scale plans that use them.

Phase detection: the utilisation series (percent, one sample per ``step_s``) is
smoothed with a rolling median (spikes of a few samples do not flip a phase) and
classified with hysteresis — ``train`` at or above ``train_pct``, ``idle`` at or
below ``idle_pct``, and ``validation`` in between (forward passes only: the GPU
is busy but well below training load). Segments shorter than ``min_segment_s``
merge into their neighbours. A phase annotation a training loop sets
(``kubesage.io/training-phase``) overrides the detector from its timestamp on.

Scale plans (torchrun elastic, ``--nnodes=MIN:MAX``): during a validation or idle
phase expected to outlast the cost of two re-rendezvous, shrink to ``MIN`` nodes
and grow back to ``MAX`` when training resumes. The freed GPU time is
``(MAX − MIN) · gpus_per_node · duration`` minus the GPU time lost to the two
restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from kubesage.core.arrays import FloatArray
from kubesage.core.errors import InputError

Phase = Literal["train", "validation", "idle"]
PHASE_ANNOTATION = "kubesage.io/training-phase"
"""Pod annotation a training loop may set to ``train``, ``validation`` or ``idle``."""


@dataclass(frozen=True)
class PhaseDetector:
    train_pct: float = 60.0
    idle_pct: float = 5.0
    smooth_samples: int = 5
    min_segment_s: float = 60.0
    step_s: float = 10.0
    """Seconds between two utilisation samples."""

    def __post_init__(self) -> None:
        if not (0 <= self.idle_pct < self.train_pct <= 100):
            raise InputError(
                f"PhaseDetector: need 0 <= idle_pct < train_pct <= 100, got idle_pct="
                f"{self.idle_pct}, train_pct={self.train_pct}"
            )
        if self.smooth_samples < 1:
            raise InputError(
                f"PhaseDetector: smooth_samples must be >= 1, got {self.smooth_samples}"
            )
        if not (np.isfinite(self.min_segment_s) and self.min_segment_s >= 0):
            raise InputError(f"PhaseDetector: min_segment_s must be >= 0, got {self.min_segment_s}")
        if not (np.isfinite(self.step_s) and self.step_s > 0):
            raise InputError(f"PhaseDetector: step_s must be > 0, got {self.step_s}")


@dataclass(frozen=True)
class Segment:
    phase: Phase
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def _rolling_median(values: FloatArray, window: int) -> FloatArray:
    if window <= 1 or values.size == 0:
        return values
    padded = np.pad(values, (window // 2, window - 1 - window // 2), mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, window)
    return np.asarray(np.median(windows, axis=1), dtype=np.float64)


def detect_phases(
    utilisation_pct: Sequence[float],
    detector: PhaseDetector = PhaseDetector(),
    annotations: Sequence[tuple[float, Phase]] = (),
) -> list[Segment]:
    """Phases of a job from its GPU utilisation (and any phase annotations)."""
    values = np.asarray(utilisation_pct, dtype=np.float64)
    if values.size == 0:
        return []
    if not np.isfinite(values).all() or values.min() < 0 or values.max() > 100:
        raise InputError("utilisation must be finite percentages in [0, 100]")
    smooth = _rolling_median(values, detector.smooth_samples)
    labels: list[Phase] = []
    current: Phase = (
        "train"
        if smooth[0] >= detector.train_pct
        else ("idle" if smooth[0] <= detector.idle_pct else "validation")
    )
    for value in smooth:
        if value >= detector.train_pct:
            current = "train"
        elif value <= detector.idle_pct:
            current = "idle"
        elif current == "train" and value < detector.train_pct - 10.0:
            current = "validation"  # hysteresis: leave training only on a clear drop
        elif current == "idle" and value > detector.idle_pct + 5.0:
            current = "validation"
        labels.append(current)
    for timestamp, phase in sorted(annotations):
        if phase not in ("train", "validation", "idle"):
            raise InputError(f"unknown phase annotation {phase!r}")
        first = max(0, int(np.ceil(timestamp / detector.step_s)))
        labels[first:] = [phase] * (len(labels) - first)
    return _merge_short(_segments(labels, detector.step_s), detector.min_segment_s)


def _segments(labels: list[Phase], step_s: float) -> list[Segment]:
    segments: list[Segment] = []
    start = 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            segments.append(Segment(labels[start], start * step_s, i * step_s))
            start = i
    return segments


def _merge_short(segments: list[Segment], min_segment_s: float) -> list[Segment]:
    merged: list[Segment] = []
    for segment in segments:
        if merged and (segment.duration_s < min_segment_s or merged[-1].phase == segment.phase):
            previous = merged.pop()
            merged.append(Segment(previous.phase, previous.start_s, segment.end_s))
        else:
            merged.append(segment)
    return merged


@dataclass(frozen=True)
class ScaleStep:
    at_s: float
    nodes: int
    reason: str


@dataclass(frozen=True)
class ScalePlan:
    steps: tuple[ScaleStep, ...]
    freed_gpu_s: float
    """GPU-seconds given back to the cluster, restart costs subtracted."""
    baseline_gpu_s: float
    """GPU-seconds the job holds at MAX nodes throughout."""

    @property
    def freed_fraction(self) -> float:
        return self.freed_gpu_s / self.baseline_gpu_s if self.baseline_gpu_s else 0.0


def scale_plan(
    segments: Sequence[Segment],
    *,
    min_nodes: int,
    max_nodes: int,
    gpus_per_node: int,
    restart_cost_s: float = 60.0,
) -> ScalePlan:
    """Shrink to ``min_nodes`` through validation/idle phases worth it, grow back after."""
    if not 1 <= min_nodes <= max_nodes:
        raise InputError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}:{max_nodes}")
    if gpus_per_node < 1:
        raise InputError(f"gpus_per_node must be positive, got {gpus_per_node}")
    steps: list[ScaleStep] = []
    freed = 0.0
    total = sum(s.duration_s for s in segments)
    spare_nodes = max_nodes - min_nodes
    for segment in segments:
        if segment.phase == "train" or spare_nodes == 0:
            continue
        # Worth it only if the freed GPU time beats what two restarts of the job cost.
        gain = spare_nodes * gpus_per_node * segment.duration_s
        cost = 2 * restart_cost_s * max_nodes * gpus_per_node
        if gain <= cost:
            continue
        steps.append(ScaleStep(segment.start_s, min_nodes, f"{segment.phase} phase begins"))
        steps.append(ScaleStep(segment.end_s, max_nodes, f"{segment.phase} phase ends"))
        freed += gain - cost
    return ScalePlan(
        steps=tuple(steps),
        freed_gpu_s=freed,
        baseline_gpu_s=total * max_nodes * gpus_per_node,
    )
