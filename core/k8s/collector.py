"""The Kubernetes collector: nodes, pods and labels as a ClusterState snapshot.

A thin :class:`~kubesage.core.perception.Collector` over
:class:`~kubesage.core.k8s.informer.ClusterSync`, which does the list + watch. It lives
in the Kubernetes layer (the telemetry sources never import it), and a control loop
sees it only through the protocol. Its fallback is the protocol's: while the API server
fails, ``collect`` returns the last state it saw, marked stale with the reason, and
:attr:`failures` counts the failed list/watch attempts.
"""

from __future__ import annotations

from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.perception import Snapshot
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.spec import TopologySpec


class KubernetesCollector:
    """Collector of ClusterState from a running :class:`ClusterSync`."""

    def __init__(self, sync: ClusterSync) -> None:
        self.sync = sync

    @property
    def name(self) -> str:
        return "kubernetes"

    @property
    def failures(self) -> int:
        return self.sync.failures

    def collect(self) -> Snapshot[ClusterState]:
        """The current state (a copy); raises ClusterNotReadyError before the first list."""
        return self.sync.collect()

    def topology(self) -> TopologySpec:
        """Zones, racks and node templates from the nodes' labels."""
        return self.sync.topology()
