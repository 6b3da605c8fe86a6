"""The fixtures of the control loop's end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.core.k8s import v1_node
from tests.e2e.live_cluster import LiveCluster, cluster


@pytest.fixture
def fragmented() -> Iterator[LiveCluster]:
    """n1, n2 (two H100s each) and n3 (two A100s): see :func:`tests.e2e.live_cluster.scatter`."""
    nodes = [v1_node("n1", gpus=2), v1_node("n2", gpus=2)]
    nodes.append(v1_node("n3", gpus=2, product="NVIDIA-A100-SXM4-80GB"))
    yield from cluster(nodes)


@pytest.fixture
def two_nodes() -> Iterator[LiveCluster]:
    """n1 and n2, four H100s each."""
    yield from cluster([v1_node("n1", gpus=4), v1_node("n2", gpus=4)])
