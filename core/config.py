"""Strict loading of versioned YAML configuration files.

Every file under ``configs/`` starts with ``apiVersion`` and ``kind``; the rest is
decoded into a pydantic model that forbids unknown keys. Any problem raises
:class:`ConfigError` naming the file and the dotted field path, for example
``configs/simulate.yaml: field 'spec.cluster.nodes': Input should be greater than 0``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from kubesage.core.errors import ConfigError

API_VERSION = "kubesage.io/v1alpha1"

ModelT = TypeVar("ModelT", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for configuration models: unknown keys are errors, instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _field_path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def parse_config(
    document: Any, model: type[ModelT], *, kind: str, source: Path | str = "<config>"
) -> ModelT:
    """Check ``apiVersion``/``kind`` and decode ``spec`` of a loaded YAML document."""
    if not isinstance(document, dict):
        raise ConfigError("expected a mapping at the top level", path=source)
    unknown = sorted(set(document) - {"apiVersion", "kind", "metadata", "spec"}, key=str)
    if unknown:
        raise ConfigError(f"unknown key '{unknown[0]}'", path=source, field=str(unknown[0]))
    if document.get("apiVersion") != API_VERSION:
        raise ConfigError(
            f"apiVersion must be '{API_VERSION}', got {document.get('apiVersion')!r}",
            path=source,
            field="apiVersion",
        )
    if document.get("kind") != kind:
        raise ConfigError(
            f"kind must be '{kind}', got {document.get('kind')!r}", path=source, field="kind"
        )
    try:
        return model.model_validate(document.get("spec") or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = "spec." + _field_path(first["loc"]) if first["loc"] else "spec"
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        message = message.removeprefix("Value error, ")
        raise ConfigError(message, path=source, field=field) from None


def load_config(path: Path | str, model: type[ModelT], *, kind: str) -> ModelT:
    """Read ``path`` and decode it with :func:`parse_config`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=path) from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", path=path) from exc
    return parse_config(document, model, kind=kind, source=path)
