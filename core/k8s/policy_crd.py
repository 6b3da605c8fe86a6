"""The ``SchedulingPolicy`` CustomResourceDefinition, derived from the policy models.

The models in :mod:`kubesage.core.k8s.scheduling_policy` are the single source of
truth: :func:`crd_manifest` turns their pydantic JSON schema into the CRD's structural
OpenAPI v3 schema, and ``deploy/base`` holds its rendered form (a test fails when the
two drift; regenerate with
``python -m kubesage.core.k8s.policy_crd > deploy/base/crd-schedulingpolicy.yaml``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import yaml

from kubesage.core.k8s.scheduling_policy import (
    GROUP,
    KIND,
    PLURAL,
    SINGULAR,
    VERSION,
    SchedulingPolicySpec,
)

_DROPPED_KEYWORDS = frozenset({"title", "default", "propertyNames", "$defs"})


def _structural(schema: Any, defs: Mapping[str, Any]) -> Any:
    """Pydantic JSON schema → a Kubernetes structural schema (no $ref, anyOf or false maps)."""
    if isinstance(schema, list):
        return [_structural(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        resolved = dict(defs[schema["$ref"].rsplit("/", 1)[-1]])
        resolved.update({k: v for k, v in schema.items() if k != "$ref"})
        return _structural(resolved, defs)
    if "anyOf" in schema:
        options = [option for option in schema["anyOf"] if option.get("type") != "null"]
        if len(options) != 1:
            raise TypeError(f"only Optional unions map to a structural schema: {schema}")
        merged = {**options[0], **{k: v for k, v in schema.items() if k != "anyOf"}}
        return _structural(merged, defs)
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROPPED_KEYWORDS or (key == "additionalProperties" and value is False):
            continue
        if key == "description":
            result[key] = value.replace("``", "`")  # rST literals read badly in kubectl explain
        elif key == "patternProperties":
            # Structural schemas cannot constrain map keys; the loader still checks them.
            (value_schema,) = value.values()
            result["additionalProperties"] = _structural(value_schema, defs)
        elif key == "const":
            result["enum"] = [value]
        elif key == "properties":
            result[key] = {name: _structural(prop, defs) for name, prop in value.items()}
        else:
            result[key] = _structural(value, defs)
    if "properties" in result and "type" not in result:
        result["type"] = "object"
    return result


def openapi_schema() -> dict[str, Any]:
    """The CRD version's ``openAPIV3Schema``, derived from :class:`SchedulingPolicySpec`."""
    raw = SchedulingPolicySpec.model_json_schema(by_alias=True, mode="validation")
    spec = _structural(raw, raw.get("$defs", {}))
    spec["description"] = "What the policy selects and what it injects into selected pods."
    return {
        "type": "object",
        "description": "Scheduling policy the kubesage admission webhook injects into pods.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
        },
    }


def crd_manifest() -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of SchedulingPolicy."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": ["spol"],
                "categories": ["kubesage"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "additionalPrinterColumns": [
                        {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority"},
                        {
                            "name": "Scheduler",
                            "type": "string",
                            "jsonPath": ".spec.inject.schedulerName",
                        },
                        {
                            "name": "Age",
                            "type": "date",
                            "jsonPath": ".metadata.creationTimestamp",
                        },
                    ],
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    """The CRD as the YAML file kept in ``deploy/base``."""
    header = (
        "# Generated from kubesage.core.k8s.policy_crd; do not edit by hand.\n"
        "# Regenerate: python -m kubesage.core.k8s.policy_crd "
        "> deploy/base/crd-schedulingpolicy.yaml\n"
    )
    return header + yaml.safe_dump(crd_manifest(), sort_keys=False, width=100)


if __name__ == "__main__":  # pragma: no cover - a generator entry point
    sys.stdout.write(render_crd_yaml())
