"""The core/v1 Events a scheduler posts about the pods it schedules, and how often.

``Scheduled`` once a pod is bound; ``FailedScheduling`` when it cannot be: a pod that
cannot be read is told once per version of it (:meth:`SchedulingEvents.bad`), one that
waits is told again only when the reason changes or ``every_s`` has passed
(:meth:`SchedulingEvents.warn`), as kube-scheduler does not flood a pod's events.

A waiting pod also gets kube-scheduler's condition ``PodScheduled=False`` with reason
``Unschedulable`` and the message, on its status: the Cluster Autoscaler scales up only
for pods that carry it, and ``kubectl get pod`` shows the reason. A failing Event post
or status patch is logged and counted, never raised: neither is worth a scheduling cycle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3

from kubesage.core.k8s.apiclient import ApiException
from kubesage.core.k8s.schedulable import pod_key, pod_name

log = logging.getLogger(__name__)

Obj = dict[str, Any]

UNSCHEDULABLE = "Unschedulable"
"""The ``PodScheduled`` condition's reason for a pod no node fits (kube-scheduler's)."""
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass
class _Reported:
    """The last ``FailedScheduling`` event posted about one pod."""

    at: float
    message: str


class SchedulingEvents:
    """Posts a scheduler's Events through ``core`` (a ``CoreV1Api``)."""

    def __init__(self, core: Any, component: str, instance: str) -> None:
        self._core = core
        self.component = component
        """The scheduler's name: the events' ``source.component``."""
        self.instance = instance
        self._reported: dict[str, _Reported] = {}
        """Pod key → its last FailedScheduling event (pending pods only)."""
        self._reported_bad: dict[str, str] = {}
        self.failures = 0
        """Event posts and status patches that failed."""

    @property
    def remembered(self) -> int:
        """Pods whose last FailedScheduling event is remembered."""
        return len(self._reported.keys() | self._reported_bad.keys())

    def keep_only(self, keys: Collection[str]) -> None:
        """Forget the pods not in ``keys`` (bound, deleted or assumed since)."""
        for records in (self._reported, self._reported_bad):
            for key in records.keys() - set(keys):
                del records[key]

    def bad(self, pod: Obj, message: str) -> None:
        """A pod that cannot be read: told once per version of it."""
        key = pod_key(pod)
        version = str(pod["metadata"].get("resourceVersion") or "")
        if self._reported_bad.get(key) == version:
            return
        self._reported_bad[key] = version
        log.warning("cannot schedule %s: %s", pod_name(pod), message)
        self.post(pod, "Warning", "FailedScheduling", message)

    def warn(self, pods: Sequence[Obj], message: str, now: float, every_s: float) -> None:
        """A ``FailedScheduling`` event about each pod, unless its last one said the same
        less than ``every_s`` ago."""
        for pod in pods:
            key = pod_key(pod)
            last = self._reported.get(key)
            if last is not None and last.message == message and now - last.at < every_s:
                continue
            log.info("%s: %s", pod_name(pod), message)
            self._reported[key] = _Reported(now, message)
            self.post(pod, "Warning", "FailedScheduling", message)
            self.mark_unschedulable(pod, message)

    def mark_unschedulable(self, pod: Obj, message: str) -> None:
        """Set the pod's ``PodScheduled`` condition to False, reason ``Unschedulable``
        (a strategic merge: the other conditions stay)."""
        metadata = pod.get("metadata") or {}
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": UNSCHEDULABLE,
            "message": message[:1024],
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        try:
            self._core.patch_namespaced_pod_status(
                metadata.get("name"),
                metadata.get("namespace") or "default",
                {"status": {"conditions": [condition]}},
                _content_type=STRATEGIC_MERGE_PATCH,
                _preload_content=False,
                _request_timeout=5,
            ).read()
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            self.failures += 1
            log.warning("marking %s unschedulable failed: %s", pod_name(pod), exc)

    def post(self, pod: Obj, kind: str, reason: str, message: str) -> None:
        """Post a core/v1 Event about ``pod`` (failures are logged and counted only)."""
        metadata = pod.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{metadata.get('name')}.{time.time_ns():x}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": metadata.get("name"),
                "namespace": namespace,
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._core.create_namespaced_event(
                namespace, body, _preload_content=False, _request_timeout=5
            ).read()  # read through: the connection returns to the pool
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            self.failures += 1
            log.warning("posting event %s for %s failed: %s", reason, pod_name(pod), exc)
