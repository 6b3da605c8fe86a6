"""Offline validation of generated Kubernetes manifests: the API schema, and the API
server's rules that the schema does not carry (:func:`node_field_selector_problems`)."""

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
        name = (manifest.get("metadata") or {}).get("name", "?")
        where = f"generated {manifest.get('kind', '?')} '{name}' is not valid"
        try:
            kubernetes_validate.validate(dict(manifest), kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise InputError(f"{where} Kubernetes {kubernetes_version}: {exc.message}") from exc
        problems = node_field_selector_problems(manifest)
        if problems:
            raise InputError(f"{where}: " + "; ".join(problems))


NODE_FIELD_SELECTOR_KEYS = ("metadata.name",)
"""The node fields a node selector's ``matchFields`` may name (the API server's
``nodeFieldSelectorValidators``)."""


def node_field_selector_problems(obj: Any, path: str = "") -> list[str]:
    """What the API server refuses in every ``matchFields`` requirement found in
    ``obj`` (a manifest, or any part of one), each with its field path: the key must
    be a node field it knows (``metadata.name``), the operator ``In`` or ``NotIn``, with
    exactly one value. The OpenAPI schema allows all of these, so schema validation
    alone passes a pod that the API server then rejects."""
    problems: list[str] = []
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            at = f"{path}.{key}" if path else str(key)
            if key == "matchFields" and isinstance(value, list):
                for position, requirement in enumerate(value):
                    problems += _field_requirement_problems(requirement, f"{at}[{position}]")
            else:
                problems += node_field_selector_problems(value, at)
    elif isinstance(obj, list):
        for position, item in enumerate(obj):
            problems += node_field_selector_problems(item, f"{path}[{position}]")
    return problems


def _field_requirement_problems(requirement: Any, at: str) -> list[str]:
    if not isinstance(requirement, Mapping):
        return [f"{at}: expected a node selector requirement"]
    problems = []
    key, operator = requirement.get("key"), requirement.get("operator")
    values = requirement.get("values") or []
    if operator not in ("In", "NotIn"):
        problems.append(f"{at}.operator: {operator!r} is not a valid selector operator")
    elif len(values) != 1:
        problems.append(
            f"{at}.values: must be only one value when `operator` is 'In' or 'NotIn' for "
            f"node field selector (got {len(values)}; several nodes are several terms)"
        )
    if key not in NODE_FIELD_SELECTOR_KEYS:
        problems.append(f"{at}.key: {key!r} is not a valid field selector key")
    return problems
