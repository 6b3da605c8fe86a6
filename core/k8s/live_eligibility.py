"""The control loop's node check before a bind on a live cluster (:class:`LiveEligibility`)."""

from __future__ import annotations

from typing import Any

from kubesage.core.k8s.api_reads import read_node, read_pod
from kubesage.core.k8s.api_results import DEFAULT_REQUEST_TIMEOUT_S
from kubesage.core.k8s.apiclient import ApiClient, CoreV1Api
from kubesage.core.k8s.binding import BindTarget, NodeObjects, node_refusal
from kubesage.core.k8s.existing_anti_affinity import repelled_from
from kubesage.core.k8s.extras_ledger import BoundPods, ledger_for
from kubesage.core.k8s.mig_readiness import mig_resources, mig_wait_for
from kubesage.core.k8s.schedulable import pod_key
from kubesage.core.k8s.scheduling_policy import NamespaceLabels
from kubesage.core.loop.actions import PodRef


class LiveEligibility:
    """The node check of :class:`~kubesage.core.k8s.binding.BindActuator` on a live cluster
    (a :data:`~kubesage.core.k8s.binding.NodeCheck`): the pod as the API server has it now
    against its node as ``nodes`` (the ClusterSync's cache) has it, by the secondary
    scheduler's node filters (:func:`~kubesage.core.k8s.binding.node_refusal`); for a pod
    that asks for a MIG instance, the node as the API server has it now against MIG
    Manager's state (:mod:`~kubesage.core.k8s.mig_readiness`: a plan labels a node and
    binds to it in one tick, before the cache has seen its own label); and, when ``nodes``
    also keeps the bound pods (ClusterSync), its resources the core does not count, the
    node's pod count and host ports
    (:meth:`~kubesage.core.k8s.extras_ledger.ExtrasLedger.admit`, with the ledger the
    secondary scheduler shares), and the running pods' required anti-affinity as it
    stands now (a pod placed since the plan was made may repel this one; a term's
    ``namespaceSelector`` matched on ``namespace_labels`` where given). A pod that is
    gone, or a node the cache does not know, passes: the bind path refuses those itself
    (the Binding's 404; no room in the state)."""

    def __init__(
        self,
        api: ApiClient,
        nodes: NodeObjects,
        *,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        namespace_labels: NamespaceLabels | None = None,
    ) -> None:
        # Any: called with _preload_content=False (raw JSON).
        self._core: Any = CoreV1Api(api)
        self._nodes = nodes
        self._namespace_labels = namespace_labels
        self.request_timeout_s = request_timeout_s

    def __call__(self, target: BindTarget) -> str | None:
        node = self._nodes.nodes().get(target.node)
        if node is None:
            return None
        pod = read_pod(
            self._core, PodRef(target.namespace, target.name, target.uid), self.request_timeout_s
        )
        if pod is None:
            return None
        refusal = node_refusal(pod, node)
        migs = mig_resources(pod)
        if refusal is None and migs:
            current = read_node(self._core, target.node, self.request_timeout_s)
            refusal = mig_wait_for(migs, current if current is not None else node)
        if refusal is None and isinstance(self._nodes, BoundPods):
            refusal = ledger_for(self._nodes).admit(pod, target.node, node, self._nodes)
        if refusal is None and isinstance(self._nodes, BoundPods):
            refusal = repelled_from(
                pod,
                target.node,
                self._nodes.bound_pods(),
                self._nodes.nodes(),
                self._namespace_labels,
            )
        return refusal

    def bind_failed(self, target: BindTarget) -> None:
        """The pod's extras stop counting on its node at once (not after the ledger's
        grace for a placement whose assumption never showed)."""
        ledger_for(self._nodes).forget(pod_key(target.pod))
