"""``flink_autoscale.py --scenario ramp``: reactive against forecast-driven scaling, measured.

Sets up the experiment of ``ramp_harness.py`` on a local cluster: two copies of the
sample job with the same rate schedule and start time, one loop without a forecaster
and one with, the same autoscaler settings; ``--repeats`` runs it again and reports
medians. The lead time is the collector's forecast horizon (in 5 s ticks): the
demand it measures trails the schedule by half its 20 s window, a change must be
proposed by two observations in a row (one more tick) and an in-place rescale takes
10–15 s here before the new subtasks run — about 30 s in all, the default.

``--periods N`` (default 3) plays the schedule N times in a row and measures the last
period only: the earlier ones are the history a ``--forecaster seasonal`` (the default)
reads the curve from (its period: ``--season-s``, by default the schedule's length).
``--forecaster trend --periods 1`` is a load seen once, forecast from its last minute.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubesage.adapters.flink.autoscaler import AutoscalerSettings
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.demand_forecast import DemandForecast

from .cluster import LocalFlinkCluster
from .ramp_harness import PolicyRun, run_side_by_side
from .rate_schedule import RateSchedule, parse_schedule
from .samples import SAMPLE_JOB

if TYPE_CHECKING:
    from kubesage.core.forecast.forecaster import Forecaster

log = logging.getLogger(__name__)

SOURCE, SLOW = "Source: sequence -> pace", "slow"
TICK_S = 5.0
POLICIES = ("reactive", "predictive")
FIGURES = ("backpressured_s", "max_lag_records", "rescales", "slot_seconds")
SLOT_SECONDS_ALLOWANCE = 1.10
"""The goal: predictive has less backpressure and lag for ≤ 10 % more slot-seconds."""


@dataclass(frozen=True)
class RampOptions:
    schedule: str = "daily"
    schedule_duration_s: float | None = None
    peak_rate: float = 40.0
    capacity: float = 20.0
    forecaster: str = "seasonal"
    forecast_horizon_s: float = 30.0
    forecast_window_s: float = 60.0
    forecast_min_t: float = 2.0
    """The trend's slope must be this many standard errors from 0 (else: flat)."""
    repeats: int = 1
    periods: int = 3
    """The schedule this many times back to back; figures are over the last (the earlier
    ones are the history a seasonal forecaster reads its curve from)."""
    season_s: float | None = None
    """The seasonal forecaster's period (default: the schedule's length)."""
    slots_per_job: int = 6
    lead_s: float = 90.0
    """Seconds from submitting the jobs to the schedule's start (the jobs start and settle)."""

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ramp = parser.add_argument_group("--scenario ramp")
        ramp.add_argument("--schedule", default="daily", help="daily, ramp or T:R,T:R,…")
        ramp.add_argument(
            "--schedule-duration-s", type=float, default=None, help="length of a named schedule"
        )
        ramp.add_argument(
            "--forecaster",
            choices=["trend", "linear", "seasonal"],
            default="seasonal",
            help="seasonal: the period before, re-levelled (default); trend: the last minute",
        )
        ramp.add_argument("--forecast-horizon-s", type=float, default=30.0)
        ramp.add_argument(
            "--forecast-window-s", type=float, default=60.0, help="history the trend is fitted on"
        )
        ramp.add_argument(
            "--forecast-min-t",
            type=float,
            default=2.0,
            help="a trend slope within this many standard errors of 0 is taken as flat",
        )
        ramp.add_argument("--repeats", type=int, default=1)
        ramp.add_argument(
            "--periods",
            type=int,
            default=3,
            help="the schedule this many times in a row; figures over the last (default 3)",
        )
        ramp.add_argument(
            "--season-s",
            type=float,
            default=None,
            help="the seasonal forecaster's period (default: the schedule's length)",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RampOptions:
        return cls(
            schedule=args.schedule,
            schedule_duration_s=args.schedule_duration_s,
            peak_rate=args.rate,
            capacity=args.capacity,
            forecaster=args.forecaster,
            forecast_horizon_s=args.forecast_horizon_s,
            forecast_window_s=args.forecast_window_s,
            forecast_min_t=args.forecast_min_t,
            repeats=max(1, args.repeats),
            periods=max(1, args.periods),
            season_s=args.season_s,
            slots_per_job=args.slots,
        )

    def period_schedule(self) -> RateSchedule:
        """One period of the schedule (what the figures are measured over)."""
        return parse_schedule(
            self.schedule, peak_rate=self.peak_rate, duration_s=self.schedule_duration_s
        )

    def rate_schedule(self) -> RateSchedule:
        """The whole schedule the jobs follow: ``periods`` periods."""
        return self.period_schedule().repeated(self.periods)

    @property
    def horizon_steps(self) -> int:
        return max(1, math.ceil(self.forecast_horizon_s / TICK_S - 1e-9))

    def make_forecaster(self) -> Forecaster:
        if self.forecaster == "linear":
            from kubesage.core.forecast.forecaster import make_forecaster

            window = max(2, round(self.forecast_window_s / TICK_S))
            return make_forecaster("linear", history=window, horizon=self.horizon_steps)
        season_s = None
        if self.forecaster == "seasonal":
            season_s = self.season_s or self.period_schedule().duration_s
        forecast = DemandForecast(
            self.forecaster,
            horizon_s=self.forecast_horizon_s,
            season_s=season_s,
            trend_window_s=self.forecast_window_s,
            trend_min_t=self.forecast_min_t,
        )
        forecaster = forecast.forecaster(TICK_S)
        assert forecaster is not None
        return forecaster


SETTINGS = AutoscalerSettings(
    exclude=frozenset({SOURCE}), scale_down_delay_s=30.0, oscillation_window_s=60.0
)
"""The same for both policies: the defaults, with scale-downs possible within minutes."""


def schedule_args(options: RampOptions, start_s: float, name: str) -> list[str]:
    """The sample job's arguments for one copy: record 0 at ``start_s``, the schedule
    after ``options.lead_s`` at its first rate (the jobs start and settle meanwhile)."""
    schedule = options.rate_schedule().delayed(options.lead_s)
    arguments = ["--rate", f"{options.peak_rate:g}", "--capacity", f"{options.capacity:g}"]
    arguments += ["--rate-schedule", schedule.spec(), "--start-time", f"{start_s:.3f}"]
    return [*arguments, "--name", name]


def run_once(options: RampOptions, cluster: LocalFlinkCluster, attempt: int) -> dict[str, Any]:
    """Both policies once, side by side; each policy's figures over the schedule.

    Record 0 is due as the jobs are submitted, so that the demand each collector sees
    is the schedule's from the start: a source idle until its first record would
    look like a ramp from 0 to a forecaster.
    """
    period = options.period_schedule()
    job_start_s = time.time()
    start_s = job_start_s + options.lead_s
    measured_from_s = start_s + (options.periods - 1) * period.duration_s
    job_ids: dict[str, str] = {}

    def submit(policy: str) -> None:
        job_ids[policy] = cluster.submit_python(
            SAMPLE_JOB,
            schedule_args(options, job_start_s, f"ramp-{policy}-{attempt}"),
            parallelism=1,
        )

    submitters = [threading.Thread(target=submit, args=(policy,)) for policy in POLICIES]
    for thread in submitters:
        thread.start()
    for thread in submitters:
        thread.join()
    runs: list[PolicyRun] = []
    try:
        if set(job_ids) != set(POLICIES):
            raise RuntimeError(f"submitted only {sorted(job_ids)}")
        log.info("jobs %s submitted; schedule starts in %.0f s", job_ids, start_s - time.time())
        runs = [
            PolicyRun(
                name=policy,
                rest_url=cluster.rest_url,
                job_id=job_ids[policy],
                source=SOURCE,
                bottleneck=SLOW,
                settings=SETTINGS,
                start_s=measured_from_s,
                end_s=measured_from_s + period.duration_s,
                forecaster=options.make_forecaster() if policy == "predictive" else None,
                forecast_horizon=options.horizon_steps,
                tick_s=TICK_S,
                demand_at=period.rate_at,
            )
            for policy in POLICIES
        ]
        run_side_by_side(runs)
    finally:
        with FlinkClient(cluster.rest_url) as client:
            for job_id in job_ids.values():
                try:
                    client.cancel(job_id)
                except Exception as exc:  # every job gets its cancel
                    log.warning("cancel %s failed: %s", job_id, exc)
    return {run.name: run.result() for run in runs}


def run_ramp(options: RampOptions) -> dict[str, Any]:
    schedule = options.period_schedule()
    attempts: list[dict[str, Any]] = []
    with LocalFlinkCluster(task_slots=2 * options.slots_per_job) as cluster:
        for attempt in range(options.repeats):
            log.info("repeat %d of %d", attempt + 1, options.repeats)
            attempts.append(run_once(options, cluster, attempt))
    result: dict[str, Any] = {
        "scenario": "ramp",
        "schedule": options.schedule,
        "schedule_points": [[round(t, 1), round(r, 1)] for t, r in schedule.points],
        "capacity": options.capacity,
        "ideal_parallelism_peak": math.ceil(
            schedule.peak_rate / (options.capacity * SETTINGS.target_utilisation) - 1e-9
        ),
        "forecaster": options.forecaster,
        "forecast_horizon_s": options.horizon_steps * TICK_S,
        "forecast_window_s": options.forecast_window_s,
        "forecast_min_t": options.forecast_min_t,
        "repeats": options.repeats,
        "periods": options.periods,
    }
    for policy in POLICIES:
        result[policy] = _medians([attempt[policy] for attempt in attempts])
    result |= compare(result["reactive"], result["predictive"])
    result["runs"] = attempts
    return result


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each numeric figure over the runs (and the rescales of a single run)."""
    figures: dict[str, Any] = {
        key: statistics.median(run[key] for run in runs)
        for key, value in runs[0].items()
        if isinstance(value, int | float)
    }
    if len(runs) == 1:
        figures["rescale_log"] = runs[0]["rescale_log"]
    return figures


def compare(reactive: dict[str, Any], predictive: dict[str, Any]) -> dict[str, Any]:
    """Predictive over reactive, and whether the goal is met."""
    ratio = {
        key: round(predictive[key] / reactive[key], 3) if reactive[key] else None
        for key in ("backpressured_s", "max_lag_records", "slot_seconds")
    }
    met = (
        predictive["backpressured_s"] < reactive["backpressured_s"]
        and predictive["max_lag_records"] < reactive["max_lag_records"]
        and predictive["slot_seconds"] <= SLOT_SECONDS_ALLOWANCE * reactive["slot_seconds"]
    )
    return {"predictive_over_reactive": ratio, "goal_met": met}
