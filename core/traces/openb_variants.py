"""openb workload variants generated from a base pod list.

The FGD paper evaluates 17 openb workloads; four of them ship beside ``default`` in
this project's shared data (and ``kubesage data fetch openb``), the other twelve in the
public repository only (``kubesage data fetch openb-variants``). Each variant stresses
one thing, named by its kind and a percentage:

- ``gpushare<N>``: GPU-sharing pods (one GPU, a share below 1,000 milli) request N %
  of the workload's GPU. The pods are drawn again from the base, as many as it has,
  its CPU-only pods kept in number, its GPU pods drawn with the sharing ones weighted
  so that they carry N % of the GPU in expectation (``gpushare40`` in the trace: the
  same pod count and CPU-only count as ``default``, 40 % of the GPU in shares).
- ``multigpu<N>``: pods of two or more GPUs request N % of the GPU: the base,
  plus multi-GPU pods drawn from the base's until they do (``multigpu20``: ``default``
  and 172 more multi-GPU pods).
- ``gpuspec<N>``: GPU pods restricted to some GPU models request N % of the GPU: the
  base's pods, with constraints given to GPU pods taken in random order until they
  (the base's own constrained pods counted) do (``gpuspec20``: ``default``'s pods,
  18 % of them constrained). The constraints are drawn from those of ``specs`` when
  given (a pod list that carries some, such as the trace's ``gpuspec20``), else one
  GPU model per pod, drawn in proportion to the cluster's GPUs of each model
  (``models``).
- ``cpu<NNN>``: CPU-only pods are NNN / 10 % of the pods (``cpu050``: 5 %): the base's
  GPU pods, and its CPU-only pods drawn to that count (without replacement while the
  base has enough); ``cpu0``, as the trace names it, has none.

Drawn pods keep every field of the pod they copy and get fresh unique names
(``<kind><N>-pod-<i>``). The same base, variant name and seed give the same list.
Variant names are checked, and so is the base: ``multigpu`` and ``gpuspec`` only add
to a share, so a base already above the target is refused, as is a base without GPU
pods; :class:`~kubesage.core.errors.InputError` names what is wrong.
:func:`variant_statistics` measures what each kind controls, so a generated list can
be checked against its name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.types import NodeSpec, PodRequest

KINDS = ("gpushare", "multigpu", "gpuspec", "cpu")
_WHAT = {"multigpu": "multi-GPU pods", "gpuspec": "GPU-model-constrained pods"}
PUBLISHED_VARIANTS = (
    "cpu050", "cpu100", "cpu200", "cpu250",
    "gpushare40", "gpushare60", "gpushare80", "gpushare100",
    "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33",
    "multigpu20", "multigpu30", "multigpu40", "multigpu50",
)  # fmt: skip
"""The FGD paper's variants of ``default`` (its published results cover all of them)."""

_NAME = re.compile(r"^(?:(gpushare|multigpu|gpuspec)(\d{1,3})|(cpu)(0|\d{3}))$")


@dataclass(frozen=True)
class Variant:
    """A parsed variant name: its kind and the share it sets, as a fraction."""

    name: str
    kind: str
    share: float


def parse_variant(name: str) -> Variant:
    """``gpushare60`` → (gpushare, 0.60); ``cpu050`` → (cpu, 0.05); ``cpu0`` (the trace's
    name for no CPU-only pods) → (cpu, 0). InputError if not one."""
    match = _NAME.match(name.strip())
    if match is None:
        raise InputError(
            f"openb variant {name!r}: expected one of {', '.join(KINDS)} followed by a "
            "percentage (gpushare60, multigpu30, gpuspec25; cpu takes three digits, tenths "
            "of a percent: cpu050 is 5 % CPU-only pods, cpu0 none)"
        )
    kind, digits = match.group(1) or match.group(3), match.group(2) or match.group(4)
    share = int(digits) / (1000 if kind == "cpu" else 100)
    lowest_ok = kind == "cpu" and share == 0  # cpu0: the GPU pods alone
    if not (0 < share <= 1 or lowest_ok) or (kind in ("multigpu", "gpuspec", "cpu") and share >= 1):
        raise InputError(f"openb variant {name!r}: {share:.0%} is out of range for {kind}")
    return Variant(name=name.strip(), kind=kind, share=share)


def gpus_per_model(nodes: Sequence[NodeSpec]) -> dict[str, int]:
    """The cluster's GPUs of each model (what ``gpuspec`` draws constraints by)."""
    counts: dict[str, int] = {}
    for node in nodes:
        if node.gpu_model and node.gpu_count:
            counts[node.gpu_model] = counts.get(node.gpu_model, 0) + node.gpu_count
    return counts


def variant_statistics(pods: Sequence[PodRequest]) -> dict[str, float]:
    """What the variant kinds control: ``gpushare``, ``multigpu`` and ``gpuspec`` as
    shares of the requested GPU, ``cpu`` as the share of pods, and ``pods``."""
    gpu = np.array([pod.total_gpu_milli for pod in pods], dtype=np.float64)
    total = gpu.sum() or 1.0
    sharing = np.array([pod.is_gpu_sharing for pod in pods], dtype=bool)
    multi = np.array([pod.num_gpu > 1 for pod in pods], dtype=bool)
    constrained = np.array([bool(pod.gpu_models) and pod.num_gpu > 0 for pod in pods])
    cpu_only = np.array([pod.num_gpu == 0 for pod in pods], dtype=bool)
    return {
        "gpushare": float(gpu[sharing].sum() / total),
        "multigpu": float(gpu[multi].sum() / total),
        "gpuspec": float(gpu[constrained].sum() / total) if constrained.size else 0.0,
        "cpu": float(cpu_only.mean()) if cpu_only.size else 0.0,
        "pods": float(len(pods)),
    }


def openb_variant(
    base: Sequence[PodRequest],
    name: str,
    *,
    seed: int = 0,
    specs: Sequence[PodRequest] = (),
    models: Mapping[str, int] | None = None,
) -> list[PodRequest]:
    """The variant ``name`` of ``base`` (see the module docstring); ``specs``: pods
    whose GPU-model constraints ``gpuspec`` draws from; ``models``: GPUs per model in
    the cluster, for ``gpuspec`` without ``specs``."""
    variant = parse_variant(name)
    if not base:
        raise InputError(f"openb variant {variant.name}: the base pod list is empty")
    rng = np.random.default_rng(seed)
    pods = list(base)
    gpu_pods = [pod for pod in pods if pod.num_gpu > 0]
    cpu_pods = [pod for pod in pods if pod.num_gpu == 0]
    if not gpu_pods:
        raise InputError(f"openb variant {variant.name}: the base has no GPU pods")
    if variant.kind in ("multigpu", "gpuspec"):
        already = variant_statistics(pods)[variant.kind]
        if already > variant.share + 0.005:
            raise InputError(
                f"openb variant {variant.name}: the base's {_WHAT[variant.kind]} already "
                f"request {already:.1%} of its GPU, and this kind only adds to that; start "
                f"from a base below {variant.share:.0%}"
            )
    if variant.kind == "gpushare":
        drawn = _gpushare(variant, pods, gpu_pods, cpu_pods, rng)
    elif variant.kind == "multigpu":
        drawn = _multigpu(variant, pods, rng)
    elif variant.kind == "gpuspec":
        drawn = _gpuspec(variant, pods, rng, specs, models)
    else:
        drawn = _cpu(variant, gpu_pods, cpu_pods, rng)
    return [
        pod.model_copy(update={"name": f"{variant.name}-pod-{i:05d}"})
        for i, pod in enumerate(drawn)
    ]


def _pick(
    variant: Variant, pool: Sequence[PodRequest], count: int, rng: np.random.Generator
) -> list[PodRequest]:
    """``count`` pods of ``pool``, without replacement while it has enough."""
    if count <= 0:
        return []
    if not pool:
        raise InputError(f"openb variant {variant.name}: the base has no CPU-only pods to draw")
    chosen = rng.choice(len(pool), size=count, replace=count > len(pool))
    return [pool[i] for i in chosen.tolist()]


def _gpushare(
    variant: Variant,
    pods: list[PodRequest],
    gpu_pods: list[PodRequest],
    cpu_pods: list[PodRequest],
    rng: np.random.Generator,
) -> list[PodRequest]:
    sharing = np.array([pod.is_gpu_sharing for pod in gpu_pods], dtype=bool)
    gpu = np.array([pod.total_gpu_milli for pod in gpu_pods], dtype=np.float64)
    shared, other = gpu[sharing].sum(), gpu[~sharing].sum()
    if shared == 0:
        raise InputError(f"openb variant {variant.name}: the base has no GPU-sharing pods")
    if other == 0 and variant.share < 1:
        raise InputError(
            f"openb variant {variant.name}: every GPU pod of the base shares a GPU, so no "
            "draw can bring the share below 100 %; the base needs whole-GPU pods too"
        )
    if variant.share >= 1 or other == 0:
        weights = sharing.astype(np.float64)
    else:
        # A drawn pod's GPU is in shares with probability w·shared / (w·shared + other):
        # this weight makes that the target share.
        weight = variant.share * other / ((1 - variant.share) * shared)
        weights = np.where(sharing, weight, 1.0)
    chosen = rng.choice(len(gpu_pods), size=len(gpu_pods), p=weights / weights.sum())
    drawn = [gpu_pods[i] for i in chosen.tolist()] + _pick(variant, cpu_pods, len(cpu_pods), rng)
    return [drawn[i] for i in rng.permutation(len(drawn)).tolist()]


def _multigpu(
    variant: Variant, pods: list[PodRequest], rng: np.random.Generator
) -> list[PodRequest]:
    multi = [pod for pod in pods if pod.num_gpu > 1]
    if not multi:
        raise InputError(f"openb variant {variant.name}: the base has no multi-GPU pods")
    total = float(sum(pod.total_gpu_milli for pod in pods))
    held = float(sum(pod.total_gpu_milli for pod in multi))
    drawn = list(pods)
    while held < variant.share * total:
        pod = multi[int(rng.integers(len(multi)))]
        drawn.append(pod)
        held += pod.total_gpu_milli
        total += pod.total_gpu_milli
    return drawn


def _gpuspec(
    variant: Variant,
    pods: list[PodRequest],
    rng: np.random.Generator,
    specs: Sequence[PodRequest],
    models: Mapping[str, int] | None,
) -> list[PodRequest]:
    pool = [pod.gpu_models for pod in specs if pod.gpu_models and pod.num_gpu > 0]
    if not pool:
        if not models:
            raise InputError(
                f"openb variant {variant.name}: give pods with GPU-model constraints "
                "to draw from, or the cluster's GPUs per model"
            )
        names = sorted(models)
        counts = np.array([models[m] for m in names], dtype=np.float64)
        picks = rng.choice(len(names), size=len(pods), p=counts / counts.sum())
        pool = [(names[i],) for i in picks.tolist()]
    total = float(sum(pod.total_gpu_milli for pod in pods))
    drawn = list(pods)
    held = sum(pod.total_gpu_milli for pod in pods if pod.gpu_models and pod.num_gpu > 0)
    for position in rng.permutation(len(pods)).tolist():
        if held >= variant.share * total:
            break
        pod = drawn[position]
        if pod.num_gpu == 0 or pod.gpu_models:
            continue
        constraint = pool[int(rng.integers(len(pool)))]
        drawn[position] = pod.model_copy(update={"gpu_models": constraint})
        held += pod.total_gpu_milli
    return drawn


def _cpu(
    variant: Variant,
    gpu_pods: list[PodRequest],
    cpu_pods: list[PodRequest],
    rng: np.random.Generator,
) -> list[PodRequest]:
    count = round(variant.share * len(gpu_pods) / (1 - variant.share))
    drawn = list(gpu_pods) + _pick(variant, cpu_pods, count, rng)
    return [drawn[i] for i in rng.permutation(len(drawn)).tolist()]
