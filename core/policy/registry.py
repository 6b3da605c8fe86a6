"""Policy names → constructors. An unknown name is rejected when the policy is built."""

from __future__ import annotations

from collections.abc import Callable

from kubesage.core.errors import UnknownPolicyError
from kubesage.core.policy.base import Policy, PolicyContext
from kubesage.core.policy.fgd import FgdPolicy
from kubesage.core.policy.fgd_baselines import (
    BestFitPolicy,
    DotProductPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    MigPackingPolicy,
    RandomPolicy,
)
from kubesage.core.policy.kubernetes import KubernetesDefaultPolicy, MostAllocatedPolicy

PolicyFactory = Callable[[PolicyContext], Policy]


def _ppo(context: PolicyContext) -> Policy:
    # Imported on use: the learned policy pulls in torch, the heuristics do not.
    from kubesage.core.rl.policy import PpoPolicy

    return PpoPolicy(context)


POLICIES: dict[str, PolicyFactory] = {
    "random": RandomPolicy,
    "dotprod": DotProductPolicy,
    "gpuclustering": GpuClusteringPolicy,
    "gpupacking": GpuPackingPolicy,
    "bestfit": BestFitPolicy,
    "fgd": FgdPolicy,
    "k8s-default": KubernetesDefaultPolicy,
    "mostallocated": MostAllocatedPolicy,
    "migpacking": MigPackingPolicy,
    "ppo": _ppo,
}
"""Every built-in policy, in the order reports list them."""

DEFAULT_POLICIES = tuple(name for name in POLICIES if name not in ("migpacking", "ppo"))
"""What ``kubesage simulate`` compares by default (migpacking matters on MIG clusters
only; ppo is opt-in: ``--policy ppo``)."""

PAPER_POLICIES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")
"""The six policies with published results on the openb traces."""


def policy_names() -> list[str]:
    return list(POLICIES)


def make_policy(name: str, context: PolicyContext) -> Policy:
    """Build the policy registered as ``name``."""
    factory = POLICIES.get(name)
    if factory is None:
        raise UnknownPolicyError(name, policy_names())
    return factory(context)
