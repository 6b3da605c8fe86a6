"""The real registry's validation of a pod spec's node affinity that kubesage's
generated pods can get wrong (``ValidateNodeSelector`` /
``validateNodeFieldSelectorRequirement``): what the fake answers 422 ``Invalid`` for,
on Pods and on the pod template of Jobs."""

from __future__ import annotations

from typing import Any

from tests.fakes.apiserver.resources import Obj
from tests.fakes.dra import Problem

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def pod_spec_problems(spec: Obj, path: str) -> list[Problem]:
    """The field errors of ``spec``'s node affinity (``path``: where the spec sits)."""
    node_affinity = ((spec.get("affinity") or {}).get("nodeAffinity")) or {}
    at = f"{path}.affinity.nodeAffinity"
    problems: list[Problem] = []
    terms = (node_affinity.get(REQUIRED) or {}).get("nodeSelectorTerms") or []
    for i, term in enumerate(terms):
        problems += _term_problems(term, f"{at}.{REQUIRED}.nodeSelectorTerms[{i}]")
    for i, preferred in enumerate(node_affinity.get(PREFERRED) or []):
        problems += _term_problems(
            preferred.get("preference") or {}, f"{at}.{PREFERRED}[{i}].preference"
        )
    return problems


def _term_problems(term: dict[str, Any], path: str) -> list[Problem]:
    problems = []
    for j, requirement in enumerate(term.get("matchFields") or []):
        where = f"{path}.matchFields[{j}]"
        operator = requirement.get("operator")
        if operator in ("In", "NotIn"):
            if len(requirement.get("values") or []) != 1:
                problems.append(
                    Problem(
                        f"{where}.values",
                        "FieldValueRequired",
                        "Required value: must be only one value when `operator` is 'In' or "
                        "'NotIn' for node field selector",
                    )
                )
        else:
            problems.append(
                Problem(
                    f"{where}.operator",
                    "FieldValueInvalid",
                    f'Invalid value: "{operator}": not a valid selector operator',
                )
            )
        if requirement.get("key") != "metadata.name":
            problems.append(
                Problem(
                    f"{where}.key",
                    "FieldValueInvalid",
                    f'Invalid value: "{requirement.get("key")}": not a valid field selector key',
                )
            )
    return problems
