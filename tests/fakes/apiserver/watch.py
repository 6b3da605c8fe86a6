"""Watches over the fake's store: streams of events resuming after a resourceVersion,
selection changes as ADDED/DELETED, bookmarks, compacted history (410 Expired) and
dropped connections."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator

from tests.fakes.apiserver.resources import Change, Obj, Resource, status
from tests.fakes.apiserver.selectors import Selector
from tests.fakes.apiserver.store import ObjectStore


class WatchedStore(ObjectStore):
    """:class:`ObjectStore` with the watch API over its history."""

    def __init__(self, *, bookmark_interval_s: float | None = None, dra: bool = True) -> None:
        super().__init__(dra=dra)
        self._watch_generation = 0
        self._stopping = False
        self.bookmark_interval_s = bookmark_interval_s
        self.open_watches = 0

    def end_watches(self) -> None:
        """End every watch stream as the server does at shutdown (terminating chunk)."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()

    def drop_watches(self) -> None:
        """Cut every open watch connection (no terminating chunk: a broken stream)."""
        with self._lock:
            self._watch_generation += 1
            self._lock.notify_all()

    def compact(self) -> None:
        """Forget the watch history (etcd compaction): open watches go on, but resuming from
        any resourceVersion seen so far gets 410 Expired."""
        with self._lock:
            self._compacted_rv = self._current_rv
            self._history.clear()

    def wait_for_watches(self, count: int, timeout_s: float = 10.0) -> None:
        """Block until at least ``count`` watch streams are open (tests synchronise on it)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self.open_watches < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.open_watches} watches open, wanted {count}")
                self._lock.wait(left)

    def watch_events(
        self,
        resource: Resource,
        namespace: str | None,
        selector: Selector,
        resource_version: str | None,
        timeout_s: float,
        bookmarks: bool,
    ) -> Iterator[Obj | None]:
        """Events for one watch; ``None`` means: cut the connection (a dropped watch)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            generation = self._watch_generation
            if resource_version in (None, "", "0"):
                initial = self._items(resource, namespace, selector)
                start_rv = self._current_rv
                pending: list[Obj] = [{"type": "ADDED", "object": obj} for obj in initial]
            else:
                start_rv = int(resource_version)
                pending = []
                if start_rv < self._compacted_rv:
                    pending = [
                        {
                            "type": "ERROR",
                            "object": status(
                                410,
                                "Expired",
                                f"too old resource version: {start_rv} ({self._current_rv})",
                            ),
                        }
                    ]
            expired = bool(pending) and pending[0]["type"] == "ERROR"
            if not expired:
                self.open_watches += 1
                self._lock.notify_all()
        if expired:
            yield from pending
            return
        cursor = start_rv
        last_bookmark = time.monotonic()
        try:
            yield from pending
            while True:
                with self._lock:
                    events = [
                        event
                        for change in self._history
                        if change.resource_version > cursor and change.resource is resource
                        for event in [_as_watch_event(change, namespace, selector)]
                        if event is not None
                    ]
                    if self._history:
                        cursor = max(cursor, self._history[-1].resource_version)
                    if not events:
                        if self._stopping or time.monotonic() >= deadline:
                            return
                        if self._watch_generation != generation:
                            yield None
                            return
                        wait = deadline - time.monotonic()
                        if self.bookmark_interval_s:
                            wait = min(wait, self.bookmark_interval_s)
                        self._lock.wait(max(0.0, min(wait, 0.5)))
                        if self._watch_generation != generation:
                            yield None
                            return
                yield from events
                if (
                    bookmarks
                    and self.bookmark_interval_s
                    and time.monotonic() - last_bookmark >= self.bookmark_interval_s
                ):
                    last_bookmark = time.monotonic()
                    yield {
                        "type": "BOOKMARK",
                        "object": {
                            "kind": resource.kind,
                            "apiVersion": resource.api_version,
                            "metadata": {"resourceVersion": str(cursor)},
                        },
                    }
        finally:
            with self._lock:
                self.open_watches -= 1
                self._lock.notify_all()


def _as_watch_event(change: Change, namespace: str | None, selector: Selector) -> Obj | None:
    """The event a watcher with this namespace and selector sees for ``change``."""
    ns = change.obj["metadata"].get("namespace", "")
    if namespace is not None and ns != namespace:
        return None
    now = selector.matches(change.obj)
    if change.type == "MODIFIED":
        before = change.old is not None and selector.matches(change.old)
        if now and before:
            kind = "MODIFIED"
        elif now:
            kind = "ADDED"
        elif before:
            kind = "DELETED"
        else:
            return None
    elif now:
        kind = change.type
    else:
        return None
    return {"type": kind, "object": copy.deepcopy(change.obj)}
