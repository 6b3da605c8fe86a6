"""Rates from a JobManager whose metric store refreshes less often than the collector
polls (Flink's ``metrics.fetcher.update-interval``, 10 s by default): a value is timed
by its first appearance, so a window's rate does not depend on how many refreshes it
straddles."""

from __future__ import annotations

import math
from typing import Any

import httpx
import numpy as np
import pytest

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector

from .conftest import recorded

RATE = 100.0  # records a second through every vertex
BUSY = 500.0  # ms a second, every subtask
REFRESH_S = 10.0  # Flink's default metrics.fetcher.update-interval


class RefreshingStore:
    """The recorded sample job's JobManager, its counters as its metric store holds
    them: refreshed every ``REFRESH_S`` seconds of the simulated clock."""

    def __init__(self, poll_s: float) -> None:
        self.job = recorded("job_running")["body"]
        self.poll_s = poll_s
        self.now = 0.0
        self.started = self.job["timestamps"]["RUNNING"] / 1000.0

    def clock(self) -> float:
        self.now += self.poll_s
        return self.started + 60.0 + self.now

    def _stored(self) -> float:
        """Seconds of running the store's values describe (as of its last refresh)."""
        fetched = math.floor((self.started + 60.0 + self.now) / REFRESH_S) * REFRESH_S
        return fetched - self.started

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        jid = self.job["jid"]
        if path == "/overview":
            return httpx.Response(200, json=recorded("overview")["body"])
        if path == f"/jobs/{jid}":
            return httpx.Response(200, json=self.job)
        running = self._stored()
        if path.endswith("/subtasks/metrics"):
            if "get" not in request.url.params:
                return httpx.Response(200, json=recorded("metric_names_source")["body"])
            counted = RATE * running
            body: list[dict[str, Any]] = [
                {"id": name, "min": counted, "max": counted, "avg": counted, "sum": counted}
                for name in ("numRecordsIn", "numRecordsOut")
            ]
            return httpx.Response(200, json=body)
        vertex = path.rsplit("/", 1)[-1]
        times = {
            "accumulated-busy-time": BUSY * running,
            "accumulated-idle-time": (1000.0 - BUSY) * running,
            "accumulated-backpressured-time": 0,
        }
        detail = {"id": vertex, "parallelism": 1, "subtasks": [{"subtask": 0, "metrics": times}]}
        return httpx.Response(200, json=detail)


@pytest.mark.parametrize("poll_s", [5.3, 6.0, 7.0])
def test_rates_hold_when_the_metric_store_refreshes_every_10_s(poll_s: float) -> None:
    store = RefreshingStore(poll_s)
    client = FlinkClient(
        "http://flink.test", transport=httpx.MockTransport(store.handle), backoff_s=0.0
    )
    collector = ObservationCollector(client, store.job["jid"], clock=store.clock)
    slow = store.job["vertices"][1]["id"]
    rates, busy = [], []
    for tick in range(30):
        observed = collector.collect().vertex(slow)
        if tick >= 6 and observed.records_in_per_s is not None:
            rates.append(observed.records_in_per_s)
            busy.append(observed.busy_ms_per_s)
    assert len(rates) == 24
    # Read by every poll's own clock these straddle one or two refreshes: 83-141 rec/s.
    assert np.allclose(rates, RATE, rtol=0.1), rates
    assert np.allclose(busy, BUSY, rtol=0.1), busy
