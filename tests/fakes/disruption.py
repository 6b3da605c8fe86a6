"""PodDisruptionBudget semantics for the FAKE API server: the disruption controller's
status and the eviction subresource's check, as the real ones compute them.

- :func:`budget_status` is what kube-controller-manager's disruption controller
  writes into a policy/v1 PDB's ``status``: ``expectedPods``, ``currentHealthy``
  (matching pods that are Ready and not being deleted), ``desiredHealthy``
  (``minAvailable``, or expected − ``maxUnavailable``; percentages of the expected
  count rounded up), ``disruptionsAllowed`` = max(0, healthy − desired), and the
  ``DisruptionAllowed`` condition. The expected count is, as in the real controller,
  the number of matching pods for an integer ``minAvailable``, and the owning
  controllers' scale for ``maxUnavailable`` and percentages. The fake has no
  controllers: their scale is the matching pods plus those evicted and not replaced
  yet (``awaiting_replacement``: a controller keeps its replica count and re-creates
  an evicted pod; the fake counts one as replaced when a new matching pod is created).
- :func:`eviction_refusal` is the check of the API server's eviction REST
  (``pkg/registry/core/pod/storage/eviction.go``): pods that are Pending, Succeeded or
  Failed ignore budgets; more than one matching budget is a 500; a not-Ready pod may
  go while the budget is healthy (``unhealthyPodEvictionPolicy`` ``IfHealthyBudget``,
  the default) or always (``AlwaysAllow``); otherwise ``disruptionsAllowed == 0``
  answers 429 TooManyRequests with the real message and a ``DisruptionBudget`` cause.
"""

from __future__ import annotations

import math
from typing import Any

Obj = dict[str, Any]

TOO_MANY_REQUESTS = "Cannot evict pod as it would violate the pod's disruption budget."
"""The message of the API server's 429 for an eviction a budget forbids."""
MULTIPLE_BUDGETS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource "
    "does not support."
)


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector: null matches nothing, ``{}`` everything (policy/v1)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def covers(pdb: Obj, pod: Obj) -> bool:
    """Whether ``pdb`` selects ``pod`` (same namespace, selector matches its labels)."""
    if pdb["metadata"].get("namespace") != pod["metadata"].get("namespace"):
        return False
    labels = pod["metadata"].get("labels") or {}
    return selector_matches((pdb.get("spec") or {}).get("selector"), labels)


def is_healthy(pod: Obj) -> bool:
    """Ready and not being deleted: what the disruption controller counts as healthy."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with rounding up."""
    if isinstance(value, int):
        return value
    if value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def budget_status(
    pdb: Obj, pods: list[Obj], previous: Obj | None, now: str, awaiting_replacement: int = 0
) -> Obj:
    """The ``status`` the disruption controller writes for ``pdb`` over ``pods``."""
    spec = pdb.get("spec") or {}
    matching = [pod for pod in pods if covers(pdb, pod)]
    healthy = sum(1 for pod in matching if is_healthy(pod))
    scale = len(matching) + awaiting_replacement
    min_available = spec.get("minAvailable")
    if spec.get("maxUnavailable") is not None:
        expected = scale
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif isinstance(min_available, int):
        expected = len(matching)
        desired = min_available
    elif min_available is not None:
        expected = scale
        desired = _scaled(min_available, expected)
    else:  # neither: the budget requires nothing
        expected, desired = len(matching), 0
    allowed = max(0, healthy - desired)
    generation = pdb["metadata"].get("generation", 1)
    condition_status = "True" if allowed > 0 else "False"
    old_condition = next(
        (c for c in (previous or {}).get("conditions") or [] if c["type"] == "DisruptionAllowed"),
        None,
    )
    since = (
        old_condition["lastTransitionTime"]
        if old_condition and old_condition["status"] == condition_status
        else now
    )
    return {
        "observedGeneration": generation,
        "disruptedPods": {},
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": condition_status,
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                "message": "",
                "observedGeneration": generation,
                "lastTransitionTime": since,
            }
        ],
    }


def eviction_refusal(pod: Obj, budgets: list[Obj]) -> tuple[int, str, str, Obj | None] | None:
    """Why the eviction of ``pod`` must be refused, given the budgets (with fresh status)
    of its namespace: ``(code, reason, message, details)``; None when it may go."""
    if (pod.get("status") or {}).get("phase") in ("Pending", "Succeeded", "Failed"):
        return None
    matching = [pdb for pdb in budgets if covers(pdb, pod)]
    if not matching:
        return None
    if len(matching) > 1:
        return 500, "InternalError", MULTIPLE_BUDGETS, None
    pdb = matching[0]
    status = pdb.get("status") or {}
    if not is_healthy(pod):
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        healthy, desired = status.get("currentHealthy", 0), status.get("desiredHealthy", 0)
        if policy == "AlwaysAllow" or (healthy >= desired and desired > 0):
            return None
    if status.get("observedGeneration", 0) < pdb["metadata"].get("generation", 1):
        # the API server's createTooManyRequestsError: a DisruptionBudget cause, and a
        # wait (the budget's controller has not caught up yet)
        name = pdb["metadata"]["name"]
        cause = f"The disruption budget {name} is still being processed by the server."
        return (
            429,
            "TooManyRequests",
            TOO_MANY_REQUESTS,
            {
                "causes": [{"reason": "DisruptionBudget", "message": cause}],
                "retryAfterSeconds": 10,
            },
        )
    if status.get("disruptionsAllowed", 0) == 0:
        cause = (
            f"The disruption budget {pdb['metadata']['name']} needs "
            f"{status.get('desiredHealthy', 0)} healthy pods and has "
            f"{status.get('currentHealthy', 0)} currently"
        )
        return (
            429,
            "TooManyRequests",
            TOO_MANY_REQUESTS,
            {"causes": [{"reason": "DisruptionBudget", "message": cause}]},
        )
    return None
