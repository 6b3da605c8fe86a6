"""The control loop's actuator for ``flink-rescale`` actions: an in-place rescale over REST.

:class:`FlinkRescaleActuator` executes a
:class:`~kubesage.core.loop.actions.FlinkRescale` with
:func:`~kubesage.adapters.flink.rescale.rescale_in_place` through a client for the
action's JobManager, and reports the outcome the loop audits:

- ``done``: the job runs at the new parallelism;
- ``refused``: Flink refused the request (nothing changed), or the job did not get
  there in time and the previous requirements were put back;
- ``failed``: an error — the JobManager unreachable, the previous requirements not
  restored, anything unexpected. The loop asks again on a later tick if the decision
  still wants it.

It never raises. The rescale is awaited (up to ``timeout_s``, and as long again for a
rollback), so the loop's tick waits for it too. :meth:`FlinkRescaleActuator.rescale`
also returns Flink's :class:`~kubesage.adapters.flink.rescale.RescaleOutcome`, which
``kubesage flink autoscale`` prints.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.loop_clients import ClientFor, ClientPool
from kubesage.adapters.flink.rescale import RescaleOutcome, rescale_in_place
from kubesage.core.loop.actions import Action, ActionKind, FlinkRescale
from kubesage.core.loop.reconciler import Outcome, Result

log = logging.getLogger(__name__)

DEFAULT_RESCALE_TIMEOUT_S = 90.0
"""How long a rescale may take to reach RUNNING at its new parallelism."""


@dataclass(frozen=True)
class RescaleAttempt:
    """The loop's result of one rescale, and Flink's outcome when it got that far."""

    result: Result
    outcome: RescaleOutcome | None
    """None when the rescale could not be attempted (JobManager unreachable, an error)."""


def rescale_result(outcome: RescaleOutcome) -> Result:
    """The loop's outcome for what :func:`rescale_in_place` reports."""
    at = ", ".join(f"{vertex}={p}" for vertex, p in sorted(outcome.parallelism.items()))
    detail = f"{outcome.message} (parallelism now: {at or 'unknown'})"
    if outcome.succeeded:
        return Result(Outcome.DONE, detail)
    if outcome.refused or outcome.restored:
        return Result(Outcome.REFUSED, detail)
    return Result(Outcome.FAILED, "; ".join((detail, *outcome.errors)))


class FlinkRescaleActuator:
    """Executes ``flink-rescale`` actions (see the module docstring)."""

    def __init__(
        self,
        clients: ClientFor | None = None,
        *,
        timeout_s: float = DEFAULT_RESCALE_TIMEOUT_S,
        poll_s: float = 1.0,
    ) -> None:
        self.clients: ClientFor = clients if clients is not None else ClientPool()
        self.timeout_s = timeout_s
        self.poll_s = poll_s

    def close(self) -> None:
        """Close the clients this actuator made (the loop calls it on shutdown)."""
        if isinstance(self.clients, ClientPool):
            self.clients.close()

    @property
    def kinds(self) -> frozenset[ActionKind]:
        return frozenset({ActionKind.FLINK_RESCALE})

    def execute(self, action: Action) -> Result:
        return self.rescale(action).result

    def rescale(self, action: Action) -> RescaleAttempt:
        """Rescale as :meth:`execute` does, with Flink's outcome; never raises."""
        if not isinstance(action, FlinkRescale):
            return RescaleAttempt(
                Result(Outcome.FAILED, f"not a flink-rescale action: {action.kind}"), None
            )
        if not action.parallelism:
            return RescaleAttempt(Result(Outcome.DONE, "no vertex to rescale"), None)
        try:
            outcome = rescale_in_place(
                self.clients(action.jobmanager),
                action.job_id,
                action.parallelism,
                timeout_s=self.timeout_s,
                poll_s=self.poll_s,
            )
        except FlinkError as exc:
            detail = f"JobManager {action.jobmanager}: {exc}"
            return RescaleAttempt(Result(Outcome.FAILED, detail), None)
        except Exception as exc:  # an actuator reports, it never raises into the loop
            log.exception("rescale of Flink job %s failed", action.job_id)
            detail = f"{type(exc).__name__}: {exc}"
            return RescaleAttempt(Result(Outcome.FAILED, detail), None)
        return RescaleAttempt(rescale_result(outcome), outcome)
