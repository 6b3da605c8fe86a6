"""Scheduling policies: one interface, heuristics and FGD behind it."""

from kubesage.core.policy.base import Policy, PolicyContext, ScoringPolicy
from kubesage.core.policy.registry import (
    DEFAULT_POLICIES,
    PAPER_POLICIES,
    POLICIES,
    make_policy,
    policy_names,
)

__all__ = [
    "DEFAULT_POLICIES",
    "PAPER_POLICIES",
    "POLICIES",
    "Policy",
    "PolicyContext",
    "ScoringPolicy",
    "make_policy",
    "policy_names",
]
