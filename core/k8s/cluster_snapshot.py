"""The live cluster once: nodes and pods listed a single time, for a command that plans
on the cluster as it is now (``spark submit``, ``gpu launch``) instead of keeping a
watch open as ``serve`` and ``loop`` do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubesage.core.errors import DependencyError
from kubesage.core.k8s.apiclient import ApiClient
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.state.cluster_state import ClusterState

LIST_TIMEOUT_S = 30.0
"""How long the first list of nodes and pods may take."""


@dataclass(frozen=True)
class ClusterSnapshot:
    state: ClusterState
    """What runs where now; the room kube-scheduler's preemptions hold for nominated
    pods is held here too."""
    nodes: dict[str, dict[str, Any]]
    """The Node objects by name (labels, taints, cordons)."""


def live_snapshot(api: ApiClient, *, timeout_s: float | None = None) -> ClusterSnapshot:
    """List the cluster once; DependencyError when it is not listed within ``timeout_s``
    (default :data:`LIST_TIMEOUT_S`)."""
    timeout_s = LIST_TIMEOUT_S if timeout_s is None else timeout_s
    sync = ClusterSync(api)
    sync.start()
    try:
        if not sync.wait_until_ready(timeout_s):
            raise DependencyError(f"the cluster was not listed within {timeout_s:g} s")
        with sync.locked_placing([]) as (state, _):
            held = state
        return ClusterSnapshot(held, sync.nodes())
    finally:
        sync.stop()
