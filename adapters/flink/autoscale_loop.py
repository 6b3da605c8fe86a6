"""``kubesage flink autoscale``: the autoscaler for one job, on its own — every tick.

The stand-alone form of the control loop's ``flink-autoscaler``: the same step and the
same actuator, driven by a plain loop over one JobManager instead of the core's
control loop. Each tick it asks the collector for an observation of the job it
follows, hands it with the job's memory to
:func:`~kubesage.adapters.flink.loop_scaling.scaling_step` (the pure
:func:`~kubesage.adapters.flink.autoscaler.decide` with its guard rails; a rescale is
noticed on the next observation, when the parallelism has changed), rescales in place
unless ``dry_run`` through
:class:`~kubesage.adapters.flink.loop_rescale.FlinkRescaleActuator`, and reports the
decision and the outcome. A ``FlinkError`` never ends the loop: it is logged, counted
and the next tick tries again.

With ``flink_deployment`` (a job run by the Flink Kubernetes Operator) a decision is
applied by patching that FlinkDeployment instead
(:class:`~kubesage.adapters.flink.operator_patch.FlinkDeploymentPatcher`); the
observations still come over REST. The operator upgrades the job, so the new
parallelism shows up on a later observation: until it does, or ``rescale_timeout_s``
has passed (a failed rescale), the patch is pending and nothing is patched again. A
dry run hands on the patch it would send and sends nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubesage.adapters.flink.autoscaler import AutoscalerSettings, ScalingDecision
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.adapters.flink.demand_forecast import DemandForecast
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.loop_rescale import FlinkRescaleActuator
from kubesage.adapters.flink.loop_scaling import JobScaling, rescale_action, scaling_step
from kubesage.adapters.flink.operator_patch import (
    FlinkDeploymentPatcher,
    FlinkDeploymentRef,
    PatchOutcome,
)
from kubesage.adapters.flink.rescale import RescaleOutcome
from kubesage.core.errors import InputError
from kubesage.core.loop.reconciler import Outcome

log = logging.getLogger(__name__)

CLI = "flink autoscale"
"""The reconciler named on this loop's actions (the control loop's is ``flink-autoscaler``)."""


@dataclass
class LoopStats:
    ticks: int = 0
    decisions: int = 0
    rescales: int = 0
    failed_rescales: int = 0
    errors: int = 0
    last_error: str = ""
    patches: int = 0
    """FlinkDeployment patches sent (``flink_deployment``); each ends as a rescale or a
    failed one once observed or timed out."""
    patch_pending: bool = False
    """The last patch had not shown up when the loop ended."""

    def describe(self, *, patching: bool = False) -> str:
        """One line: decisions, (with ``patching``) patches, rescales, failures, errors."""
        pending = ", the last still pending" if self.patch_pending else ""
        patches = f"{self.patches} FlinkDeployment patch(es){pending}, " if patching else ""
        return (
            f"{self.decisions} decision(s), {patches}{self.rescales} rescale(s), "
            f"{self.failed_rescales} failed, {self.errors} Flink error(s)"
        )


AppliedOutcome = RescaleOutcome | PatchOutcome
"""What applying a decision did: Flink's in-place rescale, or a FlinkDeployment patch."""
DecisionCallback = Callable[[ScalingDecision, AppliedOutcome | None], None]


def _running_job(client: FlinkClient) -> str | None:
    running = [job.job_id for job in client.jobs() if job.state == "RUNNING"]
    return running[0] if len(running) == 1 else None


def run_autoscaler(
    client: FlinkClient,
    job_id: str | None,
    *,
    dry_run: bool,
    forecast: DemandForecast | None = None,
    on_decision: DecisionCallback | None = None,
    stop: threading.Event | None = None,
    settings: AutoscalerSettings | None = None,
    interval_s: float = 5.0,
    window_s: float = 20.0,
    rescale_timeout_s: float = 90.0,
    max_ticks: int | None = None,
    clock: Callable[[], float] = time.time,
    flink_deployment: FlinkDeploymentRef | None = None,
    custom_objects: Any = None,
) -> LoopStats:
    """Observe, decide and (unless ``dry_run``) rescale every ``interval_s`` until ``stop``.

    ``job_id=None`` follows the only RUNNING job. Each decision goes to ``on_decision``
    with the rescale outcome (None when nothing was applied). ``forecast`` scales ahead
    of load (:mod:`~kubesage.adapters.flink.demand_forecast`; default: reactive).
    ``flink_deployment`` rescales by patching that FlinkDeployment through
    ``custom_objects`` (a ``CustomObjectsApi``; not needed for a dry run), a patch
    pending until observed or ``rescale_timeout_s`` (see the module docstring).
    """
    stop = stop or threading.Event()
    settings = settings or AutoscalerSettings()
    forecast = forecast or DemandForecast()
    actuator = FlinkRescaleActuator(lambda url: client, timeout_s=rescale_timeout_s)
    patcher: FlinkDeploymentPatcher | None = None
    if flink_deployment is not None:
        if custom_objects is None and not dry_run:
            raise InputError(
                f"patching FlinkDeployment {flink_deployment} needs a Kubernetes client"
            )
        patcher = FlinkDeploymentPatcher(
            flink_deployment, custom_objects, timeout_s=rescale_timeout_s
        )
    scaling = JobScaling()
    stats = LoopStats()
    collector: ObservationCollector | None = None
    while not stop.is_set() and (max_ticks is None or stats.ticks < max_ticks):
        stats.ticks += 1
        try:
            target = job_id or _running_job(client)
            if target is None:
                log.info("no single RUNNING job to follow; waiting")
            else:
                if collector is None or collector.job_id != target:
                    collector = ObservationCollector(
                        client,
                        target,
                        window_s=window_s,
                        clock=clock,
                        forecaster=forecast.forecaster(interval_s),
                        forecast_horizon=forecast.horizon_steps(interval_s),
                        history_steps=forecast.history_steps(interval_s),
                    )
                    scaling = JobScaling()
                observation = collector.collect()
                settled = patcher.settle(observation) if patcher is not None else None
                decision, scaling = scaling_step(observation, scaling, settings)
                stats.decisions += 1
                outcome: AppliedOutcome | None = settled
                action = rescale_action(decision, jobmanager=client.base_url, reconciler=CLI)
                if patcher is not None:
                    patched = settled
                    if action is not None and settled is None:
                        patched = patcher.apply(decision, dry_run=dry_run)
                    if patched is not None:
                        _count(stats, patched)
                    outcome = patched
                elif action is not None and not dry_run:
                    attempt = actuator.rescale(action)
                    if attempt.outcome is None:  # Flink unreachable: an error, as any other
                        raise FlinkError(attempt.result.detail)
                    outcome = attempt.outcome
                    if attempt.result.outcome is Outcome.DONE:
                        stats.rescales += 1
                    else:
                        stats.failed_rescales += 1
                if on_decision is not None:
                    on_decision(decision, outcome)
        except FlinkError as exc:
            stats.errors += 1
            stats.last_error = str(exc)
            log.warning("autoscaler tick %d failed (%s); retrying next tick", stats.ticks, exc)
        stop.wait(interval_s)
    stats.patch_pending = patcher is not None and patcher.pending is not None
    return stats


def _count(stats: LoopStats, outcome: PatchOutcome) -> None:
    """Counts a patch's outcome: sent, then a rescale once observed, failed if refused or
    timed out."""
    if outcome.state == "patched":
        stats.patches += 1
    elif outcome.state == "done":
        stats.rescales += 1
    elif outcome.state in ("failed", "timed-out"):
        stats.failed_rescales += 1
        stats.last_error = outcome.describe()
        log.info("%s", outcome.describe())
