"""The autoscaler's control loop: measure, decide, rescale, report — every tick.

Each tick the loop asks the collector for an observation of the job it follows,
hands it with the guard rails' memory to the pure decision
(:func:`~kubesage.adapters.flink.autoscaler.decide`), rescales in place unless
``dry_run`` (:func:`~kubesage.adapters.flink.rescale.rescale_in_place`), and reports
the decision and the outcome. A ``FlinkError`` never ends the loop: it is logged,
counted and the next tick tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubesage.adapters.flink.autoscaler import (
    AutoscalerSettings,
    GuardRailMemory,
    ScalingDecision,
    decide,
)
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.rescale import RescaleOutcome, rescale_in_place

if TYPE_CHECKING:
    from kubesage.core.forecast.forecaster import Forecaster

log = logging.getLogger(__name__)


@dataclass
class LoopStats:
    ticks: int = 0
    decisions: int = 0
    rescales: int = 0
    failed_rescales: int = 0
    errors: int = 0
    last_error: str = ""


DecisionCallback = Callable[[ScalingDecision, RescaleOutcome | None], None]


def _running_job(client: FlinkClient) -> str | None:
    running = [job.job_id for job in client.jobs() if job.state == "RUNNING"]
    return running[0] if len(running) == 1 else None


def run_autoscaler(
    client: FlinkClient,
    job_id: str | None,
    *,
    dry_run: bool,
    forecaster: Forecaster | None = None,
    on_decision: DecisionCallback | None = None,
    stop: threading.Event | None = None,
    settings: AutoscalerSettings | None = None,
    interval_s: float = 5.0,
    window_s: float = 20.0,
    rescale_timeout_s: float = 90.0,
    max_ticks: int | None = None,
    clock: Callable[[], float] = time.time,
) -> LoopStats:
    """Observe, decide and (unless ``dry_run``) rescale every ``interval_s`` until ``stop``.

    ``job_id=None`` follows the only RUNNING job. Each decision goes to ``on_decision``
    with the rescale outcome (None when nothing was applied).
    """
    stop = stop or threading.Event()
    settings = settings or AutoscalerSettings()
    memory = GuardRailMemory()
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
                        client, target, window_s=window_s, clock=clock, forecaster=forecaster
                    )
                decision, memory = decide(collector.collect(), memory, settings)
                stats.decisions += 1
                outcome = None
                if decision.action == "rescale" and not dry_run:
                    outcome = rescale_in_place(
                        client, target, decision.changes, timeout_s=rescale_timeout_s
                    )
                    if outcome.succeeded:
                        stats.rescales += 1
                        old = {v.vertex_id: v.current for v in decision.vertices}
                        memory = memory.after_rescale(clock(), old, decision.changes)
                    else:
                        stats.failed_rescales += 1
                if on_decision is not None:
                    on_decision(decision, outcome)
        except FlinkError as exc:
            stats.errors += 1
            stats.last_error = str(exc)
            log.warning("autoscaler tick %d failed (%s); retrying next tick", stats.ticks, exc)
        stop.wait(interval_s)
    return stats
