"""NamespaceCache: the labels of every namespace, kept by list + watch, for the webhook.

An AdmissionReview carries only the pod's namespace *name*, but a SchedulingPolicy's
``namespaceSelector`` may test any namespace label (``team: ml``). Looking the
namespace up inside the webhook would put an API round trip in its time budget, so,
as real webhooks do, kubesage keeps a cache of namespace labels and answers from
memory: ``NamespaceCache`` is callable as the webhook's ``namespace_labels``.

Why list + watch and not a periodic relist with a short TTL: a namespace is very often
created immediately before its first pods (``kubectl create namespace`` then ``apply``,
``helm install --create-namespace``), so a relist every N seconds would answer the
first pods of every new namespace with the name-only fallback and miss relabels for up
to N seconds, while costing a full LIST of all namespaces every N seconds per replica.
A watch delivers both within milliseconds for one idle connection. It is the same
reflector as :mod:`kubesage.core.k8s.informer`: list (remembering the list's
``resourceVersion``), watch from it with bookmarks, resume from the last version seen
when a watch ends, relist on ``410 Expired`` and every ``resync_s``, and back off
exponentially on any other failure.

Memory is bounded: only the labels are kept (not the objects), for at most
``max_namespaces`` namespaces; namespaces over the cap are not cached (logged, counted
in :attr:`NamespaceCache.overflow`) and are answered like unknown ones.

Fallbacks, each counted in ``kubesage_fallbacks_total{component="namespace_cache"}``:

- ``api_error``: a list or watch call failed; the cache keeps the last good labels and
  retries with backoff (:attr:`NamespaceCache.stale` is true until a call succeeds);
- ``stale_labels``: a lookup answered from the last good labels while the API fails;
- ``unknown_namespace``: a lookup of a namespace the cache does not hold (not listed
  yet, created while the API was unreachable, or over the cap) gets the one label known
  without the API, ``kubernetes.io/metadata.name``, as the webhook does without a cache.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from kubesage.core.errors import InputError
from kubesage.core.k8s import metrics
from kubesage.core.k8s.scheduling_policy import NAMESPACE_NAME_LABEL
from kubesage.core.k8s.watch_stream import describe, json_lines, shutdown
from kubesage.core.k8s.webhook import name_only_namespace_labels

log = logging.getLogger(__name__)

COMPONENT = "namespace_cache"
"""The ``component`` label of this module's fallbacks."""
DEFAULT_MAX_NAMESPACES = 20_000
"""Namespaces cached at most (Kubernetes' scalability envelope is 10,000 namespaces)."""

Labels = Mapping[str, str]


class _ExpiredError(Exception):
    """The watch's resourceVersion was compacted away (410): relist."""


def _labels_of(namespace: Mapping[str, Any]) -> tuple[str, Labels] | None:
    """(name, read-only labels) of a Namespace object; None when it has no name.

    ``kubernetes.io/metadata.name`` is added when missing (API servers before 1.21 do
    not set it), so a cached namespace always matches what the name-only fallback would.
    """
    metadata = namespace.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        return None
    name: str = metadata["name"]
    raw = metadata.get("labels")
    labels = (
        {str(k): str(v) for k, v in raw.items() if isinstance(v, str)}
        if isinstance(raw, dict)
        else {}
    )
    labels.setdefault(NAMESPACE_NAME_LABEL, name)
    return name, MappingProxyType(labels)


class NamespaceCache:
    """Namespace name → labels by list + watch (see the module docstring).

    Call it with a namespace name for its labels (the webhook's ``namespace_labels``).
    """

    def __init__(
        self,
        api: k8s_client.ApiClient,
        *,
        resync_s: float = 300.0,
        watch_timeout_s: float = 300.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        request_timeout_s: float = 30.0,
        max_namespaces: int = DEFAULT_MAX_NAMESPACES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if resync_s <= 0 or watch_timeout_s <= 0:
            raise InputError("NamespaceCache: resync_s and watch_timeout_s must be positive")
        if max_namespaces < 1:
            raise InputError(f"NamespaceCache: max_namespaces must be ≥ 1, got {max_namespaces}")
        # Any: called with _preload_content=False (raw JSON), which the generated
        # signatures do not describe.
        self._core: Any = k8s_client.CoreV1Api(api)
        self.resync_s = resync_s
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.request_timeout_s = request_timeout_s
        self.max_namespaces = max_namespaces
        self._clock = clock
        self._lock = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self._labels: dict[str, Labels] = {}
        self._version: str | None = None
        self.listed = False
        """True once a list has succeeded (lookups before it are all "unknown")."""
        self.error: str | None = None
        """Why the last list/watch call failed; None once one succeeds again."""
        self.failures = 0
        """List/watch calls that failed (each counted as an ``api_error`` fallback)."""
        self.relists = 0
        """Full lists done (initial, after 410, resync)."""
        self.overflow = 0
        """Namespaces not cached because ``max_namespaces`` were already held."""
        self.generation = 0
        """Bumped on every change to the cached labels (tests and waiters poll it)."""

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the list + watch thread (returns at once; see :meth:`wait_until_synced`)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="namespace-cache", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and close its watch connection."""
        self._stop.set()
        shutdown(self._response)
        with self._lock:
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> NamespaceCache:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_until_synced(self, timeout_s: float) -> bool:
        """Block until the first list has succeeded (or timeout); return whether it has."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not self.listed and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            return self.listed

    # -- reads -----------------------------------------------------------------------------

    @property
    def stale(self) -> bool:
        """True while list/watch is failing and the labels may be out of date."""
        return self.error is not None

    def __len__(self) -> int:
        with self._lock:
            return len(self._labels)

    def get(self, namespace: str) -> Labels | None:
        """The cached labels of ``namespace``, or None when the cache does not hold it."""
        with self._lock:
            return self._labels.get(namespace)

    def __call__(self, namespace: str) -> Labels:
        """The labels of ``namespace`` for selector matching; never raises, never blocks
        on the API (unknown namespaces get the name-only fallback, counted)."""
        labels = self.get(namespace)
        if labels is None:
            metrics.FALLBACKS.labels(COMPONENT, "unknown_namespace").inc()
            log.debug("namespace %r not in the cache: matching on its name only", namespace)
            return name_only_namespace_labels(namespace)
        if self.error is not None:
            metrics.FALLBACKS.labels(COMPONENT, "stale_labels").inc()
        return labels

    # -- reflector ---------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = self.backoff_s
        resync_at = 0.0
        while not self._stop.is_set():
            try:
                if self._version is None or self._clock() >= resync_at:
                    self._relist()
                    resync_at = self._clock() + self.resync_s
                self._watch(resync_at)
                backoff = self.backoff_s
            except _ExpiredError:
                log.info("namespace watch: resourceVersion expired; relisting")
                self._version = None
            except Exception as exc:  # the cache never dies: log, count, keep the labels
                if self._stop.is_set():
                    break
                if not isinstance(exc, ApiException | urllib3.exceptions.HTTPError | OSError):
                    log.exception("namespace list/watch: unexpected error")
                with self._lock:
                    self.failures += 1
                    self.error = describe(exc)
                metrics.FALLBACKS.labels(COMPONENT, "api_error").inc()
                log.warning(
                    "namespace list/watch failed (%s); keeping %d namespaces' last labels, "
                    "retrying in %.1fs",
                    self.error,
                    len(self),
                    backoff,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
            finally:
                self._response = None

    def _relist(self) -> None:
        response = self._core.list_namespace(
            _preload_content=False, _request_timeout=self.request_timeout_s
        )
        body = json.loads(response.data)
        entries = [entry for item in body.get("items") or [] if (entry := _labels_of(item))]
        entries.sort(key=lambda entry: entry[0])
        kept = dict(entries[: self.max_namespaces])
        dropped = len(entries) - len(kept)
        if dropped:
            log.warning(
                "%d namespaces over the cache's cap of %d: matched on their names only",
                dropped,
                self.max_namespaces,
            )
        with self._lock:
            self._labels = kept
            self.overflow = dropped
            self.listed = True
            self.error = None
            self._version = str((body.get("metadata") or {}).get("resourceVersion") or "")
            self.relists += 1
            self.generation += 1
            self._lock.notify_all()

    def _watch(self, resync_at: float) -> None:
        """Watch from the last version seen until the server ends the stream."""
        timeout_s = max(1, int(min(self.watch_timeout_s, resync_at - self._clock())))
        response = self._core.list_namespace(
            watch=True,
            resource_version=self._version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_s,
            _preload_content=False,
            _request_timeout=(self.request_timeout_s, timeout_s + self.request_timeout_s),
        )
        self._response = response
        with self._lock:
            self.error = None  # connected again: the watch resumes where it broke
        if self._stop.is_set():
            shutdown(response)
            return
        try:
            for line in json_lines(response):
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _ExpiredError()
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(kind, obj)
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if version:
                    self._version = str(version)
        except ApiException as exc:
            if exc.status == 410:
                raise _ExpiredError() from exc
            raise
        finally:
            response.release_conn()

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        entry = _labels_of(obj)
        if entry is None:
            return
        name, labels = entry
        with self._lock:
            if kind == "DELETED":
                self._labels.pop(name, None)
            elif name in self._labels or len(self._labels) < self.max_namespaces:
                self._labels[name] = labels
            else:
                self.overflow += 1
                log.warning(
                    "namespace %s not cached: the cap of %d is reached", name, self.max_namespaces
                )
                return
            self.generation += 1
            self._lock.notify_all()
