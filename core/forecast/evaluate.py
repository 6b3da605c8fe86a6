"""The evaluation protocol behind ``kubesage forecast eval`` and the benchmark (one cut-off).

Every model trains on the steps before the cut-off and is scored on every forecast
origin from the cut-off up to the end of the test block (the end of the data by
default), with the same windows, at each requested horizon; targets after the
test block are not scored. :mod:`kubesage.core.forecast.rolling` repeats this over
several cut-offs.

The ST-GCN's temporal part is the LSTM baseline trained the same way, so when
both are evaluated the fitted LSTM is reused as that part rather than trained
twice; the ST-GCN's training seconds include it.

With ``quantiles``, each of ``models`` (not the ablations) is also scored at those
upper quantiles (:mod:`kubesage.core.forecast.quantile_eval`: a second fit, pinball
loss, wQL and coverage under each horizon's ``quantiles`` key; its seconds under
``"<model>@q"``).

The document also says what was read and scored: ``data_start`` (the panel's first
timestamp), ``train_until``, ``test_until`` and ``test_steps``; and ``notes`` when a
model fell back (a cold start forecasts the last value under the model's name) or a
horizon is longer than the test block (its figures are null).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from kubesage.core.errors import InputError
from kubesage.core.forecast import ABLATION_NAMES, DEFAULT_HISTORY, MODEL_NAMES
from kubesage.core.forecast.forecaster import (
    NeuralForecaster,
    WindowedForecaster,
    make_forecaster,
)
from kubesage.core.forecast.graph import correlation_graph
from kubesage.core.forecast.metrics import burst_cells, mean_of, scores, undefined_wape
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.quantile import check_quantile
from kubesage.core.forecast.quantile_eval import fit_upper, score_upper
from kubesage.core.forecast.training import TrainConfig

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Evaluation:
    document: dict[str, object]
    """The JSON document of ``kubesage forecast eval --format json``."""
    graph: str
    train_seconds: dict[str, float]
    notes: dict[str, str]


def evaluate(
    panel: MetricPanel,
    until_step: int,
    *,
    test_until: int | None = None,
    horizons: Sequence[int] = (1, 5, 15),
    models: Sequence[str] = MODEL_NAMES,
    ablations: Sequence[str] = (),
    quantiles: Sequence[float] = (),
    config: TrainConfig | None = None,
    history: int = DEFAULT_HISTORY,
    train_until_label: float | None = None,
    progress: Progress | None = None,
) -> Evaluation:
    """Train on steps ``[0, until_step)``, score forecasts from origins in
    ``[until_step, test_until)`` whose targets lie in that block too."""
    end = panel.steps if test_until is None else test_until
    if not horizons or min(horizons) < 1:
        raise InputError(f"horizons must be positive, got {list(horizons)}")
    if not history < until_step < end <= panel.steps:
        raise InputError(
            f"the cut-off must leave history ({history} steps) before it and test steps after it; "
            f"it is step {until_step} of {end}"
        )
    unknown = [name for name in ablations if name not in ABLATION_NAMES]
    if unknown:
        raise InputError(f"unknown ablation(s) {unknown}; known: {', '.join(ABLATION_NAMES)}")
    for quantile in quantiles:
        check_quantile(quantile, "each of --quantiles")
    horizon = max(horizons)
    graph = correlation_graph(panel, until_step)
    origins = np.arange(until_step, end)
    truth_steps = origins[:, None] + np.arange(horizon)[None, :]
    valid = truth_steps < end
    clipped = np.minimum(truth_steps, panel.steps - 1)
    truth = panel.values[clipped]
    truth_mask = panel.mask[clipped] & valid[:, :, None, None]
    results: dict[str, dict[str, dict[str, object]]] = {}
    seconds: dict[str, float] = {}
    notes: dict[str, str] = {}
    temporal: tuple[torch.nn.Module, float] | None = None
    upper_temporal: tuple[torch.nn.Module, float] | None = None
    # The LSTM first: its fit is the ST-GCN's temporal part.
    order = sorted([*models, *ablations], key=lambda name: name != "lstm")
    for name in order:
        if progress:
            progress(f"training {name}")
        started = time.perf_counter()
        forecaster: WindowedForecaster = make_forecaster(
            name, config=config, history=history, horizon=horizon
        )
        reused = 0.0
        if isinstance(forecaster, NeuralForecaster):
            forecaster.fixed_graph = graph  # the same correlation graph for every fit
            if forecaster.kind == "stgcn" and temporal is not None:
                forecaster.temporal_from, reused = temporal
        forecaster.fit(panel, until_step)
        seconds[name] = time.perf_counter() - started + reused
        if forecaster.fallback_reason:
            notes[name] = forecaster.fallback_reason
        elif isinstance(forecaster, NeuralForecaster) and temporal is None:
            temporal = _temporal_part(forecaster, seconds[name])
        assert forecaster.normaliser is not None
        prediction = forecaster.forecast_windows(forecaster.windows_at(panel, origins))
        normalised = np.where(panel.mask, forecaster.normaliser.apply(panel.values), 0.0)
        burst = burst_cells(normalised, panel.mask)[clipped] & truth_mask
        results[name] = _score_horizons(
            prediction, truth, truth_mask, burst, horizons, panel.metrics
        )
        if quantiles and name in models:
            if progress:
                progress(f"training {name} for its quantiles")
            upper = fit_upper(
                name,
                panel,
                until_step,
                config=config,
                history=history,
                horizon=horizon,
                temporal=upper_temporal,
            )
            seconds[f"{name}@q"] = upper.seconds
            if upper.forecaster.note:
                notes[f"{name}@q"] = upper.forecaster.note
            point = upper.forecaster.point
            if (
                upper_temporal is None
                and isinstance(point, NeuralForecaster)
                and not point.fallback_reason
            ):
                upper_temporal = _temporal_part(point, upper.seconds)
            scored = score_upper(
                upper.forecaster, panel, origins, quantiles, truth, truth_mask, horizons
            )
            for h, per_quantile in scored.items():
                results[name][h]["quantiles"] = per_quantile
    undefined = {
        h: undefined_wape(truth[:, h - 1], truth_mask[:, h - 1], panel.metrics)
        for h in horizons
        if h <= end - until_step
    }
    for metric in sorted({m for names in undefined.values() for m in names}):
        at = ", ".join(str(h) for h, names in undefined.items() if metric in names)
        notes[f"wape {metric}"] = (
            f"no non-zero {metric} in the test steps (h={at}): its WAPE is undefined (null) "
            f"and the headline WAPE there averages the other metrics"
        )
    for steps_ahead in horizons:
        if steps_ahead > end - until_step:
            notes[f"h={steps_ahead}"] = (
                f"needs at least {steps_ahead} test steps and there are {end - until_step}: "
                "its figures are null"
            )
    document: dict[str, object] = {
        "train_until": train_until_label
        if train_until_label is not None
        else float(panel.start_s + until_step * panel.step_s),
        "data_start": panel.start_s,
        "test_until": float(panel.start_s + end * panel.step_s),
        "test_steps": end - until_step,
        "entities": len(panel.entities),
        "metrics": list(panel.metrics),
        "graph": graph.description,
        "models": {name: results[name] for name in models},
    }
    if ablations:
        document["ablations"] = {name: results[name] for name in ablations}
    if notes:
        document["notes"] = dict(notes)
    return Evaluation(
        document=document, graph=graph.description, train_seconds=seconds, notes=notes
    )


def _temporal_part(
    forecaster: NeuralForecaster, seconds: float
) -> tuple[torch.nn.Module, float] | None:
    """The fitted temporal part another ST-GCN may reuse, and what training it took."""
    model = forecaster.model
    if forecaster.kind == "lstm" and model is not None:
        return model, seconds
    report = forecaster.temporal_report
    temporal = getattr(model, "temporal", None)
    if isinstance(temporal, torch.nn.Module) and report is not None:
        return temporal, report.seconds
    return None


def _score_horizons(
    prediction: np.ndarray,
    truth: np.ndarray,
    mask: np.ndarray,
    burst: np.ndarray,
    horizons: Sequence[int],
    metrics: Sequence[str],
) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for h in horizons:
        per_metric = {
            metric: scores(prediction[:, h - 1, :, m], truth[:, h - 1, :, m], mask[:, h - 1, :, m])
            for m, metric in enumerate(metrics)
        }
        burst_metric = {
            metric: scores(prediction[:, h - 1, :, m], truth[:, h - 1, :, m], burst[:, h - 1, :, m])
            for m, metric in enumerate(metrics)
        }
        out[str(h)] = {
            "wape": mean_of([v["wape"] for v in per_metric.values()]),
            "mape_nonzero": mean_of([v["mape_nonzero"] for v in per_metric.values()]),
            "smape": mean_of([v["smape"] for v in per_metric.values()]),
            "per_metric": per_metric,
            "burst": {
                "wape": mean_of([v["wape"] for v in burst_metric.values()]),
                "smape": mean_of([v["smape"] for v in burst_metric.values()]),
                "cells": int(burst[:, h - 1].sum()),
            },
        }
    return out
