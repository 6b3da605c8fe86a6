"""Services the integration tests start themselves, and how a missing one is reported.

Locally a missing service skips the tests that need it, with the reason; under
``CI=true`` (where ``make test`` has installed everything) it is a failure, so a
broken install step can never turn into a green run that tested nothing.
"""

from __future__ import annotations

import os

import pytest

from benchmarks.flink_support.cluster import find_flink_venv
from kubesage.adapters.flink.flink_home import find_flink_home
from kubesage.core.errors import ConfigError


def missing(reason: str) -> None:
    """Skip (locally) or fail (under CI) for a service that is not installed."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"required under CI: {reason}")
    pytest.skip(reason)


def require_flink() -> None:
    """Flink from the ``.venv-flink`` that ``make services`` makes."""
    try:
        find_flink_home(find_flink_venv())
    except ConfigError as exc:
        missing(f"Flink: {exc}")
