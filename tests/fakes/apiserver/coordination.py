"""The real registry's validation of ``coordination.k8s.io/v1`` Leases
(``ValidateLeaseSpec``): what the fake answers 422 ``Invalid`` for."""

from __future__ import annotations

import json

from tests.fakes.apiserver.resources import Obj
from tests.fakes.dra import Problem


def lease_problems(lease: Obj) -> list[Problem]:
    """The field errors of a Lease's spec (``leaseDurationSeconds`` must be > 0,
    ``leaseTransitions`` >= 0, when set)."""
    spec = lease.get("spec") or {}
    problems: list[Problem] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        problems.append(_invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        problems.append(
            _invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    return problems


def _invalid(path: str, value: object, detail: str) -> Problem:
    return Problem(path, "FieldValueInvalid", f"Invalid value: {json.dumps(value)}: {detail}")
