"""Where the admission webhook gets its SchedulingPolicies: files or the Kubernetes API.

- :class:`FilePolicySource` reads ``*.yaml``/``*.yml`` under a directory (default: the
  shipped ``configs/scheduling-policies``). The first load is strict — a bad policy raises
  :class:`ConfigError` naming the file and field path, so ``kubesage serve`` refuses
  to start on it. Later, when a file changes (a ConfigMap update), a reload that fails
  keeps the last good policies, is logged and counted (``failures``; ``stale``).
- :class:`ApiPolicySource` lists the cluster-scoped custom objects through
  ``CustomObjectsApi`` once when built, then on a background thread every ``refresh_s``
  (a periodic list, not a watch: the RBAC grants ``list`` only, and policies change
  rarely). The webhook's request path only reads the last good list from memory, so a
  slow or failing API server never spends the webhook's time budget. A failed list
  keeps the last good list (``stale``, ``age_s``), is logged and counted
  (``failures``; ``kubesage_fallbacks_total{component="policy_source",
  reason="api_error"}``) and retried after an exponential backoff; before any success
  :meth:`~ApiPolicySource.policies` raises :class:`PolicySourceError`, which the
  webhook turns into "allowed, unchanged". An object that fails the models is skipped,
  logged and counted (``invalid``), so one bad policy never disables the others.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

from kubesage.core.errors import ConfigError, DependencyError, InputError
from kubesage.core.k8s.scheduling_policy import (
    GROUP,
    PLURAL,
    VERSION,
    SchedulingPolicy,
    load_policy_file,
    parse_policy,
)
from kubesage.core.observability import metrics
from kubesage.core.paths import shipped_dir

log = logging.getLogger(__name__)

POLICY_SUFFIXES = (".yaml", ".yml")
RESOURCE_REF = f"{PLURAL}.{GROUP}"


Versions = tuple[tuple[str, str], ...]
"""(name, resourceVersion) of each listed object: a list equal to the last is not decoded."""


class PolicySourceError(DependencyError):
    """No policies could be read and there is no earlier good list to fall back to."""


@runtime_checkable
class PolicySource(Protocol):
    """Anything that yields the current SchedulingPolicies."""

    def policies(self) -> list[SchedulingPolicy]: ...


def default_policy_dir() -> Path:
    """The shipped example policies (``configs/scheduling-policies``, installed with the
    package)."""
    return shipped_dir("scheduling-policies")


def load_policy_dir(directory: Path) -> list[SchedulingPolicy]:
    """Every policy under ``directory`` (sorted by file name); duplicate names are errors."""
    if not directory.is_dir():
        raise ConfigError("policy directory does not exist", path=directory)
    policies: list[SchedulingPolicy] = []
    seen: dict[str, Path] = {}
    for path in _policy_files(directory):
        for policy in load_policy_file(path):
            if policy.name in seen:
                raise ConfigError(
                    f"policy '{policy.name}' is also defined in {seen[policy.name]}",
                    path=path,
                    field="metadata.name",
                )
            seen[policy.name] = path
            policies.append(policy)
    return policies


def _policy_files(directory: Path) -> list[Path]:
    # Kubernetes mounts ConfigMap keys through "..data" symlinks; hidden entries are skipped.
    return sorted(
        path
        for path in directory.iterdir()
        if path.suffix in POLICY_SUFFIXES and not path.name.startswith(".") and path.is_file()
    )


class FilePolicySource:
    """Policies from YAML files, reloaded when a file is added, removed or modified."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_policy_dir()
        self.failures = 0
        """Reloads that failed and kept the previous policies."""
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._signature = self._current_signature()
        self._policies = load_policy_dir(self.directory)

    @property
    def stale(self) -> bool:
        """True while the files on disk are invalid and older policies are served."""
        return self.last_error is not None

    def _current_signature(self) -> tuple[tuple[str, int, int], ...]:
        try:
            files = _policy_files(self.directory)
            return tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)
        except OSError:
            return ()

    def policies(self) -> list[SchedulingPolicy]:
        with self._lock:
            signature = self._current_signature()
            if signature != self._signature:
                self._signature = signature
                try:
                    self._policies = load_policy_dir(self.directory)
                    self.last_error = None
                except ConfigError as exc:
                    self.failures += 1
                    self.last_error = str(exc)
                    metrics.FALLBACKS.labels("policy_source", "invalid_file").inc()
                    log.warning("keeping the previous scheduling policies: %s", exc)
            return list(self._policies)


class ApiPolicySource:
    """Policies listed from the API server by a background thread; reads never call it.

    The constructor lists once (at startup, not on any request path) so the source is
    usable at once; :meth:`start` runs the refresher thread that lists again every
    ``refresh_s`` and, after a failure, retries after ``backoff_s`` doubling up to
    ``max_backoff_s`` (default ``refresh_s``). :meth:`policies` only reads the last good
    list. A :meth:`policies` call on a source nobody started starts the refresher (a
    source handed to the webhook always keeps itself fresh); :meth:`stop` ends it.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        refresh_s: float = 10.0,
        timeout_s: float = 5.0,
        backoff_s: float = 0.5,
        max_backoff_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        max_backoff = refresh_s if max_backoff_s is None else max_backoff_s
        if min(refresh_s, timeout_s, backoff_s, max_backoff) <= 0:
            raise InputError(
                "ApiPolicySource: refresh_s, timeout_s, backoff_s and max_backoff_s "
                "must be positive"
            )
        # The client's import is slow; only the API path needs it.
        from kubesage.core.k8s.apiclient import CustomObjectsApi

        self._api = CustomObjectsApi(api_client)
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        """Client-side timeout of one list call."""
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff
        self._clock = clock
        self._lock = threading.Condition(threading.Lock())
        """Guards the snapshot and the counters; never held during an API call."""
        self._listing = threading.Lock()
        """Serializes list calls (the refresher's and :meth:`refresh`'s)."""
        self._policies: tuple[SchedulingPolicy, ...] | None = None
        self._versions: Versions | None = None
        """Name and resourceVersion of each object of the last list decoded."""
        self._listed_at = float("-inf")
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._stopped = False
        self.failures = 0
        """List calls that failed (the last good list was kept, or nothing yet)."""
        self.invalid = 0
        """Objects skipped because they do not fit the SchedulingPolicy models."""
        self.lists = 0
        """List calls that succeeded."""
        self.error: str | None = None
        """Why the last list call failed; None once one succeeds."""
        self.refresh()

    # -- reads (the webhook's request path: memory only) -----------------------------------

    def policies(self) -> list[SchedulingPolicy]:
        """The last good list; :class:`PolicySourceError` while none has succeeded yet.
        Never calls the API and never waits for it."""
        if self._thread is None and not self._stopped:
            self.start()
        with self._lock:
            if self._policies is None:
                why = f": {self.error}" if self.error else ": not listed yet"
                raise PolicySourceError(f"cannot list {RESOURCE_REF}{why}")
            return list(self._policies)

    @property
    def listed(self) -> bool:
        """True once a list has succeeded."""
        return self._policies is not None

    @property
    def stale(self) -> bool:
        """True while the last list call failed and an older list is served."""
        with self._lock:
            return self._policies is not None and self.error is not None

    @property
    def age_s(self) -> float:
        """Seconds since the served list was read from the API (inf before the first)."""
        with self._lock:
            return self._clock() - self._listed_at

    # -- the refresher ---------------------------------------------------------------------

    def refresh(self) -> bool:
        """List the policies now and keep them; on failure keep the last good list, log
        and count it (``kubesage_fallbacks_total{component="policy_source",
        reason="api_error"}``). Returns whether the list succeeded; never raises."""
        with self._listing:
            try:
                listing: Any = self._api.list_cluster_custom_object(
                    GROUP, VERSION, PLURAL, _request_timeout=self.timeout_s
                )
                items = listing["items"]
                if not isinstance(items, list):
                    raise TypeError(f"'items' is a {type(items).__name__}, not a list")
                versions = _versions(items)
                policies = self._policies
                if policies is None or versions is None or versions != self._versions:
                    # Decoded (invalid objects logged and counted) only when they change.
                    policies = tuple(self._decode(items))
                    self._versions = versions
            # ApiException, urllib3's connection errors (not OSErrors) and odd payloads
            # alike: every failure of the dependency keeps the last good list.
            except Exception as exc:
                self._failed(exc)
                return False
            with self._lock:
                self._policies = policies
                self._listed_at = self._clock()
                self.error = None
                self.lists += 1
                self._lock.notify_all()
            return True

    def _failed(self, exc: Exception) -> None:
        import urllib3

        from kubesage.core.k8s.apiclient import ApiException
        from kubesage.core.k8s.watch_stream import describe

        error = describe(exc)
        # As the reflectors do: a traceback only for what is not an API or network error.
        expected = isinstance(exc, ApiException | urllib3.exceptions.HTTPError | OSError)
        with self._lock:
            self.failures += 1
            self.error = error
            kept = self._policies is not None
        metrics.FALLBACKS.labels("policy_source", "api_error").inc()
        log.warning(
            "cannot list %s (%s); %s",
            RESOURCE_REF,
            error,
            "keeping the last good scheduling policies" if kept else "no policies yet",
            exc_info=not expected,
        )

    def start(self) -> None:
        """Run the refresher on a daemon thread (no-op while one runs)."""
        with self._lock:
            if self._thread is not None:
                return
            self._stopped = False
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=_refresh_until_stopped,
                args=(weakref.ref(self), self._stop),
                name="policy-source",
                daemon=True,
            )
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the refresher (a list in flight ends within ``timeout_s``); the last
        good list is still served, no longer refreshed."""
        with self._lock:
            thread, self._thread, self._stopped = self._thread, None, True
            self._stop.set()
            self._lock.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def wait_until_synced(self, timeout_s: float) -> bool:
        """Block until a list has succeeded (or timeout); return whether one has."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._policies is None and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            return self._policies is not None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _decode(self, items: list[Any]) -> list[SchedulingPolicy]:
        policies = []
        for item in items:
            metadata = item.get("metadata") if isinstance(item, dict) else None
            if not isinstance(item, dict) or not isinstance(metadata, dict):
                self.invalid += 1
                metrics.ERRORS.labels("policy_source", "invalid_policy").inc()
                log.warning("skipping a %s list item without metadata", RESOURCE_REF)
                continue
            name = metadata.get("name", "?")
            document = {
                "apiVersion": item.get("apiVersion"),
                "kind": item.get("kind"),
                # Server-set fields (uid, resourceVersion, managedFields...) are not policy.
                "metadata": {
                    key: metadata[key]
                    for key in ("name", "labels", "annotations")
                    if key in metadata
                },
                "spec": item.get("spec"),
            }
            try:
                policies.append(parse_policy(document, source=f"{RESOURCE_REF}/{name}"))
            except ConfigError as exc:
                self.invalid += 1
                metrics.ERRORS.labels("policy_source", "invalid_policy").inc()
                log.warning("skipping an invalid scheduling policy: %s", exc)
        return policies


def _refresh_until_stopped(ref: weakref.ref[ApiPolicySource], stop: threading.Event) -> None:
    """The refresher thread: list every ``refresh_s``, back off after a failure.

    It holds its source only weakly, so the thread of a source nobody references any
    more (one a test built and dropped) ends at its next wake-up instead of listing on.
    """
    source = ref()
    if source is None:
        return
    backoff = source.backoff_s
    delay = source.refresh_s if source.listed else 0.0
    del source
    while not stop.wait(delay):
        source = ref()
        if source is None:
            return
        if source.refresh():
            delay, backoff = source.refresh_s, source.backoff_s
        else:
            delay, backoff = backoff, min(backoff * 2, source.max_backoff_s)
        del source


def _versions(items: list[Any]) -> Versions | None:
    """(name, resourceVersion) of every object; None when one lacks either (decode)."""
    versions = []
    for item in items:
        metadata = item.get("metadata") if isinstance(item, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if not isinstance(name, str) or not isinstance(version, str):
            return None
        versions.append((name, version))
    return tuple(versions)
