"""kubesage.core: the scheduling core every adapter shares.

The names below are the public surface; everything else may change between
releases. ``tests/core/test_public_api.py`` keeps this list honest.
"""

from kubesage.core.errors import (
    CapacityError,
    ConfigError,
    DependencyError,
    FetchError,
    InputError,
    KubesageError,
    RequestError,
    TraceFormatError,
    UnknownPolicyError,
)
from kubesage.core.policy import Policy, PolicyContext, ScoringPolicy, make_policy, policy_names
from kubesage.core.sim.engine import Simulator
from kubesage.core.sim.protocol import fgd_arrivals
from kubesage.core.sim.runner import RunResult, RunSpec, run_many, run_one
from kubesage.core.state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure, TypicalPod, typical_pods
from kubesage.core.traces import read_nodes, read_pods
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from kubesage.core.types import Decision, MigShape, NodeSpec, Placement, PodRequest

__all__ = [
    "CapacityError",
    "ClusterState",
    "ConfigError",
    "Decision",
    "DependencyError",
    "FetchError",
    "FragmentationMeasure",
    "InputError",
    "KubesageError",
    "MigShape",
    "NodeSpec",
    "Placement",
    "PodRequest",
    "Policy",
    "PolicyContext",
    "RequestError",
    "RunResult",
    "RunSpec",
    "ScoringPolicy",
    "Simulator",
    "TraceFormatError",
    "TypicalPod",
    "UnknownPolicyError",
    "fgd_arrivals",
    "make_policy",
    "policy_names",
    "read_nodes",
    "read_pods",
    "run_many",
    "run_one",
    "synthetic_cluster",
    "synthetic_workload",
    "typical_pods",
]
