"""One object as the API server has it now, by a direct GET (not an informer's cache):
for checks that must see what was written a moment ago. None when the object is gone;
a :class:`~kubesage.core.errors.DependencyError` naming the object when the API server
cannot say."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import urllib3

from kubesage.core.errors import DependencyError
from kubesage.core.k8s.api_status import api_message
from kubesage.core.k8s.apiclient import ApiException
from kubesage.core.loop.actions import PodRef


def read_pod(core: Any, pod: PodRef, timeout_s: float) -> dict[str, Any] | None:
    """The pod (``core``: a CoreV1Api)."""
    return _read(
        f"pod {pod}",
        lambda: core.read_namespaced_pod(
            pod.name, pod.namespace, _preload_content=False, _request_timeout=timeout_s
        ),
    )


def read_node(core: Any, name: str, timeout_s: float) -> dict[str, Any] | None:
    """The node (``core``: a CoreV1Api)."""
    return _read(
        f"node {name}",
        lambda: core.read_node(name, _preload_content=False, _request_timeout=timeout_s),
    )


def _read(what: str, call: Callable[[], Any]) -> dict[str, Any] | None:
    try:
        document = json.loads(call().data)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise DependencyError(f"reading {what}: HTTP {exc.status}: {api_message(exc)}") from exc
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        raise DependencyError(f"reading {what}: {exc}") from exc
    return document if isinstance(document, dict) else None
