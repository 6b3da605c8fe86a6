"""The public surface of kubesage.core is deliberate: this list changes only on purpose."""

from __future__ import annotations

import kubesage.core as core

EXPECTED = {
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
}


def test_public_names() -> None:
    assert set(core.__all__) == EXPECTED
    for name in core.__all__:
        assert getattr(core, name) is not None


def test_errors_form_one_tree() -> None:
    for name in core.__all__:
        value = getattr(core, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, core.KubesageError), name


def test_every_builtin_policy_implements_the_protocol() -> None:
    for name in core.policy_names():
        policy = core.make_policy(
            name,
            core.PolicyContext(workload=[core.PodRequest(name="p", cpu_milli=1, memory_mib=1)]),
        )
        assert isinstance(policy, core.Policy)
        assert policy.name == name
