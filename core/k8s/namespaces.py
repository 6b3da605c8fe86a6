"""NamespaceCache: the labels of every namespace, kept by list + watch, for the webhook
and for the ``namespaceSelector`` of running pods' anti-affinity terms.

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
reflector as :mod:`kubesage.core.k8s.informer`
(:class:`~kubesage.core.k8s.watch_stream.ListWatch`): list (remembering the list's
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

import logging
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Unpack

from kubesage.core.errors import InputError
from kubesage.core.k8s.apiclient import ApiClient, CoreV1Api
from kubesage.core.k8s.scheduling_policy import NAMESPACE_NAME_LABEL, name_only_namespace_labels
from kubesage.core.k8s.watch_stream import ReflectedCache, Reflectors, WatchOptions
from kubesage.core.observability import metrics

log = logging.getLogger(__name__)

COMPONENT = "namespace_cache"
"""The ``component`` label of this module's fallbacks."""
DEFAULT_MAX_NAMESPACES = 20_000
"""Namespaces cached at most (Kubernetes' scalability envelope is 10,000 namespaces)."""

Labels = Mapping[str, str]


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


class NamespaceCache(ReflectedCache):
    """Namespace name → labels by list + watch (see the module docstring).

    Call it with a namespace name for its labels (the webhook's ``namespace_labels``, and
    the secondary scheduler's and the loop's). While the API fails it answers with the
    last good labels, which count as known.
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        max_namespaces: int = DEFAULT_MAX_NAMESPACES,
        clock: Callable[[], float] = time.monotonic,
        **options: Unpack[WatchOptions],
    ) -> None:
        """``options``: how the reflector paces its calls (:class:`WatchOptions`)."""
        if max_namespaces < 1:
            raise InputError(f"NamespaceCache: max_namespaces must be ≥ 1, got {max_namespaces}")
        self.max_namespaces = max_namespaces
        self._lock = threading.Condition(threading.Lock())
        self._labels: dict[str, Labels] = {}
        self.overflow = 0
        """Namespaces not cached because ``max_namespaces`` were already held."""
        self.generation = 0
        """Bumped on every change to the cached labels (tests and waiters poll it)."""
        # Any: called with _preload_content=False (raw JSON), which the generated
        # signatures do not describe.
        core: Any = CoreV1Api(api)
        self._reflectors = Reflectors("NamespaceCache", self._lock, clock=clock, options=options)
        self._reflector = self._reflectors.add(
            "namespaces",
            core.list_namespace,
            thread_name="namespace-cache",
            on_list=self._replace,
            on_event=self._apply,
            on_failure=metrics.FALLBACKS.labels(COMPONENT, "api_error").inc,
        )

    # -- lifecycle (start, stop and `with` come from ReflectedCache) ---------------------

    def wait_until_synced(self, timeout_s: float) -> bool:
        """Block until the first list has succeeded (or timeout); return whether it has."""
        return self._reflectors.wait(lambda: self.listed, timeout_s)

    @property
    def listed(self) -> bool:
        """True once a list has succeeded (lookups before it are all "unknown")."""
        return self._reflector.listed

    @property
    def error(self) -> str | None:
        """Why the last list/watch call failed; None once one succeeds again."""
        return self._reflector.error

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

    def _replace(self, items: list[dict[str, Any]]) -> None:
        """A list's namespaces replace the cache, the first ``max_namespaces`` by name
        (called holding the lock)."""
        entries = [entry for item in items if (entry := _labels_of(item))]
        entries.sort(key=lambda entry: entry[0])
        kept = dict(entries[: self.max_namespaces])
        dropped = len(entries) - len(kept)
        if dropped:
            log.warning(
                "%d namespaces over the cache's cap of %d: matched on their names only",
                dropped,
                self.max_namespaces,
            )
        self._labels = kept
        self.overflow = dropped
        self.generation += 1
        self._lock.notify_all()

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Apply one watch event (called holding the lock)."""
        entry = _labels_of(obj)
        if entry is None:
            return
        name, labels = entry
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
