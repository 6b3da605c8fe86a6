"""Field and label selectors as the API server reads them (equality-based only)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.fakes.apiserver.resources import SELECTABLE_FIELDS, ApiError, Obj, Resource


def _field(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Selector:
    """Field and label selectors as the API server reads them (equality-based only)."""

    fields: tuple[tuple[str, str, str], ...] = ()  # (path, op, value)
    labels: tuple[tuple[str, str, str | None], ...] = ()

    @staticmethod
    def parse(field_selector: str | None, label_selector: str | None) -> Selector:
        fields = []
        for term in filter(None, (field_selector or "").split(",")):
            match = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(!=|==|=)\s*(.*)", term.strip())
            if match is None:
                raise ApiError(400, f'invalid field selector: "{term}"')
            path, op, value = match.groups()
            fields.append((path, "!=" if op == "!=" else "=", value))
        labels: list[tuple[str, str, str | None]] = []
        for term in filter(None, (label_selector or "").split(",")):
            match = re.fullmatch(r"([A-Za-z0-9_./-]+)\s*(?:(!=|==|=)\s*(.*))?", term.strip())
            if match is None:
                raise ApiError(400, f'invalid label selector: "{term}"')
            key, op, value = match.groups()
            labels.append((key, "exists" if op is None else ("!=" if op == "!=" else "="), value))
        return Selector(tuple(fields), tuple(labels))

    def check_fields(self, resource: Resource) -> None:
        """400 for a field the real API server cannot select on, as it answers."""
        allowed = ("metadata.name", "metadata.namespace", *SELECTABLE_FIELDS.get(resource, ()))
        for path, _, _ in self.fields:
            if path not in allowed:
                quoted = ", ".join(f'"{name}"' for name in allowed)
                raise ApiError(
                    400,
                    f'Unable to find "{resource.qualified}" that match field selector '
                    f'"{path}": "{path}" is not a known field selector: only {quoted}',
                )

    def matches(self, obj: Obj) -> bool:
        for path, op, value in self.fields:
            if (_field(obj, path) == value) != (op == "="):
                return False
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for key, op, label_value in self.labels:
            if op == "exists" and key not in labels:
                return False
            if op == "=" and labels.get(key) != label_value:
                return False
            if op == "!=" and labels.get(key) == label_value:
                return False
        return True
