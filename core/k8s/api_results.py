"""How the API server's answers read as the control loop's outcomes: one rule for every
live actuator.

A refusal (404 gone, 409 changed meanwhile, 422 invalid) is the world saying no to this
change: REFUSED, and retrying the same action will not help until the world changes.
Any other error status is a FAILED that a later tick may retry. The message is the
``message`` of the Status the server answered.
"""

from __future__ import annotations

from kubesage.core.k8s.api_status import api_message
from kubesage.core.k8s.apiclient import ApiException
from kubesage.core.loop.actions import Action
from kubesage.core.loop.reconciler import Outcome, Result

DEFAULT_REQUEST_TIMEOUT_S = 10.0
"""How long one API call may take before the action counts as FAILED."""
REFUSING_STATUSES = frozenset({404, 409, 422})
"""Answers that say no to this change (gone, changed meanwhile, invalid): REFUSED."""


def api_result(exc: ApiException, what: str) -> Result:
    """``what`` refused or failed, as the status says (see the module docstring)."""
    message = api_message(exc)
    if exc.status in REFUSING_STATUSES:
        return Result(Outcome.REFUSED, f"{what} refused (HTTP {exc.status}): {message}")
    return Result(Outcome.FAILED, f"{what} failed (HTTP {exc.status}): {message}")


def unexpected(action: Action) -> Result:
    """An action handed to an actuator that does not run its kind."""
    return Result(Outcome.FAILED, f"{type(action).__name__} is not an action this actuator runs")
