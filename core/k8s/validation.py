"""Offline validation of generated Kubernetes manifests against the API schema."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import kubernetes_validate

from kubesage.core.errors import InputError

KUBERNETES_VERSION = "1.31"
"""Schema version manifests are validated against."""


def validate_manifests(manifests: Iterable[Mapping[str, Any]]) -> None:
    """Raise InputError naming the first manifest that is not valid Kubernetes (strict)."""
    for manifest in manifests:
        try:
            kubernetes_validate.validate(dict(manifest), KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            name = (manifest.get("metadata") or {}).get("name", "?")
            raise InputError(
                f"generated {manifest.get('kind', '?')} '{name}' is not valid "
                f"Kubernetes {KUBERNETES_VERSION}: {exc.message}"
            ) from exc
