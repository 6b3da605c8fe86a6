"""What a pod asks for through its ResourceClaims, as kubesage's :class:`PodRequest`.

A pod that gets its GPUs through Dynamic Resource Allocation has no ``nvidia.com/gpu``
limit: :func:`~kubesage.core.k8s.translate.pod_request` sees a CPU-only pod. Its GPU
demand is in the specs of the claims its ``spec.resourceClaims`` name (a template's
claim is made from its ``spec.spec``; the informer's
:class:`~kubesage.core.k8s.claim_cache.ClaimCache` finds the claims).
:func:`with_claims` adds that demand:

- a request of a whole-GPU DeviceClass (``gpu.nvidia.com``): ``count`` whole GPUs;
- a request of a MIG DeviceClass (``mig.nvidia.com``) with a selector on the
  ``profile`` attribute: one MIG instance of that profile;
- ``firstAvailable``: its first sub-request (the one the user prefers);
- requests of other classes (NICs, …): not GPUs, not counted.

What kubesage cannot model (``allocationMode: All``, several MIG devices, MIG without
a profile, both extended resources and claims) is a :class:`TranslateError`, as any
pod kubesage cannot translate.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from kubesage.core.dra import api
from kubesage.core.k8s.translate import TranslateError, mig_shape
from kubesage.core.types import PodRequest


class ClaimsPendingError(TranslateError):
    """A claim the pod names is not created (or not seen) yet: the pod waits for it."""


GPU_CLASSES: frozenset[str] = frozenset({api.GPU_DEVICE_CLASS})
MIG_CLASSES: frozenset[str] = frozenset({api.MIG_DEVICE_CLASS})

_PROFILE = re.compile(r"""\.profile\s*==\s*["']([^"']+)["']""")


def with_claims(
    request: PodRequest,
    specs: list[Mapping[str, Any]],
    *,
    gpu_classes: Collection[str] = GPU_CLASSES,
    mig_classes: Collection[str] = MIG_CLASSES,
) -> PodRequest:
    """``request`` with the GPUs the claim ``specs`` ask for (module docstring)."""
    whole = 0
    profiles: list[str] = []
    for spec in specs:
        for entry in (spec.get("devices") or {}).get("requests") or []:
            option: Mapping[str, Any] = entry.get("exactly") or next(
                iter(entry.get("firstAvailable") or []), {}
            )
            device_class = option.get("deviceClassName")
            if device_class not in gpu_classes and device_class not in mig_classes:
                continue
            path = f"resourceClaims request {entry.get('name')}"
            if (option.get("allocationMode") or api.ALLOCATION_MODE_EXACT) != (
                api.ALLOCATION_MODE_EXACT
            ):
                raise TranslateError("allocationMode All: kubesage needs a count", path=path)
            count = int(option.get("count") or 1)
            if device_class in gpu_classes:
                whole += count
                continue
            expressions = " ".join(
                str((s.get("cel") or {}).get("expression") or "")
                for s in option.get("selectors") or []
            )
            found = set(_PROFILE.findall(expressions))
            if not found:
                raise TranslateError("a MIG request without a profile selector", path=path)
            if len(found) > 1 or "||" in expressions or "!" in expressions.replace("!=", ""):
                # "!(… profile == 'x')" asks for any profile but x: no one profile to place.
                raise TranslateError(
                    "kubesage reads a MIG request's profile from one "
                    f"profile == '<name>' selector, not from {expressions!r}",
                    path=path,
                )
            profiles += [found.pop()] * count
    if not whole and not profiles:
        return request
    if request.num_gpu:
        raise TranslateError(
            "GPUs asked both as extended resources and through claims", path="resourceClaims"
        )
    if profiles and (whole or len(profiles) > 1):
        raise TranslateError(
            "kubesage models one MIG instance per pod, and no whole GPUs with it",
            path="resourceClaims",
        )
    fields = request.model_dump()
    if profiles:
        shape = mig_shape(profiles[0])
        fields.update(num_gpu=1, gpu_milli=shape.gpu_milli, mig=shape)
    else:
        fields.update(num_gpu=whole, gpu_milli=1000)
    return PodRequest.model_validate(fields)
