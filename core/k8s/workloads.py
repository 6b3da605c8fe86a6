"""Which workload objects the loop may change, and what a scale means for each.

The loop's ``Scale`` and ``Patch`` actions name an object by ``apiVersion`` and kind.
Only the kinds listed in :data:`PATCHABLE` are changed — the RBAC rules grant
``patch`` on exactly these, so any other kind is refused here, before a request the
API server would answer 403. For a ``Scale``, :func:`scale_patch` turns "N replicas"
into the merge patch of that kind, and refuses what the object does not allow:

- a batch/v1 ``Job``: ``spec.parallelism`` (any N ≥ 0; the Job controller runs at
  most the pods still to complete);
- a kubeflow.org/v1 ``PyTorchJob``: its elastic worker count,
  ``spec.pytorchReplicaSpecs.Worker.replicas``, only when it has an
  ``spec.elasticPolicy`` and within its ``minReplicas`` (default 1) and
  ``maxReplicas`` (default: no upper bound). The patch carries the object's
  ``metadata.resourceVersion``, which the API server treats as a precondition: a
  PyTorchJob changed since it was read (its bounds too) answers 409, not a patch
  outside the new bounds.

Pure functions over JSON objects: the API calls are the live actuators' business.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesage.core.errors import InputError
from kubesage.core.loop.actions import ObjectRef

MERGE_PATCH = "application/merge-patch+json"
"""JSON merge patch (RFC 7386): the one patch type custom resources and built-ins share."""


@dataclass(frozen=True)
class Kind:
    """Where a patchable kind lives in the API."""

    group: str
    version: str
    plural: str

    @property
    def builtin(self) -> bool:
        """Built-in kinds have typed client methods; the others are custom objects."""
        return self.group == "batch"


JOB = Kind("batch", "v1", "jobs")
PYTORCH_JOB = Kind("kubeflow.org", "v1", "pytorchjobs")
FLINK_DEPLOYMENT = Kind("flink.apache.org", "v1beta1", "flinkdeployments")

PATCHABLE: Mapping[tuple[str, str], Kind] = {
    ("batch/v1", "Job"): JOB,
    ("kubeflow.org/v1", "PyTorchJob"): PYTORCH_JOB,
    ("flink.apache.org/v1beta1", "FlinkDeployment"): FLINK_DEPLOYMENT,
}
"""(apiVersion, kind) → where it lives; the kinds the RBAC rules let kubesage patch."""

SCALABLE = frozenset({("batch/v1", "Job"), ("kubeflow.org/v1", "PyTorchJob")})
"""The kinds a ``Scale`` action understands."""


class ChangeRefusedError(InputError):
    """A change the object's own rules do not allow; the actuators report it as a
    REFUSED outcome (it never leaves them)."""


def kind_of(ref: ObjectRef) -> Kind:
    """Where ``ref``'s kind lives; ChangeRefusedError for a kind kubesage may not patch."""
    kind = PATCHABLE.get((ref.api_version, ref.kind))
    if kind is None:
        allowed = ", ".join(f"{kind} ({version})" for version, kind in sorted(PATCHABLE))
        raise ChangeRefusedError(f"{ref}: kubesage patches only {allowed}")
    return kind


def scale_needs_object(ref: ObjectRef) -> bool:
    """Whether :func:`scale_patch` must see the object (its bounds) first."""
    return (ref.api_version, ref.kind) == ("kubeflow.org/v1", "PyTorchJob")


def scale_patch(ref: ObjectRef, replicas: int, current: Mapping[str, Any] | None) -> dict[str, Any]:
    """The merge patch that sets ``ref``'s replicas; ChangeRefusedError if the object forbids it.

    ``current`` is the object as read (needed when :func:`scale_needs_object`).
    """
    if (ref.api_version, ref.kind) not in SCALABLE:
        kinds = ", ".join(f"{kind} ({version})" for version, kind in sorted(SCALABLE))
        raise ChangeRefusedError(f"{ref}: only {kinds} can be scaled")
    if isinstance(replicas, bool) or replicas < 0:
        raise ChangeRefusedError(f"{ref}: replicas must be ≥ 0, got {replicas}")
    if ref.kind == "Job":
        return {"spec": {"parallelism": replicas}}
    if current is None:
        raise ValueError("scaling a PyTorchJob needs the object (scale_needs_object)")
    return _pytorch_job_patch(ref, replicas, current)


def _pytorch_job_patch(ref: ObjectRef, replicas: int, job: Mapping[str, Any]) -> dict[str, Any]:
    spec = job.get("spec") or {}
    elastic = spec.get("elasticPolicy")
    if not isinstance(elastic, Mapping):
        raise ChangeRefusedError(f"{ref} has no spec.elasticPolicy: its worker count is fixed")
    if "Worker" not in (spec.get("pytorchReplicaSpecs") or {}):
        raise ChangeRefusedError(f"{ref} has no Worker replica spec to scale")
    minimum = int(elastic.get("minReplicas") or 1)
    maximum = elastic.get("maxReplicas")
    if replicas < minimum or (maximum is not None and replicas > int(maximum)):
        bounds = f"[{minimum}, {maximum if maximum is not None else '∞'}]"
        raise ChangeRefusedError(
            f"{ref}: {replicas} workers is outside spec.elasticPolicy's bounds {bounds}"
        )
    patch: dict[str, Any] = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": replicas}}}}
    version = (job.get("metadata") or {}).get("resourceVersion")
    if version:
        patch["metadata"] = {"resourceVersion": str(version)}
    return patch
