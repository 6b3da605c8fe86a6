"""Bind a pod to a node through the Binding subresource, exactly once.

``POST /api/v1/namespaces/{ns}/pods/{name}/binding`` is what kube-scheduler does.
The Binding carries the pod's UID as a precondition (a pod deleted and re-created
under the same name is not bound by mistake) and kubesage's GPU choice as annotations,
which the API server copies onto the pod, so that every replica's
:class:`~kubesage.core.k8s.informer.ClusterSync` accounts the same GPUs.

Failures and what happens next:

- 5xx, 429 and connection errors are retried (tenacity, exponential backoff with
  full jitter). A 429 waits at least what the API server asks (its ``Retry-After``
  header, else the Status' ``details.retryAfterSeconds``), at most
  ``max_retry_after_s`` (client-go also honours it on a 5xx; kubesage only on a
  429). A retry after a lost response may find
  the pod already bound.
- 409 Conflict: the pod is read back. Bound to the same node: the bind is done (it
  was ours). Bound to another node: :class:`BindConflictError`, never retried. Being
  deleted: :class:`PodGoneError` at once. Held by scheduling gates (the API server
  binds no gated pod): :class:`PodGatedError` at once. Otherwise (a conflict on
  something else): retried.
- 404: the pod is gone, :class:`PodGoneError`.
- Anything else, or retries exhausted: :class:`BindError`.

A pod this Binder has bound is never posted again (a small memory of recent UIDs).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import urllib3
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_never,
    stop_when_event_set,
    wait_random_exponential,
)

from kubesage.core.annotations import GPU_INDICES_ANNOTATION, MIG_START_ANNOTATION
from kubesage.core.errors import DependencyError, InputError
from kubesage.core.k8s.api_status import api_message, retry_after_s
from kubesage.core.k8s.apiclient import (
    ApiClient,
    ApiException,
    CoreV1Api,
    V1Binding,
    V1ObjectMeta,
    V1ObjectReference,
)
from kubesage.core.k8s.schedulable import bound_node, is_terminating, scheduling_gates
from kubesage.core.types import Placement

log = logging.getLogger(__name__)

_REMEMBERED_BINDS = 65_536
"""How many bound UIDs the Binder remembers (oldest forgotten first)."""


class BindError(DependencyError):
    """A bind that did not happen; the pod stays pending and is retried later."""


class BindConflictError(BindError):
    """The pod is already bound to another node (someone else scheduled it)."""

    def __init__(self, message: str, *, bound_node: str):
        super().__init__(message)
        self.bound_node = bound_node


class PodGoneError(BindError):
    """The pod no longer exists, is being deleted, or was re-created with another UID."""


class PodGatedError(BindError):
    """The pod still has scheduling gates: the API server binds it only once they are
    removed."""


class _RetryableError(Exception):
    """A transient failure tenacity retries; carries the cause for the final error and
    how long the API server asked to wait before the next attempt (429), if it did."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def placement_annotations(placement: Placement) -> dict[str, str]:
    """The annotations that record ``placement``'s GPUs on the pod (empty without GPUs)."""
    annotations: dict[str, str] = {}
    if placement.gpu_milli_by_index:
        annotations[GPU_INDICES_ANNOTATION] = ",".join(str(g) for g in placement.gpu_indices)
    if placement.mig_start is not None:
        annotations[MIG_START_ANNOTATION] = str(placement.mig_start)
    return annotations


def parse_gpu_indices(annotations: dict[str, str]) -> tuple[tuple[int, ...], int | None] | None:
    """``(gpu indices, mig start)`` from a pod's annotations; None if absent or malformed."""
    text = annotations.get(GPU_INDICES_ANNOTATION)
    if not text:
        return None
    try:
        indices = tuple(int(part) for part in text.split(","))
        start_text = annotations.get(MIG_START_ANNOTATION)
        mig_start = int(start_text) if start_text is not None else None
    except ValueError:
        return None
    return indices, mig_start


def _waiting_on(stop: threading.Event) -> Callable[[float], None]:
    """A sleep that ends early once ``stop`` is set."""

    def sleep(seconds: float) -> None:
        stop.wait(seconds)

    return sleep


class Binder:
    """Binds pods through the Binding subresource (see the module docstring)."""

    def __init__(
        self,
        api: ApiClient,
        *,
        attempts: int = 5,
        backoff_s: float = 0.2,
        max_backoff_s: float = 5.0,
        max_retry_after_s: float = 10.0,
        request_timeout_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if attempts < 1:
            raise InputError(f"Binder attempts must be at least 1, got {attempts}")
        if max_retry_after_s < 0:
            raise InputError(f"Binder max_retry_after_s must be >= 0, got {max_retry_after_s}")
        # Any: called with _preload_content=False (raw JSON), which the generated
        # signatures do not describe.
        self._core: Any = CoreV1Api(api)
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_retry_after_s = max_retry_after_s
        """The longest a 429's ``Retry-After`` makes one wait between attempts."""
        self.request_timeout_s = request_timeout_s
        self._sleep = sleep
        # full jitter: uniform in [0, min(backoff_s * 2**n, max_backoff_s)]
        self._backoff = wait_random_exponential(multiplier=backoff_s, max=max_backoff_s)
        self._bound: OrderedDict[str, str] = OrderedDict()
        self.posts = 0
        """Binding POSTs sent (a counter, for metrics and tests)."""
        self.retries = 0
        """Attempts that failed transiently and were retried."""

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        annotations: dict[str, str] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        """Bind pod ``namespace/name`` (with ``uid``) to ``node``; raise BindError if not.
        Once ``stop`` is set (this replica lost its Lease) no further attempt is made and
        a wait between attempts ends at once: only a request already sent completes."""
        where = f"pod {namespace}/{name}"
        done = self._bound.get(uid) if uid else None
        if done is not None:
            if done == node:
                return
            raise BindConflictError(f"{where} was bound to {done} already", bound_node=done)
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts)
            | (stop_never if stop is None else stop_when_event_set(stop)),
            wait=self._wait,
            retry=retry_if_exception_type(_RetryableError),
            before_sleep=self._before_sleep(where),
            sleep=self._sleep if stop is None else _waiting_on(stop),
            reraise=True,
        )
        tries = 0
        try:
            for attempt in retrying:
                with attempt:
                    if stop is not None and stop.is_set() and tries:
                        raise BindError(f"binding {where} to {node}: stopped before a retry")
                    tries += 1
                    self._attempt(namespace, name, uid, node, annotations or {}, where)
        except _RetryableError as exc:
            stopped = "; stopped" if stop is not None and stop.is_set() else ""
            raise BindError(
                f"binding {where} to {node} failed after {tries} "
                f"attempt{'' if tries == 1 else 's'}{stopped}: {exc}"
            ) from exc
        if uid:
            self._bound[uid] = node
            while len(self._bound) > _REMEMBERED_BINDS:
                self._bound.popitem(last=False)

    def _wait(self, state: RetryCallState) -> float:
        """The jittered backoff, or longer when the API server asked (429), capped."""
        backoff = float(self._backoff(state))
        asked = _asked_wait_s(state)
        return backoff if asked is None else max(backoff, min(asked, self.max_retry_after_s))

    def _before_sleep(self, where: str) -> Any:
        def log_retry(state: RetryCallState) -> None:
            self.retries += 1
            error = state.outcome.exception() if state.outcome else None
            wait_s = state.upcoming_sleep
            asked = _asked_wait_s(state)
            why = ""
            if asked is not None:
                capped = asked > self.max_retry_after_s
                why = f", the API server asked for {asked:g}s (Retry-After)" + (
                    f", capped at {self.max_retry_after_s:g}s" if capped else ""
                )
            log.warning(
                "binding %s: attempt %d failed (%s); retrying in %.2fs%s",
                where,
                state.attempt_number,
                error,
                wait_s,
                why,
            )

        return log_retry

    def _attempt(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: dict[str, str],
        where: str,
    ) -> None:
        body = V1Binding(
            metadata=V1ObjectMeta(
                name=name, namespace=namespace, uid=uid or None, annotations=annotations or None
            ),
            target=V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            self.posts += 1
            # The API answers a Status, not a Binding: read it raw (the generated
            # client would fail to deserialise it as a V1Binding).
            self._core.create_namespaced_pod_binding(
                name,
                namespace,
                body,
                _preload_content=False,
                _request_timeout=self.request_timeout_s,
            ).read()  # read the Status through: the connection returns to the pool
        except ApiException as exc:
            self._on_api_error(exc, namespace, name, uid, node, where)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _RetryableError(f"API server unreachable: {exc}") from exc

    def _on_api_error(
        self, exc: ApiException, namespace: str, name: str, uid: str, node: str, where: str
    ) -> None:
        message = api_message(exc)
        if exc.status == 404:
            raise PodGoneError(f"{where} not found: {message}") from exc
        if exc.status == 409:
            pod = self._read_back(namespace, name, uid, where)
            bound = bound_node(pod)
            if bound == node:
                log.info("%s is already bound to %s: counted as done", where, node)
                return
            if bound:
                raise BindConflictError(
                    f"{where} is bound to {bound}, not {node}: {message}", bound_node=bound
                ) from exc
            if is_terminating(pod):
                raise PodGoneError(f"{where} is being deleted: {message}") from exc
            gates = scheduling_gates(pod)
            if gates:
                raise PodGatedError(
                    f"{where} is held by scheduling gates {', '.join(gates)}: {message}"
                ) from exc
            raise _RetryableError(f"conflict: {message}") from exc
        if exc.status == 429:
            raise _RetryableError(f"HTTP 429: {message}", retry_after_s=retry_after_s(exc)) from exc
        if (exc.status or 0) >= 500:
            raise _RetryableError(f"HTTP {exc.status}: {message}") from exc
        raise BindError(
            f"binding {where} to {node} was refused (HTTP {exc.status}): {message}"
        ) from exc

    def _read_back(self, namespace: str, name: str, uid: str, where: str) -> dict[str, Any]:
        """The pod as it is now; PodGoneError if it is gone (or re-created)."""
        try:
            pod = self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self.request_timeout_s
            )
            data: dict[str, Any] = json.loads(pod.data)
        except ApiException as exc:
            if exc.status == 404:
                raise PodGoneError(f"{where} not found") from exc
            raise _RetryableError(f"reading {where} after a conflict: HTTP {exc.status}") from exc
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise _RetryableError(f"reading {where} after a conflict failed: {exc}") from exc
        if uid and data.get("metadata", {}).get("uid") != uid:
            raise PodGoneError(f"{where} was re-created with another UID")
        return data


def _asked_wait_s(state: RetryCallState) -> float | None:
    """What the failed attempt's answer asked to wait (a 429's Retry-After), if anything."""
    error = state.outcome.exception() if state.outcome else None
    return error.retry_after_s if isinstance(error, _RetryableError) else None
