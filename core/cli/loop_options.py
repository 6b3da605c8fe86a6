"""The control loop's command-line options, shared by ``kubesage serve`` and ``kubesage loop``.

Each is an ``Annotated`` type (its flag and help written once); :func:`loop_settings`
checks the values and makes the :class:`~kubesage.core.loop.settings.LoopSettings`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from kubesage.core.cli.options import prometheus_url
from kubesage.core.errors import InputError
from kubesage.core.loop.actions import ActionKind
from kubesage.core.loop.budgets import Budgets
from kubesage.core.loop.settings import DEFAULT_MAX_DATA_AGE_S, DEFAULT_TICK_S, LoopSettings

TickOption = Annotated[float, typer.Option("--tick-s", help="Seconds between control-loop ticks.")]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="The control loop decides and audits but acts on nothing.")
]
AuditLogOption = Annotated[
    Path | None,
    typer.Option("--audit-log", help="Append the loop's audit records (JSON lines) here."),
]
MaxEvictionsOption = Annotated[
    int | None,
    typer.Option("--max-evictions-per-tick", help="The loop's eviction budget per tick (0: none)."),
]
TopologyOption = Annotated[
    str | None,
    typer.Option(
        "--topology",
        help="Topology YAML (or a shipped example's name) naming the cluster's nodes: "
        "the loop's DRTG, used by gang placement.",
    ),
]
PrometheusOption = Annotated[
    str | None,
    typer.Option(
        "--prometheus",
        help="Prometheus URL: node and GPU metrics feed the loop's forecasts.",
    ),
]
ForecastWeightOption = Annotated[
    float,
    typer.Option(
        "--forecast-weight",
        help="Weight of forecast GPU load in placing GPU-sharing pods (0: off).",
    ),
]

ForecastModelOption = Annotated[
    Path | None,
    typer.Option(
        "--forecast-model",
        help="Model file of `kubesage forecast train --prometheus` (trained at the loop's "
        "tick): the loop's forecasts (default: the last value).",
    ),
]

MigConfigMapOption = Annotated[
    str | None,
    typer.Option(
        "--mig-config-map",
        help="NAMESPACE/NAME of the ConfigMap the GPU Operator's MIG Manager reads "
        "(ClusterPolicy spec.migManager.config.name): MIG re-layouts publish their "
        "mig-parted config there before labelling the node.",
    ),
]


def loop_settings(
    *,
    tick_s: float = DEFAULT_TICK_S,
    dry_run: bool = False,
    audit_log: Path | None = None,
    max_evictions_per_tick: int | None = None,
    max_data_age_s: float | None = DEFAULT_MAX_DATA_AGE_S,
    topology: str | None = None,
    prometheus: str | None = None,
    metric_map: Path | None = None,
    forecast_weight: float = 0.0,
    forecast_model: Path | None = None,
    mig_config_map: str | None = None,
) -> LoopSettings:
    """The settings from the options (the eviction budget defaults to Budgets')."""
    if not tick_s > 0 or not math.isfinite(tick_s):
        raise InputError(f"--tick-s must be a positive number of seconds, got {tick_s}")
    if max_evictions_per_tick is not None and max_evictions_per_tick < 0:
        raise InputError(
            f"--max-evictions-per-tick must be 0 or more, got {max_evictions_per_tick}"
        )
    if not 0.0 <= forecast_weight <= 1.0:
        raise InputError(f"--forecast-weight must be in [0, 1], got {forecast_weight}")
    if forecast_model is not None and not forecast_model.is_file():
        raise InputError(f"--forecast-model {forecast_model}: no such file")
    if audit_log is not None and (audit_log.is_dir() or not audit_log.parent.is_dir()):
        problem = "is a directory" if audit_log.is_dir() else "its folder does not exist"
        raise InputError(f"--audit-log {audit_log}: cannot append to it: {problem}")
    if prometheus is not None:
        prometheus = prometheus_url(prometheus)
    if metric_map is not None:
        if prometheus is None:
            raise InputError("--metric-map goes with --prometheus (the map says what to query)")
        from kubesage.core.telemetry.metric_map import load_metric_map

        load_metric_map(metric_map)  # a ConfigError naming the file and field
    if mig_config_map is not None:
        # Here, not at the top: the kubernetes client takes seconds to import, and every
        # command (and every spawned simulation worker) would pay for it.
        from kubesage.core.k8s.mig_config_map import MigConfigMap

        MigConfigMap.parse(mig_config_map)  # InputError naming the option
    budgets = Budgets()
    if max_evictions_per_tick is not None:
        budgets = budgets.with_limit(ActionKind.EVICT, max_evictions_per_tick)
    return LoopSettings(
        tick_s=tick_s,
        dry_run=dry_run,
        max_data_age_s=max_data_age_s,
        budgets=budgets,
        audit_log=audit_log,
        topology=topology,
        prometheus=prometheus,
        metric_map=metric_map,
        forecast_weight=forecast_weight,
        forecast_model=forecast_model,
        mig_config_map=mig_config_map,
    )
