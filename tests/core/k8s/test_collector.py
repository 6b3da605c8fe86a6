"""The Kubernetes collector: Collector protocol, stale fallback and failure counter."""

from __future__ import annotations

import pytest

from kubesage.core.errors import DependencyError
from kubesage.core.k8s.apiclient import load_api_client
from kubesage.core.k8s.collector import KubernetesCollector
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.perception import Collector
from tests.core.k8s import v1_node
from tests.fakes.apiserver import FakeApiServer, wait_until


def test_collects_the_cluster_and_falls_back_to_the_last_snapshot() -> None:
    with FakeApiServer() as fake:
        fake.add_node(v1_node("a", gpus=8, zone="z1", rack="r1"))
        fake.add_node(v1_node("b", gpus=0, zone="z1", rack="r1"))
        api = load_api_client(str(fake.kubeconfig))
        assert api is not None
        with ClusterSync(api, backoff_s=0.02, max_backoff_s=0.1) as sync:
            collector = KubernetesCollector(sync)
            assert isinstance(collector, Collector)
            assert collector.name == "kubernetes"
            wait_until(lambda: sync.ready, what="first list")
            snapshot = collector.collect()
            assert not snapshot.stale and snapshot.reason is None
            assert snapshot.data.node_names == ("a", "b")
            assert int(snapshot.data.gpu_count.sum()) == 8
            assert [rack.name for rack in collector.topology().racks] == ["r1"]

            # nodes, pods, slices, claims: one still connecting would miss the fault and the drop
            fake.wait_for_watches(4)
            fake.fail("GET", r"^/api/v1/nodes$", 503, times=10_000)
            fake.drop_watches()
            wait_until(lambda: "nodes: HTTP 503" in (collector.collect().reason or ""))
            stale = collector.collect()
            assert stale.stale and stale.data.node_names == ("a", "b")
            assert collector.failures >= 1
            snapshot.data.cpu_free_milli[0] = 0  # snapshots are copies
            assert int(collector.collect().data.cpu_free_milli[0]) > 0


def test_no_snapshot_before_the_first_list_is_a_dependency_error() -> None:
    with FakeApiServer() as fake:
        fake.fail("GET", r"^/api/v1/nodes$", 500, times=10_000)
        api = load_api_client(str(fake.kubeconfig))
        with ClusterSync(api, backoff_s=0.02, max_backoff_s=0.1) as sync:
            collector = KubernetesCollector(sync)
            wait_until(lambda: collector.failures >= 1, what="a failed list")
            with pytest.raises(DependencyError, match="no cluster state yet"):
                collector.collect()
