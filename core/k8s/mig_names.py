"""MIG profile names as the core reads them: the device plugin's resource name for a
profile (and back), and a profile's geometry from its name, so the core needs no GPU
catalogue (the GPU adapter has the real ones).

A media-engine profile (``1g.10gb+me``) is a resource ending ``.me``: a resource name is
a DNS subdomain, so the device plugin writes ``+`` as ``.``.
"""

from __future__ import annotations

import re

from kubesage.core.k8s.translate_errors import TranslateError
from kubesage.core.types import MigShape

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
"""Extended resources of MIG instances under the NVIDIA device plugin's mixed strategy."""
MEDIA_SUFFIX = "+me"
"""A profile with the media engines (``1g.10gb+me``); its resource ends ``.me`` instead."""

# MIG geometry shared by A100 and Hopper (NVIDIA MIG User Guide), keyed by compute
# slices: (memory slices, allowed start slices). Profiles whose geometry is not their
# compute count's are listed by name below.
_MIG_GEOMETRY: dict[int, tuple[int, tuple[int, ...]]] = {
    1: (1, (0, 1, 2, 3, 4, 5, 6)),
    2: (2, (0, 2, 4)),
    3: (4, (0, 4)),
    4: (4, (0,)),
    7: (8, (0,)),
}
_MIG_BY_NAME: dict[str, tuple[int, tuple[int, ...]]] = {
    # 1g profiles with two memory slices, at most 4 per GPU (A100/H100-80GB 1g.20gb,
    # H100-94GB/96GB 1g.24gb, H200 1g.35gb, GH200-144GB 1g.36gb, B200 1g.45gb, GB200
    # 1g.47gb: NVIDIA's MIG User Guide tables and its default mig-parted config).
    # A100-40GB's 1g.10gb is also two slices, but on 80 GB GPUs 1g.10gb is the one-slice
    # profile, which is what this module assumes.
    **dict.fromkeys(
        ("1g.20gb", "1g.24gb", "1g.35gb", "1g.36gb", "1g.45gb", "1g.47gb"), (2, (0, 2, 4, 6))
    ),
    # A30: four memory and four compute slices, each memory slice two of the eight here
    # (names no other GPU uses): at most 4 × 1g.6gb, 2 × 2g.12gb or 1 × 4g.24gb.
    "1g.6gb": (2, (0, 2, 4, 6)),
    "2g.12gb": (4, (0, 4)),
    "4g.24gb": (8, (0,)),
}
_MIG_PROFILE = re.compile(r"^([1-7])g\.([0-9]+)gb(\+me)?$")

KNOWN_MIG_PROFILES: tuple[str, ...] = (
    # A100-40GB (A800-40GB)
    *("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    # A100-80GB, H100-80GB (A800-80GB, H800-80GB); 1g.10gb as above
    *("1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    # H100-94GB (H100/H800 NVL) and H100-96GB (GH200, H20)
    *("1g.12gb", "1g.12gb+me", "1g.24gb", "1g.24gb+me", "2g.24gb", "3g.47gb", "4g.47gb"),
    *("7g.94gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    # H200-141GB, and GH200-144GB; 1g.18gb is both's
    *("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    *("1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"),
    # B200 and GB200; 1g.23gb is both's
    *("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    *("1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb", "3g.95gb", "4g.95gb", "7g.189gb"),
    # A30
    *("1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"),
)
"""Every MIG profile of the GPUs in NVIDIA's MIG User Guide tables and its default
mig-parted config (the GPU adapter's catalogues and those without one). The deployed
extender's ``managedResources`` lists each one's resource (:func:`mig_resource_name`):
kube-scheduler sends an extender only the pods asking for a resource it lists, so a pod
asking for an unlisted profile would bypass kubesage without a word."""


def mig_resource_name(profile: str) -> str:
    """The device plugin's resource for MIG ``profile`` (mixed strategy): ``mig-`` and the
    profile, ``+`` written ``.`` since a resource name is a DNS subdomain
    (``1g.10gb+me`` → ``nvidia.com/mig-1g.10gb.me``)."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def mig_profile_of(resource: str) -> str:
    """The MIG profile a device-plugin resource names: :func:`mig_resource_name` undone."""
    name = resource.removeprefix(MIG_RESOURCE_PREFIX)
    media = "." + MEDIA_SUFFIX[1:]
    return name.removesuffix(media) + MEDIA_SUFFIX if name.endswith(media) else name


def mig_shape(profile: str, path: str = "mig profile") -> MigShape:
    """The core's geometry of a MIG profile name such as ``3g.40gb`` or ``1g.10gb+me``."""
    match = _MIG_PROFILE.match(profile)
    if match is None or int(match.group(1)) not in _MIG_GEOMETRY:
        raise TranslateError(
            f"'{profile}' is not a MIG profile name (<compute>g.<memory>gb, e.g. 3g.40gb)",
            path=path,
        )
    compute = int(match.group(1))
    memory_slices, starts = _MIG_BY_NAME.get(
        profile.removesuffix(MEDIA_SUFFIX), _MIG_GEOMETRY[compute]
    )
    return MigShape(
        profile=profile,
        memory_slices=memory_slices,
        compute_slices=compute,
        starts=starts,
        media_engines=profile.endswith(MEDIA_SUFFIX),
    )


def max_per_gpu(shape: MigShape) -> int:
    """How many instances of ``shape`` one GPU holds at most (its start slots taken in
    order, each after the last one's slices; one for a ``+me`` profile)."""
    if shape.media_engines:
        return 1
    count, free_from = 0, 0
    for start in sorted(shape.starts):
        if start >= free_from:
            count, free_from = count + 1, start + shape.memory_slices
    return count
