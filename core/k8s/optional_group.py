"""List + watch of an API group the cluster may not serve (``resource.k8s.io/v1``).

A reflector (:class:`~kubesage.core.k8s.watch_stream.ListWatch`) retries a failing list
forever and is not ready until a list succeeds; a cluster without Dynamic Resource
Allocation answers 404 to every ResourceSlice list. :class:`OptionalListCall` wraps the
list call so that a 404 is an empty list (logged once: the caller falls back, e.g. to
the extended resources ``nvidia.com/gpu``), as is a 403 (the service account may not
read the group: a warning naming the missing grant, rather than a scheduler that never
becomes ready), and the watch that follows is an idle stream
that ends when the server's would have (``timeout_seconds``) or when the reflector
stops. Each resync lists again, so a group installed later is picked up within
``resync_s``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kubesage.core.k8s.apiclient import ApiException

log = logging.getLogger(__name__)


class _EmptyList:
    """What a list of a resource the server does not serve reads as."""

    data = b'{"items": [], "metadata": {"resourceVersion": ""}}'


class _IdleWatch:
    """A watch stream with no events: it ends after ``timeout_s`` or on shutdown."""

    def __init__(self, timeout_s: float):
        self._timeout_s = timeout_s
        self._closed = threading.Event()

    def stream(self, amt: object = None, decode_content: bool = True) -> Iterator[bytes]:
        self._closed.wait(self._timeout_s)
        yield from ()

    def shutdown(self) -> None:
        self._closed.set()

    def close(self) -> None:
        self._closed.set()

    def release_conn(self) -> None:
        return None


class OptionalListCall:
    """``list_call`` of a resource in ``group_version``, with 404 read as "not served"."""

    def __init__(self, list_call: Callable[..., Any], group_version: str, fallback: str):
        """``fallback``: what the caller does instead, for the one log line."""
        self._list_call = list_call
        self.group_version = group_version
        self.fallback = fallback
        self.served: bool | None = None
        """True once a list succeeded, False after a 404, None before the first list."""
        self._logged = False

    def __call__(self, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            if self.served is False:
                return _IdleWatch(float(kwargs.get("timeout_seconds") or 60))
            return self._list_call(**kwargs)
        try:
            response = self._list_call(**kwargs)
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
            if not self._logged and exc.status == 404:
                log.info("the cluster does not serve %s: %s", self.group_version, self.fallback)
            elif not self._logged:
                log.warning(
                    "not allowed to list and watch %s (grant them to the service account): %s",
                    self.group_version,
                    self.fallback,
                )
            self._logged = True
            self.served = False
            return _EmptyList()
        if self.served is False:
            log.info("the cluster serves %s now", self.group_version)
            self._logged = False
        self.served = True
        return response
