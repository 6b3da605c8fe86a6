"""List + watch of one Kubernetes resource: the reflector both caches run on.

:class:`ListWatch` is what client-go's reflector does, for the informer
(:mod:`kubesage.core.k8s.informer`, nodes and pods) and the namespace cache
(:mod:`kubesage.core.k8s.namespaces`): list, remembering the list's
``resourceVersion``; watch from it with bookmarks; resume from the last version seen
when a watch ends (server timeout, broken stream); relist on ``410 Gone`` (the
version was compacted away, sent as an ``ERROR`` event or as an HTTP status) and every
``resync_s``; log, count and back off exponentially on any other failure, keeping the
owner's cache as it was. What the owner keeps is its business: it gets a snapshot per
list and each event, under its own lock.

Watches are read by hand (``?watch=true`` with ``_preload_content=False``) so that a
stop can shut the socket down under a blocked reader.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any, Self, TypedDict

import urllib3

from kubesage.core.errors import InputError
from kubesage.core.k8s.apiclient import ApiException

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def json_lines(response: Any) -> Iterator[str]:
    """Non-empty JSON lines of a watch stream, however the chunks split them."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line.decode("utf-8", errors="replace")
    if buffer.strip():
        yield buffer.decode("utf-8", errors="replace")


def shutdown(response: Any) -> None:
    """Unblock a thread reading ``response`` (urllib3 ≥ 2.3 can shut the socket down).

    urllib3 raises ValueError or RuntimeError from ``shutdown`` when the stream has
    already ended and its connection was released: nothing is left to unblock then.
    """
    if response is None:
        return
    if hasattr(response, "shutdown"):
        with suppress(OSError, ValueError, RuntimeError, urllib3.exceptions.HTTPError):
            response.shutdown()
    with suppress(OSError, urllib3.exceptions.HTTPError):
        response.close()


def describe(exc: BaseException) -> str:
    """A short description of an API failure for logs and stale reasons."""
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


class WatchOptions(TypedDict, total=False):
    """How a :class:`ListWatch` paces its calls; its owners take these as keywords.

    ``resync_s``: a full relist this often; ``watch_timeout_s``: the longest watch asked
    of the server; ``backoff_s``/``max_backoff_s``: the first and the largest wait after
    a failure; ``request_timeout_s``: the client-side timeout of a list, and of a watch
    on top of its server-side one. Defaults: :class:`ListWatch`'s signature.
    """

    resync_s: float
    watch_timeout_s: float
    backoff_s: float
    max_backoff_s: float
    request_timeout_s: float


class _ExpiredError(Exception):
    """The watch's resourceVersion is too old (410): relist."""


class ListWatch:
    """One reflector on one resource (see the module docstring), run on its own thread.

    ``list_call`` is a CoreV1Api list method (or one with fixed selectors): called with
    ``_preload_content=False`` for a list, and with ``watch=True`` for a watch.
    ``on_list`` gets the items of every list, ``on_event`` each ``ADDED``/``MODIFIED``/
    ``DELETED`` event (type, object); both run holding ``lock``, the owner's, which
    also guards :attr:`error`. ``on_failure`` runs after each failed call (the owner's
    metrics). ``stop`` ends it: set it, then :meth:`interrupt` and :meth:`join` (what
    :class:`Reflectors` does).
    """

    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        *,
        thread_name: str,
        lock: threading.Condition,
        stop: threading.Event,
        on_list: Callable[[list[Obj]], None],
        on_event: Callable[[str, Obj], None],
        on_failure: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        resync_s: float = 300.0,
        watch_timeout_s: float = 300.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        request_timeout_s: float = 30.0,
    ) -> None:
        if resync_s <= 0 or watch_timeout_s <= 0:
            raise InputError(f"{name}: resync_s and watch_timeout_s must be positive")
        self.resync_s = resync_s
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.request_timeout_s = request_timeout_s
        self.name = name
        self._thread_name = thread_name
        self._list_call = list_call
        self._lock = lock
        self._stop = stop
        self._on_list = on_list
        self._on_event = on_event
        self._on_failure = on_failure
        self._clock = clock
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self.version: str | None = None
        """The resourceVersion reached (list, then each event and bookmark); None: relist."""
        self.listed = False
        """True once a list has succeeded."""
        self.error: str | None = None
        """Why the last call failed; None once a list or watch connects again."""
        self.failures = 0
        """List/watch calls that failed."""
        self.relists = 0
        """Full lists done (initial, after 410, resync)."""

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Run the reflector on a daemon thread (no-op while one runs)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def interrupt(self) -> None:
        """Unblock a watch being read (call after setting ``stop``)."""
        shutdown(self._response)

    def join(self, timeout_s: float) -> None:
        """Wait for the thread to end (after :meth:`interrupt`)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    # -- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = self.backoff_s
        resync_at = 0.0
        while not self._stop.is_set():
            try:
                if self.version is None or self._clock() >= resync_at:
                    self._relist()
                    resync_at = self._clock() + self.resync_s
                self._watch(resync_at)
                backoff = self.backoff_s
            except _ExpiredError:
                log.info("%s watch: resourceVersion expired; relisting", self.name)
                self.version = None
            except Exception as exc:  # a reflector never dies: log, count, back off
                if self._stop.is_set():
                    break
                if not isinstance(exc, ApiException | urllib3.exceptions.HTTPError | OSError):
                    log.exception("%s list/watch: unexpected error", self.name)
                with self._lock:
                    self.failures += 1
                    self.error = describe(exc)
                self._on_failure()
                log.warning(
                    "%s list/watch failed (%s); keeping the last content, retrying in %.1fs",
                    self.name,
                    self.error,
                    backoff,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
            finally:
                self._response = None

    def _relist(self) -> None:
        response = self._list_call(_preload_content=False, _request_timeout=self.request_timeout_s)
        body = json.loads(response.data)
        with self._lock:
            self._on_list(list(body.get("items") or []))
            self.listed = True
            self.error = None
            self.version = str((body.get("metadata") or {}).get("resourceVersion") or "")
            self.relists += 1

    def _watch(self, resync_at: float) -> None:
        """Watch from :attr:`version` until the server ends the stream; :attr:`version`
        follows every event and bookmark, so a broken stream resumes where it broke."""
        timeout_s = max(1, int(min(self.watch_timeout_s, resync_at - self._clock())))
        try:
            response = self._list_call(
                watch=True,
                resource_version=self.version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_s,
                _preload_content=False,
                _request_timeout=(self.request_timeout_s, timeout_s + self.request_timeout_s),
            )
        except ApiException as exc:
            if exc.status == 410:  # answered as an HTTP status rather than an ERROR event
                raise _ExpiredError() from exc
            raise
        self._response = response
        with self._lock:
            self.error = None  # connected again: the cache is current from here on
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
                version = (obj.get("metadata") or {}).get("resourceVersion")
                with self._lock:
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._on_event(kind, obj)
                    if version:
                        self.version = str(version)
        finally:
            response.release_conn()


class Reflectors:
    """The :class:`ListWatch` reflectors of one owner, started, stopped and waited on
    together.

    They share the owner's ``lock`` (a Condition: callbacks run holding it, and the
    owner notifies it on every change) and one stop event; ``options`` pace them all.
    """

    def __init__(
        self,
        owner: str,
        lock: threading.Condition,
        *,
        clock: Callable[[], float] = time.monotonic,
        options: WatchOptions,
    ) -> None:
        self.owner = owner
        self.lock = lock
        self._clock = clock
        self._options = options
        self._stop = threading.Event()
        self._started = False
        self.loops: dict[str, ListWatch] = {}
        """The reflectors by the kind they list (``nodes``, ``pods``...)."""

    def add(
        self,
        kind: str,
        list_call: Callable[..., Any],
        *,
        thread_name: str,
        on_list: Callable[[list[Obj]], None],
        on_event: Callable[[str, Obj], None],
        on_failure: Callable[[], None],
    ) -> ListWatch:
        """A reflector of ``kind`` (InputError on bad options), started with the others."""
        loop = ListWatch(
            f"{self.owner} {kind}",
            list_call,
            thread_name=thread_name,
            lock=self.lock,
            stop=self._stop,
            on_list=on_list,
            on_event=on_event,
            on_failure=on_failure,
            clock=self._clock,
            **self._options,
        )
        self.loops[kind] = loop
        return loop

    def start(self) -> None:
        """Start every reflector (returns at once; a second call is a no-op)."""
        if self._started:
            return
        self._started = True
        self._stop.clear()
        for loop in self.loops.values():
            loop.start()

    def stop(self, timeout_s: float) -> None:
        """Stop the reflectors, close their watches and wake whoever waits on the lock."""
        self._stop.set()
        for loop in self.loops.values():
            loop.interrupt()
        with self.lock:
            self.lock.notify_all()
        for loop in self.loops.values():
            loop.join(timeout_s)
        self._started = False

    def wait(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Block (holding the lock) until ``done()``, a stop or the timeout; return ``done()``."""
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while not done() and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.lock.wait(left)
            return done()

    @property
    def listed(self) -> bool:
        """True once every reflector has listed."""
        return all(loop.listed for loop in self.loops.values())

    @property
    def failures(self) -> int:
        """List/watch calls that failed, all reflectors together."""
        return sum(loop.failures for loop in self.loops.values())

    @property
    def relists(self) -> int:
        """Full lists done, all reflectors together."""
        return sum(loop.relists for loop in self.loops.values())


class ReflectedCache:
    """Start, stop and ``with`` for a cache kept by its :class:`Reflectors`."""

    _reflectors: Reflectors

    def start(self) -> None:
        """Start the reflector threads (returns at once; a second call is a no-op)."""
        self._reflectors.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the reflector threads and close their watch connections."""
        self._reflectors.stop(timeout_s)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def failures(self) -> int:
        """List/watch calls that failed, all reflectors together (logged; the owner
        counts each in its metrics, and ClusterSync reports it as a Collector)."""
        return self._reflectors.failures

    @property
    def relists(self) -> int:
        """Full lists done (initial, after 410, resync), all reflectors together."""
        return self._reflectors.relists
