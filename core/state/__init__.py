"""The cluster model: resource state and the fragmentation measure over it."""

from kubesage.core.state.cluster_state import ClusterState

__all__ = ["ClusterState"]
