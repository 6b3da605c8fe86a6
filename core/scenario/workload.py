"""The mixed-workload scenario's arrivals: GPU-sharing inference pods, large
single-GPU tasks and multi-GPU training gangs, at an offered GPU load.

Every kind arrives as a Poisson process. Its rate is set so that the GPUs it requests
on average (rate × mean duration × mean GPUs per arrival, Little's law) are its share
of ``load × capacity_gpus`` (:data:`GPU_SHARES`). Shapes and durations come from the
openb trace (Alibaba cluster-trace-gpu-v2023, ``default`` pod list, through the
statistics :mod:`kubesage.core.traces.synthetic` keeps, so nothing needs the trace
files); training jobs' model sizes, batches and validation phases from the published
sources named at each constant. docs/scenario.md lists them all.

By default the scenario starts warm (``warm_start``): arrivals are drawn from before
time 0 as well, and whatever would still be running at 0 arrives at 0 with what is
left of it, so the offered load holds from the first second rather than ramping up
over the longest durations (days, for training).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from kubesage.core.arrays import FloatArray
from kubesage.core.scenario.model import (
    Arrival,
    Phase,
    PhaseKind,
    TrainingSpec,
    UtilisationProfiles,
    WorkKind,
)
from kubesage.core.scenario.steptime import TRAINING_STATE_BYTES_PER_PARAM, compute_time_s
from kubesage.core.traces.synthetic import OPENB_POD_SHAPES, OPENB_SHARE_MILLI
from kubesage.core.types import GPU_MILLI_PER_GPU, PodRequest

_Z90 = 1.2815515655446004
"""The standard normal's 90th percentile."""


@dataclass(frozen=True)
class DurationLaw:
    """Log-normal durations with a given median and 90th percentile, cut at ``cap_s``."""

    median_s: float
    p90_s: float
    cap_s: float
    source: str

    @property
    def mu(self) -> float:
        return math.log(self.median_s)

    @property
    def sigma(self) -> float:
        return math.log(self.p90_s / self.median_s) / _Z90

    def mean_s(self) -> float:
        """E[min(X, cap)] for X log-normal(mu, sigma)."""
        mu, sigma, log_cap = self.mu, self.sigma, math.log(self.cap_s)
        below = math.exp(mu + sigma**2 / 2) * _phi((log_cap - mu - sigma**2) / sigma)
        return below + self.cap_s * (1.0 - _phi((log_cap - mu) / sigma))

    def draw(self, rng: np.random.Generator, size: int) -> FloatArray:
        return np.minimum(rng.lognormal(self.mu, self.sigma, size), self.cap_s)


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


# --- Offered GPU time per kind -----------------------------------------------------

OPENB_GPU_SHARES: Mapping[WorkKind, float] = {
    WorkKind.INFERENCE: 1731.8 / 6086.8,
    WorkKind.LARGE: 3911.0 / 6086.8,
    WorkKind.TRAINING: 444.0 / 6086.8,
}
"""Share of the requested GPUs per kind in openb ``default`` (the pods the FGD paper
packs, ≈ 98 % of its cluster): GPU-sharing pods ask for 1,731.8 GPUs in all (sum of
``gpu_milli``), one-GPU pods for 3,911, multi-GPU pods (2, 4 and 8 GPUs) for 444.
openb is an inference cluster: training is 7 % of it."""

TRAINING_SHARE = 0.5
"""The scenario's share of GPU time for multi-GPU training. A mixed cluster is not
openb: Alibaba's PAI cluster, which runs training and inference together, is
dominated by gang-scheduled (distributed training) work — about 85 % of its task
instances ask for gang scheduling (Weng et al., "MLaaS in the Wild", NSDI 2022, §2;
the paper's exact GPU-time share was not available to us). Half is an assumption
inside that bound; ``WorkloadSettings.shares`` changes it."""

GPU_SHARES: Mapping[WorkKind, float] = {
    WorkKind.INFERENCE: (1.0 - TRAINING_SHARE)
    * OPENB_GPU_SHARES[WorkKind.INFERENCE]
    / (OPENB_GPU_SHARES[WorkKind.INFERENCE] + OPENB_GPU_SHARES[WorkKind.LARGE]),
    WorkKind.LARGE: (1.0 - TRAINING_SHARE)
    * OPENB_GPU_SHARES[WorkKind.LARGE]
    / (OPENB_GPU_SHARES[WorkKind.INFERENCE] + OPENB_GPU_SHARES[WorkKind.LARGE]),
    WorkKind.TRAINING: TRAINING_SHARE,
}
"""The scenario's shares: :data:`TRAINING_SHARE` for training, the rest split between
inference and large tasks as openb splits them (28.5 : 64.3)."""

# --- Durations: how long a pod held its GPUs in openb default ----------------------
# deletion_time − scheduled_time (creation_time when never scheduled), every pod of
# the category; pods still running at the trace's end make the top percentile
# (censored), so durations are cut at the 99th percentile.

INFERENCE_DURATION = DurationLaw(
    median_s=357.0,
    p90_s=7_096.0,
    cap_s=74_631.0,
    source="openb default, 3,077 GPU-sharing pods: median 357 s, p90 7,096 s, p99 74,631 s",
)
LARGE_DURATION = DurationLaw(
    median_s=587.0,
    p90_s=5_394.0,
    cap_s=169_836.0,
    source="openb default, 3,911 one-GPU pods: median 587 s, p90 5,394 s, p99 169,836 s",
)
TRAINING_DURATION = DurationLaw(
    median_s=573.0,
    p90_s=66_774.0,
    cap_s=1_069_632.0,
    source="openb default, 75 multi-GPU pods (2/4/8 GPUs): median 573 s, p90 66,774 s, "
    "p99 1,069,632 s",
)

# --- Training jobs ----------------------------------------------------------------

TRAINING_GPU_WEIGHTS: tuple[tuple[int, float], ...] = (
    (2, 16.0),
    (4, 15.0),
    (8, 44.0),
    (16, 22.0),
    (32, 11.0),
    (64, 5.5),
)
"""Relative number of jobs per GPU count. 2, 4, 8: openb ``default``'s 16, 15 and 44
multi-GPU pods. 16–64: no published count found (see docs/scenario.md); assumed to
halve with each doubling above 8, so every size from 8 up holds the same GPU time."""

MAX_LOAD = 1.5
"""The highest offered load. Arrivals are drawn at this load's rate and each kept with
probability ``load / MAX_LOAD`` (thinning a Poisson process gives a Poisson process),
so one seed's workloads are nested across loads and a sweep over ``--load`` compares
like with like instead of independent draws."""

MAX_JOB_SHARE = 0.25
"""No training job asks for more than a quarter of the cluster's GPUs (an assumption:
a shared cluster runs several jobs at once; a 64-GPU job on a 64-GPU cluster would
hold all of it or starve). 64-GPU jobs need 32 nodes or more."""

MEMBER_GPUS = 8
"""GPUs per member of a gang larger than one node (DGX H100/H200: 8 GPUs a node)."""

GPT3_BATCH_TOKENS: tuple[tuple[float, int], ...] = (
    (0.76, 500_000),
    (2.7, 1_000_000),
    (13.0, 2_000_000),
    (math.inf, 3_200_000),
)
"""(largest model, billions; tokens per step): Brown et al. 2020, *Language Models are
Few-Shot Learners*, Table 2.1 (125M–760M: 0.5M tokens, 1.3B–2.7B: 1M, 6.7B–13B: 2M,
175B: 3.2M)."""


ID_PREFIX: Mapping[WorkKind, str] = {
    WorkKind.INFERENCE: "inference",
    WorkKind.LARGE: "large",
    WorkKind.TRAINING: "train",
}
"""Arrival ids are ``<prefix>-<n>``, numbered in time order per kind."""


def _member_layout(gpus: int) -> tuple[int, int]:
    """(members, GPUs per member): one member per node, at most 8 GPUs each."""
    if gpus <= MEMBER_GPUS:
        return 1, gpus
    return gpus // MEMBER_GPUS, MEMBER_GPUS


@dataclass(frozen=True)
class WorkloadSettings:
    """What :func:`generate_workload` draws; every default is a documented constant."""

    hours: float = 2.0
    load: float = 0.85
    """Offered GPU load: mean GPUs requested over time / ``capacity_gpus``."""
    capacity_gpus: int = 128
    shares: Mapping[WorkKind, float] = field(default_factory=lambda: dict(GPU_SHARES))
    inference_duration: DurationLaw = INFERENCE_DURATION
    large_duration: DurationLaw = LARGE_DURATION
    training_duration: DurationLaw = TRAINING_DURATION
    training_gpu_weights: tuple[tuple[int, float], ...] = TRAINING_GPU_WEIGHTS
    gpu_memory_gb: float = 80.0
    """The scenario's GPUs are 80 GB class (H200s have more: sizing for 80 fits both)."""
    memory_headroom: float = 0.5
    """Share of GPU memory a job's training state may take, the rest left to
    activations and buffers (an assumption: activation memory depends on batch and
    sequence length; Korthikanti et al. 2022 put it at the same order as the state)."""
    model_size_span: float = 8.0
    """Model sizes are log-uniform from the largest that fits / span to the largest
    (an assumption: jobs use from an eighth of their memory's room up to all of it)."""
    eval_interval_steps: int = 1000
    """Validation every this many steps: Megatron-LM's ``--eval-interval`` default."""
    eval_iters: int = 100
    """Validation iterations each time: Megatron-LM's ``--eval-iters`` default."""
    eval_cost: float = 1.0 / 3.0
    """A validation iteration's cost against a training step: forward only, 2 of the
    6 FLOPs per parameter per token (Kaplan et al. 2020, §2.1)."""
    gpu_model: str = "H100-80GB"
    """GPU type whose ideal step time sets the phases' lengths."""
    warm_start: bool = True
    namespace: str = "mixed"

    def __post_init__(self) -> None:
        if not (self.hours > 0 and self.load > 0 and self.capacity_gpus > 0):
            raise ValueError("hours, load and capacity_gpus must be positive")
        if any(share < 0 for share in self.shares.values()) or not any(self.shares.values()):
            raise ValueError(f"GPU shares must be non-negative, some positive: {self.shares}")
        if any(gpus not in (2, 4, 8, 16, 32, 64) for gpus, _ in self.training_gpu_weights):
            raise ValueError("training jobs take 2, 4, 8, 16, 32 or 64 GPUs")

    @property
    def job_gpu_weights(self) -> tuple[tuple[int, float], ...]:
        """:attr:`training_gpu_weights` without jobs larger than
        :data:`MAX_JOB_SHARE` of the cluster (the smallest size always stays)."""
        limit = self.capacity_gpus * MAX_JOB_SHARE
        kept = tuple((g, w) for g, w in self.training_gpu_weights if g <= limit)
        return kept or (min(self.training_gpu_weights),)

    def share(self, kind: WorkKind) -> float:
        return self.shares.get(kind, 0.0) / sum(self.shares.values())

    def target_gpus(self, kind: WorkKind) -> float:
        """Mean GPUs ``kind`` requests over time."""
        return self.load * self.capacity_gpus * self.share(kind)

    def duration(self, kind: WorkKind) -> DurationLaw:
        return {
            WorkKind.INFERENCE: self.inference_duration,
            WorkKind.LARGE: self.large_duration,
            WorkKind.TRAINING: self.training_duration,
        }[kind]

    def mean_gpus(self, kind: WorkKind) -> float:
        """Mean GPUs one arrival of ``kind`` requests."""
        if kind is WorkKind.INFERENCE:
            counts = np.array([c for _, c in OPENB_SHARE_MILLI], dtype=float)
            milli = np.array([m for m, _ in OPENB_SHARE_MILLI], dtype=float)
            return float((counts * milli).sum() / counts.sum() / GPU_MILLI_PER_GPU)
        if kind is WorkKind.LARGE:
            return 1.0
        weights = np.array([w for _, w in self.job_gpu_weights])
        gpus = np.array([g for g, _ in self.job_gpu_weights], dtype=float)
        return float((weights * gpus).sum() / weights.sum())

    def rate_per_s(self, kind: WorkKind) -> float:
        """Poisson arrival rate giving ``kind`` its target GPUs (Little's law)."""
        return self.target_gpus(kind) / (self.mean_gpus(kind) * self.duration(kind).mean_s())


def generate_workload(
    settings: WorkloadSettings, profiles: UtilisationProfiles, seed: int
) -> list[Arrival]:
    """Every arrival of the scenario, sorted by time (then id); the same for a seed."""
    children = np.random.SeedSequence(seed).spawn(len(WorkKind))
    arrivals: list[Arrival] = []
    for kind, child in zip(WorkKind, children, strict=True):
        arrivals.extend(_kind_arrivals(settings, kind, profiles, np.random.default_rng(child)))
    return sorted(arrivals, key=lambda a: (a.time_s, a.id))


def _kind_arrivals(
    settings: WorkloadSettings,
    kind: WorkKind,
    profiles: UtilisationProfiles,
    rng: np.random.Generator,
) -> list[Arrival]:
    rate = settings.rate_per_s(kind)
    if rate <= 0:
        return []
    if settings.load > MAX_LOAD:
        raise ValueError(f"load must be at most {MAX_LOAD:g}, got {settings.load:g}")
    law = settings.duration(kind)
    start = -law.cap_s if settings.warm_start else 0.0
    end = settings.hours * 3600.0
    # Candidates at the rate of MAX_LOAD, each kept with probability load / MAX_LOAD:
    # the same seed at a higher load offers a superset of the same work.
    count = int(rng.poisson(rate * MAX_LOAD / settings.load * (end - start)))
    times = np.sort(rng.uniform(start, end, count))
    durations = law.draw(rng, count)
    kept = rng.uniform(0.0, 1.0, count) < settings.load / MAX_LOAD
    arrivals: list[Arrival] = []
    for index, (time_s, duration_s) in enumerate(zip(times, durations, strict=True)):
        arrival = _make(
            settings, kind, f"{ID_PREFIX[kind]}-{index}", float(duration_s), profiles, rng
        )
        elapsed = max(0.0, -float(time_s))
        if kept[index] and elapsed < duration_s:  # else: not offered, or done before 0
            arrivals.append(_started(arrival, float(time_s), elapsed))
    return arrivals


def _make(
    settings: WorkloadSettings,
    kind: WorkKind,
    arrival_id: str,
    duration_s: float,
    profiles: UtilisationProfiles,
    rng: np.random.Generator,
) -> Arrival:
    """One arrival at time 0 running ``duration_s`` (placed in time by the caller)."""
    name = f"{settings.namespace}/{arrival_id}"
    if kind is WorkKind.INFERENCE:
        cpu, memory = _shape(rng, "share")
        milli = _share_milli(rng)
        pod = PodRequest(
            name=f"{name}-0", cpu_milli=cpu, memory_mib=memory, num_gpu=1, gpu_milli=milli
        )
        profile = int(rng.integers(profiles.count))
        return Arrival(arrival_id, kind, 0.0, duration_s, (pod,), profile=profile)
    if kind is WorkKind.LARGE:
        cpu, memory = _shape(rng, "gpu1")
        pod = PodRequest(
            name=f"{name}-0",
            cpu_milli=cpu,
            memory_mib=memory,
            num_gpu=1,
            gpu_milli=GPU_MILLI_PER_GPU,
        )
        return Arrival(arrival_id, kind, 0.0, duration_s, (pod,))
    spec = _training_spec(settings, rng, duration_s)
    cpu, memory = _shape(rng, f"gpu{spec.gpus_per_member}")
    pods = tuple(
        PodRequest(
            name=f"{name}-{i}",
            cpu_milli=cpu,
            memory_mib=memory,
            num_gpu=spec.gpus_per_member,
            gpu_milli=GPU_MILLI_PER_GPU,
            gang_id=arrival_id,
        )
        for i in range(spec.members)
    )
    return Arrival(arrival_id, kind, 0.0, duration_s, pods, training=spec)


def _training_spec(
    settings: WorkloadSettings, rng: np.random.Generator, duration_s: float
) -> TrainingSpec:
    sizes = settings.job_gpu_weights
    weights = np.array([w for _, w in sizes])
    gpus = sizes[int(rng.choice(len(weights), p=weights / weights.sum()))][0]
    members, per_member = _member_layout(gpus)
    min_members = max(1, members // 2)
    # The elastic minimum must still hold the whole training state (ZeRO-3 sharded).
    room_gb = min_members * per_member * settings.gpu_memory_gb * settings.memory_headroom
    largest_b = room_gb / TRAINING_STATE_BYTES_PER_PARAM
    low = math.log(largest_b / settings.model_size_span)
    params_b = round(math.exp(rng.uniform(low, math.log(largest_b))), 2)
    tokens = next(t for limit, t in GPT3_BATCH_TOKENS if params_b <= limit)
    spec = TrainingSpec(
        model_params_b=params_b,
        gpus_per_member=per_member,
        members=members,
        min_members=min_members,
        phases=(),
        global_batch_tokens=tokens,
    )
    step_s = compute_time_s(spec, spec.gpus, settings.gpu_model)
    phases = _phases(
        duration_s,
        settings.eval_interval_steps * step_s,
        settings.eval_iters * settings.eval_cost * step_s,
    )
    return replace(spec, phases=phases)


def _phases(duration_s: float, train_s: float, validation_s: float) -> tuple[Phase, ...]:
    """Training for ``train_s``, validation for ``validation_s``, … up to ``duration_s``."""
    phases: list[Phase] = []
    now = 0.0
    kinds = ((PhaseKind.TRAIN, train_s), (PhaseKind.VALIDATION, validation_s))
    while now < duration_s:
        for kind, length in kinds:
            end = min(now + length, duration_s)
            if end > now:
                phases.append(Phase(now, end, kind))
            now = end
            if now >= duration_s:
                break
    return tuple(phases)


def _started(arrival: Arrival, time_s: float, elapsed_s: float) -> Arrival:
    """``arrival`` placed at ``time_s``; one that started ``elapsed_s`` before 0
    arrives at 0 with the rest of its run (and of its phases)."""
    pods = tuple(
        pod.model_copy(update={"creation_time_s": round(max(time_s, 0.0), 3)})
        for pod in arrival.pods
    )
    if elapsed_s <= 0:
        return replace(arrival, time_s=time_s, pods=pods)
    training = arrival.training
    if training is not None:
        phases = tuple(
            Phase(max(0.0, p.start_s - elapsed_s), p.end_s - elapsed_s, p.kind)
            for p in training.phases
            if p.end_s > elapsed_s
        )
        training = replace(training, phases=phases)
    return replace(
        arrival,
        time_s=0.0,
        duration_s=arrival.duration_s - elapsed_s,
        pods=pods,
        training=training,
        running_since_s=-elapsed_s,
    )


def _shape(rng: np.random.Generator, category: str) -> tuple[int, int]:
    """(cpu_milli, memory_mib) drawn from openb's shapes for ``category``."""
    shapes = OPENB_POD_SHAPES[category]
    counts = np.array([s[2] for s in shapes], dtype=float)
    cpu, memory, _ = shapes[int(rng.choice(len(shapes), p=counts / counts.sum()))]
    return cpu, memory


def _share_milli(rng: np.random.Generator) -> int:
    counts = np.array([c for _, c in OPENB_SHARE_MILLI], dtype=float)
    index = int(rng.choice(len(counts), p=counts / counts.sum()))
    return OPENB_SHARE_MILLI[index][0]
