"""Where the admission webhook gets its SchedulingPolicies: files or the Kubernetes API.

- :class:`FilePolicySource` reads ``*.yaml``/``*.yml`` under a directory (default: the
  shipped ``configs/scheduling-policies``). The first load is strict — a bad policy raises
  :class:`ConfigError` naming the file and field path, so ``kubesage serve`` refuses
  to start on it. Later, when a file changes (a ConfigMap update), a reload that fails
  keeps the last good policies, is logged and counted (``failures``; ``stale``).
- :class:`ApiPolicySource` lists the cluster-scoped custom objects through
  ``CustomObjectsApi``, at most once per ``refresh_s``. An API failure returns the
  last good list (``stale``, counted); before any success it raises
  :class:`PolicySourceError`, which the webhook turns into "allowed, unchanged".
  An object that fails the models is skipped, logged and counted (``invalid``), so one
  bad policy never disables the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from kubesage.core.errors import ConfigError, DependencyError
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
    """Policies listed from the API server, cached for ``refresh_s``, last good on failure."""

    def __init__(
        self,
        api_client: Any,
        *,
        refresh_s: float = 10.0,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # The client's import is slow; only the API path needs it.
        from kubesage.core.k8s.apiclient import CustomObjectsApi

        self._api = CustomObjectsApi(api_client)
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._policies: list[SchedulingPolicy] | None = None
        self._fetched_at = float("-inf")
        self.failures = 0
        """List calls that failed (the last good list was served, or nothing yet)."""
        self.invalid = 0
        """Objects skipped because they do not fit the SchedulingPolicy models."""
        self.stale = False
        """True while the last list call failed and an older list is served."""

    def policies(self) -> list[SchedulingPolicy]:
        with self._lock:
            now = self._clock()
            if self._policies is not None and now - self._fetched_at < self.refresh_s:
                return list(self._policies)
            try:
                listing: Any = self._api.list_cluster_custom_object(
                    GROUP, VERSION, PLURAL, _request_timeout=self.timeout_s
                )
                items = listing["items"]
                if not isinstance(items, list):
                    raise TypeError(f"'items' is a {type(items).__name__}, not a list")
            # ApiException, urllib3's connection errors (not OSErrors) and odd payloads alike:
            # every failure of the dependency degrades to the last good list.
            except Exception as exc:
                # Retry on the next call rather than hammering a failing API server.
                self._fetched_at = now
                self.failures += 1
                metrics.FALLBACKS.labels("policy_source", "api_error").inc()
                self.stale = self._policies is not None
                if self._policies is None:
                    raise PolicySourceError(f"cannot list {RESOURCE_REF}: {exc}") from exc
                log.warning("serving the last good scheduling policies: %s", exc)
                return list(self._policies)
            self._policies = self._decode(items)
            self._fetched_at = now
            self.stale = False
            return list(self._policies)

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
