"""The embedded cluster ``kubesage serve`` decides on when no kubeconfig is given.

It is the synthetic openb-like cluster the simulator uses by default
(``configs/simulate.yaml``: 1,213 GPU nodes, seed 0) with the matching synthetic
workload as the policy's typical pods, so the extender and the webhook answer real
requests with no API server. Binds go into this ClusterState: a bound pod takes
its resources (on the GPUs the policy chooses) until the process exits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from kubesage.core.errors import KubesageError
from kubesage.core.k8s.extender import BindFunction, BindRefusedError, BindTarget, LockedState
from kubesage.core.k8s.logging import log_event
from kubesage.core.policy.base import Policy, ScoringPolicy
from kubesage.core.policy.gpu_choice import placement_on
from kubesage.core.sim.settings import DEFAULT_SYNTHETIC_NODES, DEFAULT_SYNTHETIC_PODS
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from kubesage.core.types import NodeSpec, Placement, PodRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BoundPod:
    """A pod bound in the embedded cluster."""

    node: str
    request: PodRequest
    placement: Placement


class EmbeddedCluster(LockedState):
    """A ClusterState owned by this process, with the workload that shaped it."""

    def __init__(self, nodes: list[NodeSpec], workload: list[PodRequest], description: str):
        super().__init__(ClusterState(nodes))
        self.workload = workload
        """Typical pods for policies that need them (FGD)."""
        self.description = description
        self.bound: dict[str, BoundPod] = {}
        """Bound pods by UID (or namespace/name when the bind carried no UID)."""

    @classmethod
    def synthetic(
        cls,
        nodes: int = DEFAULT_SYNTHETIC_NODES,
        *,
        seed: int = 0,
        pods: int = DEFAULT_SYNTHETIC_PODS,
    ) -> EmbeddedCluster:
        """The simulator's default synthetic cluster and workload (any size)."""
        specs = synthetic_cluster(nodes, seed=seed)
        workload = synthetic_workload(pods, seed=seed)
        return cls(
            specs,
            workload,
            f"embedded synthetic openb-like cluster ({nodes} nodes, seed {seed})",
        )

    def fill(self, policy: Policy, gpu_allocation: float, *, seed: int = 0) -> int:
        """Place workload pods with ``policy`` until ``gpu_allocation`` (0..1) of the GPUs
        are taken; return how many pods were placed. Gives a benchmark a busy cluster."""
        rng = np.random.default_rng(seed)
        placed = 0
        with self.locked() as (state, _):
            while state.gpu_allocation_ratio < gpu_allocation:
                request = self.workload[int(rng.integers(len(self.workload)))]
                decision = policy.decide(state, request)
                if decision.placement is None:
                    break
                state.allocate(request, decision.placement)
                placed += 1
        return placed

    def binder(self, policy: Policy) -> BindFunction:
        """A bind function that allocates the pod in this cluster on the policy's GPUs."""

        def bind(target: BindTarget) -> None:
            key = target.uid or f"{target.namespace}/{target.name}"
            where = f"pod {target.namespace}/{target.name}"
            with self.locked() as (state, _):
                done = self.bound.get(key)
                if done is not None:
                    if done.node == target.node:
                        return  # a retried bind of the same pod: already done
                    raise BindRefusedError(f"{where} is already bound to {done.node}")
                if target.request is None:
                    raise BindRefusedError(
                        f"{where} was never filtered or prioritized here, so the embedded "
                        "cluster does not know its requests"
                    )
                node = state.node_index.get(target.node)
                if node is None:
                    raise BindRefusedError(f"node '{target.node}' is not in the embedded cluster")
                if not state.feasible(target.request, np.array([node]))[0]:
                    raise BindRefusedError(f"{where} does not fit on {target.node} any more")
                placement = _placement(policy, state, node, target.request)
                try:
                    state.allocate(target.request, placement)
                except KubesageError as exc:
                    raise BindRefusedError(f"{where} on {target.node}: {exc}") from exc
                self.bound[key] = BoundPod(target.node, target.request, placement)
            log_event(
                log,
                logging.INFO,
                "embedded_bind",
                pod=f"{target.namespace}/{target.name}",
                node=target.node,
                gpus=list(placement.gpu_indices),
            )

        return bind


def _placement(policy: Policy, state: ClusterState, node: int, request: PodRequest) -> Placement:
    if isinstance(policy, ScoringPolicy):
        return policy.placement_on(state, node, request)
    # A policy without its own GPU choice (ppo) binds like the FGD simulator: lowest index.
    return placement_on(state, node, request)
