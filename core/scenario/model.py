"""What the mixed-workload scenario is made of: arrivals of three kinds of work, the
utilisation profiles they replay, and the training jobs' phases.

Every module of the scenario speaks these types: the workload generator
(:mod:`~kubesage.core.scenario.workload`) makes :class:`Arrival` values, the profiles
(:mod:`~kubesage.core.scenario.profiles`) give inference pods their utilisation over
time, the step-time model (:mod:`~kubesage.core.scenario.steptime`) turns a training
job's placement into its throughput, and the runner replays it all per variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kubesage.core.arrays import FloatArray
from kubesage.core.types import PodRequest


class WorkKind(StrEnum):
    INFERENCE = "inference"
    """A GPU-sharing serving pod (a share of one GPU), utilisation replayed from a profile."""
    LARGE = "large"
    """A single-GPU task that needs a whole 80 GB GPU."""
    TRAINING = "training"
    """A gang of whole-GPU members (2–64 GPUs in all) with training and validation phases."""


class PhaseKind(StrEnum):
    TRAIN = "train"
    VALIDATION = "validation"


@dataclass(frozen=True)
class Phase:
    """A stretch of a training job's life, in seconds after it starts running."""

    start_s: float
    end_s: float
    kind: PhaseKind


@dataclass(frozen=True)
class TrainingSpec:
    """What a training job computes, for the step-time model and elastic scaling."""

    model_params_b: float
    """Model size, billions of parameters: sets compute per step and gradient bytes."""
    gpus_per_member: int
    """Whole GPUs per member pod (1–8: a member never spans nodes)."""
    members: int
    """Members at full size (the gang's size; its maximum replicas)."""
    min_members: int
    """Elastic minimum (``kubesage.io/elastic-min``): members kept through validation."""
    phases: tuple[Phase, ...]
    """Training and validation phases, in order, covering the job's run time."""
    global_batch_tokens: int
    """Tokens per optimiser step (all members together)."""

    @property
    def gpus(self) -> int:
        return self.gpus_per_member * self.members


@dataclass(frozen=True)
class Arrival:
    """One piece of work arriving at the cluster."""

    id: str
    """Unique in the scenario (``inference-17``, ``train-3`` …); pods are ``<id>-<i>``."""
    kind: WorkKind
    time_s: float
    """Arrival time, seconds from the start of the scenario."""
    duration_s: float
    """How long it runs once placed (training: its phases' total at full size)."""
    pods: tuple[PodRequest, ...]
    """One request per pod (a training job: one per member, equal shapes)."""
    profile: int | None = None
    """Inference: the index of the utilisation profile it replays."""
    training: TrainingSpec | None = None
    """Training: the job's model, gang and phases."""
    running_since_s: float | None = None
    """Warm start: when work already running at 0 started (a negative time); it is
    placed before the first tick, the same way for every variant. None for the rest."""


@dataclass(frozen=True)
class UtilisationProfiles:
    """Per-pod GPU utilisation (percent) and GPU memory (bytes) over time, one column per
    profile, sampled every ``step_s`` seconds; an inference pod replays one column from
    its start, wrapping around at the end."""

    duty_pct: FloatArray
    """``[steps, profiles]``, 0–100."""
    memory_bytes: FloatArray
    """``[steps, profiles]``."""
    step_s: float
    source: str
    """Where they come from (``genai trace (<dir>)`` or ``synthetic (…statistics…)``)."""

    @property
    def count(self) -> int:
        return int(self.duty_pct.shape[1])

    def duty_at(self, profile: int, elapsed_s: float) -> float:
        """Utilisation (percent) of ``profile`` ``elapsed_s`` after the pod started."""
        steps = self.duty_pct.shape[0]
        return float(self.duty_pct[int(elapsed_s // self.step_s) % steps, profile])
