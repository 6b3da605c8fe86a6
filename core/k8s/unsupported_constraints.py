"""Which required constraints of a pod kubesage's own scheduler cannot honour: the one rule
the secondary scheduler and the admission webhook share.

kubesage places a pod on its resource model and applies kube-scheduler's node filters
(:mod:`kubesage.core.k8s.node_eligibility`). It does not implement the filters that
depend on the other pods of the cluster:

- required inter-pod affinity and anti-affinity
  (``spec.affinity.podAffinity`` / ``podAntiAffinity``
  ``.requiredDuringSchedulingIgnoredDuringExecution``);
- topology spread constraints with ``whenUnsatisfiable: DoNotSchedule`` (any value other
  than ``ScheduleAnyway`` is read as ``DoNotSchedule``, the strict one).

Binding such a pod would break a promise the pod states as a hard rule, so the
secondary scheduler leaves it pending with a ``FailedScheduling`` event naming the
field, and the webhook does not redirect it to kubesage. Preferred terms and
``ScheduleAnyway`` spreads are scoring hints, which a scheduler may ignore: they are.

Volume topology (a PersistentVolumeClaim whose StorageClass binds
``WaitForFirstConsumer``, a PersistentVolume's node affinity) is not checked either:
telling it needs the PVC, PV and StorageClass objects, which kubesage does not cache, and
only kube-scheduler's VolumeBinding writes the ``volume.kubernetes.io/selected-node`` a
WaitForFirstConsumer provisioner waits for. So the webhook does not redirect a pod with
a claimed volume (:func:`claimed_volumes`); a pod that names kubesage itself is bound.
The control loop neither moves nor binds a pod with a claimed volume (no node is
eligible for it there).

The required anti-affinity of the pods already placed is honoured
(:mod:`~kubesage.core.k8s.existing_anti_affinity`): it depends on the incoming pod's
labels, not on constraints of its own.

A pod with ``spec.nodeName`` set, or a kubelet's mirror pod, is never scheduled
(:func:`never_scheduled`): the webhook leaves it as it is, since affinity or a MIG
resource added there would only make the kubelet refuse it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

KUBESAGE_SCHEDULER = "kubesage"
"""The ``schedulerName`` of kubesage's secondary scheduler when not told otherwise (the
Helm chart's ``schedulerName`` and the documented ``--scheduler-name``)."""
REQUIRED_TERMS = "requiredDuringSchedulingIgnoredDuringExecution"
SCHEDULE_ANYWAY = "ScheduleAnyway"


def unsupported_constraints(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields of ``pod`` holding required constraints kubesage cannot honour (empty
    when it can schedule the pod). Never raises: a field of the wrong type is skipped
    (the API server's validation refuses it anyway)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return ()
    found: list[str] = []
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping):
        for kind in ("podAffinity", "podAntiAffinity"):
            terms = affinity.get(kind)
            if isinstance(terms, Mapping) and terms.get(REQUIRED_TERMS):
                found.append(f"spec.affinity.{kind}.{REQUIRED_TERMS}")
    spreads = spec.get("topologySpreadConstraints")
    if isinstance(spreads, Sequence) and not isinstance(spreads, str):
        for index, spread in enumerate(spreads):
            if isinstance(spread, Mapping) and spread.get("whenUnsatisfiable") != SCHEDULE_ANYWAY:
                found.append(
                    f"spec.topologySpreadConstraints[{index}]"
                    f" (whenUnsatisfiable: {spread.get('whenUnsatisfiable') or 'DoNotSchedule'})"
                )
    return tuple(found)


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def claimed_volumes(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The volumes of ``pod`` that a PersistentVolumeClaim backs (``persistentVolumeClaim``
    or ``ephemeral``), as fields with the filter kubesage lacks."""
    spec = pod.get("spec")
    volumes = spec.get("volumes") if isinstance(spec, Mapping) else None
    if not isinstance(volumes, Sequence) or isinstance(volumes, str):
        return ()
    return tuple(
        f"spec.volumes[{index}].{kind} (volume binding)"
        for index, volume in enumerate(volumes)
        if isinstance(volume, Mapping)
        for kind in ("persistentVolumeClaim", "ephemeral")
        if volume.get(kind)
    )


def never_scheduled(pod: Mapping[str, Any]) -> bool:
    """Whether no scheduler places ``pod``: its ``spec.nodeName`` is set, or it is a
    kubelet's mirror of a static pod."""
    spec, metadata = pod.get("spec"), pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return bool(
        (isinstance(spec, Mapping) and spec.get("nodeName"))
        or (isinstance(annotations, Mapping) and MIRROR_ANNOTATION in annotations)
    )


def not_implemented(fields: Sequence[str]) -> str:
    """Why kubesage's scheduler leaves a pod with these ``fields`` alone (a clause)."""
    return f"kubesage does not implement: {', '.join(fields)}"


def scheduler_of(pod: Mapping[str, Any]) -> str | None:
    """The pod's ``spec.schedulerName`` (None when unset or not a string)."""
    spec = pod.get("spec")
    name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) else None


def refused_redirect(
    before: Mapping[str, Any], after: Mapping[str, Any], schedulers: Collection[str]
) -> tuple[str | None, str | None]:
    """For a pod the webhook turned from ``before`` into ``after``: the scheduler (one
    of ``schedulers``, kubesage's) it must not be redirected to, and a warning; either
    is None when there is nothing to refuse or say. A pod that named that scheduler
    itself keeps it, with a warning: it will stay pending."""
    target = scheduler_of(after)
    if target is None or target not in schedulers:
        return None, None
    named_itself = target == scheduler_of(before)
    fields = unsupported_constraints(after) + (() if named_itself else claimed_volumes(after))
    if not fields:
        return None, None
    if named_itself:
        return None, f"schedulerName {target} leaves the pod pending, as {not_implemented(fields)}"
    return target, f"not redirected to {target}, as {not_implemented(fields)}"
