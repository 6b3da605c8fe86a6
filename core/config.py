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
from kubesage.core.field_errors import config_error, yaml_error

API_VERSION = "kubesage.io/v1alpha1"


class _StrictYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping (PyYAML itself
    keeps the last one, so a repeated entry would silently replace the first)."""


def _construct_mapping(loader: _StrictYamlLoader, node: yaml.MappingNode) -> Any:
    first_at: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merges may repeat keys
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            line = first_at.get(key)
        except TypeError:  # an unhashable key: PyYAML's own error says so below
            break
        if line is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice (first at line {line})", key_node.start_mark
            )
        first_at[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=True)


_StrictYamlLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


def load_yaml(text: str) -> Any:
    """One YAML document, as ``yaml.safe_load`` reads it but refusing repeated keys
    (a ``yaml.YAMLError`` with the line, like any other YAML error)."""
    return yaml.load(text, Loader=_StrictYamlLoader)


def load_yaml_all(text: str) -> list[Any]:
    """Every document of a YAML stream, read as :func:`load_yaml` reads one."""
    return list(yaml.load_all(text, Loader=_StrictYamlLoader))


ModelT = TypeVar("ModelT", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for configuration models: unknown keys are errors, instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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
        raise config_error(exc, path=source, prefix="spec") from None


def read_config_text(path: Path | str) -> str:
    """The UTF-8 text of a config file; a ConfigError naming the file (and, for bytes
    that are not UTF-8, the line) when it cannot be read."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=path) from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}; save it as UTF-8)",
            path=path,
        ) from None


def load_config(path: Path | str, model: type[ModelT], *, kind: str) -> ModelT:
    """Read ``path`` and decode it with :func:`parse_config`."""
    path = Path(path)
    text = read_config_text(path)
    try:
        document = load_yaml(text)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, path=path) from exc
    return parse_config(document, model, kind=kind, source=path)
