"""The telemetry tests' services live in tests/core/conftest.py (shared with the CLI tests).

Only the helpers test modules import by name are re-exported here; the fixtures are
not (importing them would register a second, separately started copy of each service).
"""

from tests.core.conftest import (
    GPU_NODES,
    HISTORY_S,
    PrometheusServer,
    free_port,
    start_prometheus,
    wait_until,
)

__all__ = [
    "GPU_NODES",
    "HISTORY_S",
    "PrometheusServer",
    "free_port",
    "start_prometheus",
    "wait_until",
]
