"""``GET /debug/loop`` and the forecaster in ``/healthz``, on the app in process."""

from __future__ import annotations

import warnings

import pytest

from kubesage.core.k8s.server import create_app
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.world import WorldModel
from tests.core.k8s.test_extender import make_extender
from tests.core.loop.doubles import (
    ClusterCollector,
    RecordingActuator,
    Scripted,
    evict,
    small_state,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


def test_debug_loop_answers_the_loops_state_and_404_without_a_loop() -> None:
    clock = SimulatedClock(0.0)
    loop = ControlLoop(
        clock,
        {"cluster": ClusterCollector(clock, small_state())},
        WorldModel(),
        [Scripted("defrag", lambda view: [evict("a")])],
        [RecordingActuator()],
    )
    loop.tick()
    extender, _ = make_extender()
    app = create_app(extender, loop=loop.debug, forecaster=loop.forecaster_words)
    with TestClient(app) as client:
        debug = client.get("/debug/loop").json()
        assert debug["ticks"] == 1 and debug["clock"] == "simulated"
        assert debug["reconcilers"] == ["defrag"]
        assert [r["outcome"] for r in debug["actions"]] == ["noted", "done"]
        loop.audit.recent = lambda: pytest.fail("a probe serialised the audit records")  # type: ignore[method-assign]
        health = client.get("/healthz")
        assert health.status_code == 200
        assert health.json()["forecaster"] == "last-value (cold start)"
    with TestClient(create_app(extender)) as client:
        assert client.get("/debug/loop").status_code == 404
        assert "forecaster" not in client.get("/healthz").json()
