"""One REST client per JobManager for the control loop's Flink collector and actuator.

The registry names each run's JobManager by URL; the collector reads every one of them
each tick and the actuator rescales through the same URLs, so a client (and its
connection pool) is made once per URL and kept. A loop tick must not stall on one dead
JobManager, so the pool's clients retry less than the CLI's (``attempts=2``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubesage.adapters.flink.client import FlinkClient

ClientFor = Callable[[str], FlinkClient]
"""JobManager URL → the client that talks to it."""

LOOP_ATTEMPTS = 2
"""Tries per request in the loop (the CLI's client makes 4): a dead JobManager costs
one retry per tick, not a stalled tick."""


def loop_client(url: str) -> FlinkClient:
    """A client for the loop: the default timeout, fewer retries."""
    return FlinkClient(url, attempts=LOOP_ATTEMPTS)


class ClientPool:
    """A :class:`FlinkClient` per JobManager URL, made on first use by ``make``."""

    def __init__(self, make: ClientFor = loop_client) -> None:
        self._make = make
        self._clients: dict[str, FlinkClient] = {}
        self._lock = threading.Lock()

    def __call__(self, url: str) -> FlinkClient:
        key = url.rstrip("/")
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = self._make(key)
            return client

    def close(self) -> None:
        """Close every client (their connection pools)."""
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
