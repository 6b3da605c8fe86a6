"""Whether a PodDisruptionBudget lets a plan's evictions through together.

The Eviction subresource's ``dryRun`` checks one eviction against a budget as it is
now. A plan that evicts two pods under one budget that allows one disruption passes
both dry runs, and its second real eviction is then refused after the first went
through: a pod evicted in vain. :func:`budget_exceeded` counts what the plan's earlier
evictions take from the budget of a later one, as the API server's eviction check
would spend it (``pkg/registry/core/pod/storage/eviction.go``): a running, Ready pod
covered by the budget takes one disruption; a Pending, Succeeded or Failed pod takes
none, and neither does a pod that is not Ready (it goes by the budget's health, not its
count).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import urllib3
from pydantic import ValidationError

from kubesage.core.errors import DependencyError
from kubesage.core.k8s.api_reads import read_pod
from kubesage.core.k8s.apiclient import ApiException
from kubesage.core.k8s.v1_models import LabelSelector
from kubesage.core.loop.actions import PodRef

Obj = dict[str, Any]


def selects(budget: Obj, pod: Obj) -> bool:
    """Whether ``budget`` covers ``pod`` (policy/v1: a null selector selects nothing, an
    empty one every pod of the namespace). A selector that does not parse selects
    nothing here: the API server would not have accepted it."""
    selector = (budget.get("spec") or {}).get("selector")
    if selector is None:
        return False
    try:
        parsed = LabelSelector.model_validate(selector)
    except ValidationError:
        return False
    return parsed.matches((pod.get("metadata") or {}).get("labels") or {})


def spends_budget(pod: Obj) -> bool:
    """Whether evicting ``pod`` takes one of its budget's disruptions: it runs, is Ready
    and is not being deleted."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") in ("Pending", "Succeeded", "Failed"):
        return False
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def budget_exceeded(
    core: Any, policy: Any, pod: PodRef, before: Sequence[PodRef], timeout_s: float
) -> str | None:
    """Why evicting ``pod`` after ``before`` (the plan's evictions that go first) would
    be refused by its PodDisruptionBudget; None when the budget has room or nothing can
    be told (no budget, two budgets — which the API server refuses anyway —, a read that
    failed). ``core``: a CoreV1Api; ``policy``: a PolicyV1Api."""
    same_namespace = [other for other in before if other.namespace == pod.namespace]
    if not same_namespace:
        return None
    try:
        target = read_pod(core, pod, timeout_s)
        if target is None or not spends_budget(target):
            return None
        budgets = _budgets(policy, pod.namespace, timeout_s)
        covering = [budget for budget in budgets if selects(budget, target)]
        if len(covering) != 1:
            return None
        (budget,) = covering
        taken = []
        for other in same_namespace:
            evicted = read_pod(core, other, timeout_s)
            if evicted is not None and selects(budget, evicted) and spends_budget(evicted):
                taken.append(str(other))
    except DependencyError:
        return None
    allowed = (budget.get("status") or {}).get("disruptionsAllowed", 0)
    if not taken or len(taken) < allowed:
        return None
    name = f"{pod.namespace}/{(budget.get('metadata') or {}).get('name')}"
    return (
        f"eviction of pod {pod} would be refused: PodDisruptionBudget {name} allows "
        f"{allowed} disruption(s) now and the plan evicts {len(taken)} of its pods before "
        f"this one ({', '.join(taken)})"
    )


def _budgets(policy: Any, namespace: str, timeout_s: float) -> list[Obj]:
    try:
        answer = policy.list_namespaced_pod_disruption_budget(
            namespace, _preload_content=False, _request_timeout=timeout_s
        )
        items = json.loads(answer.data).get("items") or []
    except ApiException as exc:
        raise DependencyError(f"listing PodDisruptionBudgets: HTTP {exc.status}") from exc
    except (urllib3.exceptions.HTTPError, OSError, ValueError, AttributeError) as exc:
        raise DependencyError(f"listing PodDisruptionBudgets: {exc}") from exc
    return [item for item in items if isinstance(item, dict)]
