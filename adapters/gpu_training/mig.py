"""NVIDIA MIG profile catalogues, placement rules and mig-parted layouts.

A GPU in MIG mode has 8 memory slices and 7 compute slices. A GPU instance of a
profile occupies ``memory_slices`` consecutive memory slices starting at one of
the profile's allowed start slots, and ``compute_slices`` compute slices. A layout
(a set of instances on one GPU) is valid when every instance starts at an
allowed slot, no two instances share a memory slice, the compute slices add up to
at most 7, and no profile exceeds its instance count.

The tables follow NVIDIA's MIG User Guide ("Supported MIG Profiles") and real
``nvidia-smi mig -lgipp`` output; ``docs/research/mig-profiles.md`` cites each
fact and its confidence. A100-40GB and H100-80GB placements are confirmed;
A100-80GB and H200-141GB placements are inferred from the same die layout and
must be checked against NVML on real hardware (``confidence`` says so).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kubesage.core.errors import InputError
from kubesage.core.k8s.mig_names import MEDIA_SUFFIX, mig_resource_name
from kubesage.core.types import MigShape, PodRequest

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of one GPU model."""

    name: str
    """Profile name as nvidia-smi and mig-parted spell it, e.g. ``3g.40gb``."""
    profile_id: int
    """``nvidia-smi mig -lgip`` profile ID."""
    compute_slices: int
    memory_slices: int
    """Placement size, in memory slices."""
    starts: tuple[int, ...]
    """Allowed start memory slices."""
    max_count: int
    """Most instances of this profile on one GPU."""

    @property
    def resource_name(self) -> str:
        """The Kubernetes extended resource under the device plugin's mixed strategy."""
        return mig_resource_name(self.name)


@dataclass(frozen=True)
class MigCatalogue:
    gpu_model: str
    profiles: tuple[MigProfile, ...]
    confidence: str
    """``confirmed`` or what is inferred and must be checked on hardware."""

    def profile(self, name: str) -> MigProfile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.profiles)
        raise InputError(f"{self.gpu_model} has no MIG profile '{name}'; it has {known}")


# Profile shapes shared by A100 and Hopper: (profile ID, compute slices, memory
# slices, allowed starts, max count), in the guide's order.
_SHAPES: tuple[tuple[int, int, int, tuple[int, ...], int], ...] = (
    (19, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    (20, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),  # +me: the one instance with media engines
    (15, 1, 2, (0, 2, 4, 6), 4),
    (14, 2, 2, (0, 2, 4), 3),
    (9, 3, 4, (0, 4), 2),
    (5, 4, 4, (0,), 1),
    (0, 7, 8, (0,), 1),
)

_NAMES: dict[str, tuple[tuple[str, ...], str]] = {
    "A100-40GB": (
        ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
        "confirmed (MIG User Guide example output)",
    ),
    "A100-80GB": (
        ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        "names confirmed; placements inferred from A100-40GB",
    ),
    "H100-80GB": (
        ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        "confirmed (public nvidia-smi mig -lgipp output)",
    ),
    "H200-141GB": (
        ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
        "names and counts confirmed; placements and most IDs inferred from H100 — check with NVML",
    ),
    "H100-94GB": (
        ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
        "names and counts confirmed (guide, NVIDIA's default mig-parted config); placements "
        "and IDs inferred from H100-80GB",
    ),
    "H100-96GB": (
        ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
        "names and counts confirmed (guide: H100 on GH200); placements and IDs inferred from "
        "H100-80GB",
    ),
}

CATALOGUES: dict[str, MigCatalogue] = {
    model: MigCatalogue(
        gpu_model=model,
        profiles=tuple(
            MigProfile(name, profile_id, compute, memory, starts, count)
            for name, (profile_id, compute, memory, starts, count) in zip(
                names, _SHAPES, strict=True
            )
        ),
        confidence=confidence,
    )
    for model, (names, confidence) in _NAMES.items()
}


def catalogue(gpu_model: str) -> MigCatalogue:
    """The catalogue of ``gpu_model`` (a key of :data:`CATALOGUES`)."""
    found = CATALOGUES.get(gpu_model)
    if found is None:
        raise InputError(
            f"no MIG catalogue for GPU model '{gpu_model}'; known: {', '.join(CATALOGUES)}"
        )
    return found


@dataclass(frozen=True)
class MigInstance:
    """A GPU instance of a profile at a start slot."""

    profile: str
    start: int


def layout_errors(gpu_model: str, layout: Sequence[MigInstance]) -> list[str]:
    """Every rule ``layout`` breaks on one GPU of ``gpu_model`` (empty when valid)."""
    cat = catalogue(gpu_model)
    errors: list[str] = []
    used: dict[int, MigInstance] = {}
    compute = 0
    counts: Counter[str] = Counter()
    for instance in layout:
        profile = cat.profile(instance.profile)
        counts[profile.name] += 1
        compute += profile.compute_slices
        if instance.start not in profile.starts:
            errors.append(
                f"{profile.name} cannot start at memory slice {instance.start} "
                f"(allowed: {', '.join(map(str, profile.starts))})"
            )
            continue
        for memory_slice in range(instance.start, instance.start + profile.memory_slices):
            if memory_slice in used:
                other = used[memory_slice]
                errors.append(
                    f"{profile.name}@{instance.start} overlaps {other.profile}@{other.start} "
                    f"on memory slice {memory_slice}"
                )
                break
            used[memory_slice] = instance
    if compute > COMPUTE_SLICES:
        errors.append(f"the layout needs {compute} compute slices, a GPU has {COMPUTE_SLICES}")
    for name, count in counts.items():
        limit = cat.profile(name).max_count
        if count > limit:
            errors.append(f"{count} × {name}, at most {limit} per GPU")
    return errors


def is_valid_layout(gpu_model: str, layout: Sequence[MigInstance]) -> bool:
    return not layout_errors(gpu_model, layout)


def valid_layouts(gpu_model: str) -> Iterator[tuple[MigInstance, ...]]:
    """Every valid layout (including the empty one), instances ordered by start slot."""
    cat = catalogue(gpu_model)
    candidates = sorted(
        (MigInstance(p.name, start) for p in cat.profiles for start in p.starts),
        key=lambda i: (i.start, i.profile),
    )

    def extend(chosen: tuple[MigInstance, ...], index: int) -> Iterator[tuple[MigInstance, ...]]:
        yield chosen
        for position in range(index, len(candidates)):
            attempt = (*chosen, candidates[position])
            if is_valid_layout(gpu_model, attempt):
                yield from extend(attempt, position + 1)

    yield from extend((), 0)


def mig_parted_config(
    name: str, gpu_model: str, layout: Sequence[MigInstance]
) -> dict[str, object]:
    """A mig-parted ``version: v1`` config applying ``layout`` to every GPU of a node.

    Apply it by labelling the node ``nvidia.com/mig.config=<name>`` (GPU Operator
    MIG Manager). mig-parted places instances itself; only counts are given.
    """
    errors = layout_errors(gpu_model, layout)
    if errors:
        raise InputError(f"invalid MIG layout for {gpu_model}: {'; '.join(errors)}")
    counts = Counter(instance.profile for instance in layout)
    return {
        "version": "v1",
        "mig-configs": {
            name: [
                {
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": dict(sorted(counts.items())),
                }
            ]
        },
    }


def mig_shape(gpu_model: str, profile: str) -> MigShape:
    """The core's view of a profile (geometry only), for MIG requests in ClusterState."""
    entry = catalogue(gpu_model).profile(profile)
    return MigShape(
        profile=entry.name,
        memory_slices=entry.memory_slices,
        compute_slices=entry.compute_slices,
        starts=entry.starts,
        media_engines=entry.name.endswith(MEDIA_SUFFIX),
    )


def mig_request(
    name: str, gpu_model: str, profile: str, *, cpu_milli: int = 4_000, memory_mib: int = 16_384
) -> PodRequest:
    """A pod asking for one MIG instance of ``profile`` on a ``gpu_model`` GPU."""
    shape = mig_shape(gpu_model, profile)
    return PodRequest(
        name=name,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        num_gpu=1,
        gpu_milli=shape.gpu_milli,
        gpu_models=(gpu_model,),
        mig=shape,
    )
