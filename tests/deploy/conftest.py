"""Fixtures shared by the chart's test modules."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.deploy.helm_support import load_helm


@pytest.fixture(scope="module")
def helm() -> ModuleType:
    """helm_python (see :func:`~tests.deploy.helm_support.load_helm`)."""
    return load_helm()
