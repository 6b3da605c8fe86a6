"""Offline validation of generated Kubernetes manifests against the API schema."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import kubernetes_validate

from kubesage.core.errors import InputError

KUBERNETES_VERSION = "1.31"
"""Schema version manifests are validated against."""

DRA_KUBERNETES_VERSION = "1.34"
"""The first schema version with ``resource.k8s.io/v1`` (DRA's GA): for manifests that use it."""


def validate_manifests(
    manifests: Iterable[Mapping[str, Any]], kubernetes_version: str = KUBERNETES_VERSION
) -> None:
    """Raise InputError naming the first manifest that is not valid Kubernetes (strict)."""
    for manifest in manifests:
        try:
            kubernetes_validate.validate(dict(manifest), kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            name = (manifest.get("metadata") or {}).get("name", "?")
            raise InputError(
                f"generated {manifest.get('kind', '?')} '{name}' is not valid "
                f"Kubernetes {kubernetes_version}: {exc.message}"
            ) from exc
