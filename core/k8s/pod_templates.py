"""Pods translated once per template: the extender's pod → PodRequest step, cached.

kube-scheduler sends the extender every pod once, as a new object (a new uid), so a
cache by uid only saves prioritize and bind the work that filter did. Most pods,
though, are copies of a few templates (a Deployment's, a Job's): they differ in
their name, uid and resourceVersion, not in what :func:`~kubesage.core.k8s.translate.pod_request`
reads. :class:`PodTemplates` keeps the translated request of each template seen,
keyed by exactly those inputs — the namespace, the annotations, the whole spec and
``status.qosClass`` — and gives a pod of a known template that request with the
pod's own name: the same :class:`~kubesage.core.types.PodRequest` that
``pod_request`` returns, for about a tenth of its cost (a JSON encoding of the spec
and a dict lookup instead of parsing every quantity).

Only successful translations are kept: a pod that cannot be translated raises from
``pod_request`` as it would uncached (its message names the pod), every time. The
pods are meant to be decoded JSON (as the extender's are): the key is their JSON
encoding, which cannot tell a tuple from a list or a NaN from null.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from kubesage.core.k8s.translate import pod_request
from kubesage.core.types import PodRequest

TEMPLATES_KEPT = 1024
"""Templates whose request is kept (all dropped past that: a simple bound, rarely hit)."""


class PodTemplates:
    """:func:`pod_request` through a cache of templates (see the module docstring)."""

    def __init__(self, size: int = TEMPLATES_KEPT):
        self._requests: dict[bytes, PodRequest] = {}
        self._size = size

    def request(self, pod: Mapping[str, Any]) -> PodRequest:
        """``pod_request(pod)``; raises what it raises."""
        found = _template(pod)
        if found is None:
            return pod_request(pod)
        key, name = found
        template = self._requests.get(key)
        if template is None:
            request = pod_request(pod)
            if len(self._requests) >= self._size:
                self._requests.clear()
            self._requests[key] = request
            return request
        if template.name == name:
            return template
        return template.model_copy(update={"name": name})


def _template(pod: Mapping[str, Any]) -> tuple[bytes, str] | None:
    """``(key, request name)``: the key holds every input of ``pod_request`` except the
    pod's name (and what it ignores: the uid, labels, most of the status). None when
    the pod is not plainly well formed; ``pod_request`` then says what is wrong."""
    metadata = pod.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    name = metadata.get("name")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        return None
    status = pod.get("status")
    qos = status.get("qosClass") if isinstance(status, Mapping) else None
    try:
        key = orjson.dumps([namespace, metadata.get("annotations"), pod.get("spec"), qos])
    except orjson.JSONEncodeError:  # not from JSON (a test's Python object): no cache
        return None
    return key, f"{namespace}/{name}"
