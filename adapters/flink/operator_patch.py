"""Rescaling through the Flink Kubernetes Operator: a FlinkDeployment patch.

The operator applies ``pipeline.jobvertex-parallelism-overrides`` — a comma-separated
``<vertex id>:<parallelism>`` list in ``spec.flinkConfiguration`` — by upgrading the
job (in place when the adaptive scheduler runs it). This module builds that patch from
a decision, checks its shape (vertex ids are 32 hex digits, parallelism a positive
integer, no vertex twice), and applies it as a JSON merge patch with the kubernetes
client's ``CustomObjectsApi`` when a client is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kubesage.core.errors import DependencyError, InputError

OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"
GROUP = "flink.apache.org"
VERSION = "v1beta1"
PLURAL = "flinkdeployments"
MERGE_PATCH = "application/merge-patch+json"
_VERTEX_ID = re.compile(r"^[0-9a-f]{32}$")
_ENTRY = re.compile(r"^([0-9a-f]{32}):([1-9][0-9]*)$")


class OperatorPatchError(InputError):
    """A parallelism override that the Flink operator would reject or misread."""


class OperatorApplyError(DependencyError):
    """The Kubernetes API refused or failed the FlinkDeployment patch."""


def format_overrides(parallelism: Mapping[str, int]) -> str:
    """``{vertex: p}`` → ``"vertex:p,…"`` (sorted, so equal plans give equal patches)."""
    if not parallelism:
        raise OperatorPatchError("no vertices to override")
    for vertex_id, value in parallelism.items():
        if not _VERTEX_ID.match(vertex_id):
            raise OperatorPatchError(
                f"vertex id '{vertex_id}' is not 32 lowercase hex digits (a JobVertexID)"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OperatorPatchError(
                f"parallelism of vertex {vertex_id} must be ≥ 1, got {value!r}"
            )
    return ",".join(f"{vertex_id}:{parallelism[vertex_id]}" for vertex_id in sorted(parallelism))


def parse_overrides(text: str) -> dict[str, int]:
    """The inverse of ``format_overrides``; names the entry that is malformed."""
    result: dict[str, int] = {}
    for index, raw in enumerate(text.split(",")):
        entry = raw.strip()
        match = _ENTRY.match(entry)
        if match is None:
            raise OperatorPatchError(
                f"{OVERRIDES_KEY} entry {index} '{entry}' is not "
                "'<32-hex vertex id>:<parallelism ≥ 1>'"
            )
        if match.group(1) in result:
            raise OperatorPatchError(f"{OVERRIDES_KEY} names vertex {match.group(1)} twice")
        result[match.group(1)] = int(match.group(2))
    return result


def deployment_patch(
    parallelism: Mapping[str, int], *, existing: str | None = None
) -> dict[str, Any]:
    """The merge patch for a FlinkDeployment; ``existing`` overrides are kept unless replaced."""
    merged = parse_overrides(existing) if existing else {}
    merged.update(parallelism)
    return {"spec": {"flinkConfiguration": {OVERRIDES_KEY: format_overrides(merged)}}}


def validate_patch(patch: Mapping[str, Any]) -> dict[str, int]:
    """Checks a patch's shape; the overrides it sets."""
    spec = patch.get("spec")
    if not isinstance(spec, Mapping):
        raise OperatorPatchError("patch has no 'spec' object")
    conf = spec.get("flinkConfiguration")
    if not isinstance(conf, Mapping):
        raise OperatorPatchError("patch has no 'spec.flinkConfiguration' object")
    value = conf.get(OVERRIDES_KEY)
    if not isinstance(value, str):
        raise OperatorPatchError(f"'spec.flinkConfiguration.{OVERRIDES_KEY}' must be a string")
    extra = (
        sorted(set(patch) - {"spec"})
        + [f"spec.{key}" for key in sorted(set(spec) - {"flinkConfiguration"})]
        + [f"spec.flinkConfiguration.{key}" for key in sorted(set(conf) - {OVERRIDES_KEY})]
    )
    if extra:
        raise OperatorPatchError(f"patch touches more than the overrides: {extra}")
    return parse_overrides(value)


def apply_patch(
    custom_objects: Any,
    *,
    namespace: str,
    name: str,
    parallelism: Mapping[str, int],
    existing: str | None = None,
) -> dict[str, Any]:
    """Patches FlinkDeployment ``namespace/name`` through a ``kubernetes.client.CustomObjectsApi``.

    Returns the patched object as the API server returned it.
    """
    from kubesage.core.k8s.apiclient import ApiException

    patch = deployment_patch(parallelism, existing=existing)
    validate_patch(patch)
    try:
        result = custom_objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            patch,
            _content_type=MERGE_PATCH,
        )
    except ApiException as exc:
        raise OperatorApplyError(
            f"patching FlinkDeployment {namespace}/{name} failed: HTTP {exc.status} {exc.reason}"
        ) from exc
    return dict(result) if isinstance(result, Mapping) else {"result": result}
