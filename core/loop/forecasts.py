"""The rolling forecast panel: per-node and per-pod metrics, ``h`` steps ahead.

The world model feeds the panel every metric sample it finds in the tick's snapshots
(one value per entity — a node or pod name — and metric). Reconcilers read it through
the :class:`~kubesage.core.loop.view.Forecasts` protocol. Until a trained forecaster is
plugged in (:meth:`ForecastPanel.use`), it predicts the last value seen — the cold
start, reported as ``source == "last-value"`` in ``/healthz``, ``/debug/loop`` and
the audit log. A forecaster (an ST-GCN file, say) is asked once per tick over the
rolling history of the series it knows, laid on the loop's ticks (a tick without a
sample is NaN), and may answer for some series only; the rest keep the last value.

Telemetry that stops (an exporter that died, a node gone) expires: a series with no
sample in its last ``stale_steps`` ticks (:data:`DEFAULT_STALE_STEPS`, a minute at the
default 5 s tick — the loop's default data age) forecasts nothing (``predict`` returns
None, which readers take as "no forecast"), and one with no sample in its last
``forget_steps`` ticks (by default its whole rolling history) is dropped.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from kubesage.core.arrays import FloatArray

LAST_VALUE = "last-value"
GPU_UTIL_METRIC = "dcgm.gpu_util_percent.gpu{gpu}"
"""The metric map's per-GPU utilisation column (percent, 0–100) of a node, by GPU index
(``configs/metric-map.yaml``: source ``dcgm``, metric ``gpu_util_percent``); NVML's
readings go under the same name."""
DEFAULT_HISTORY = 64
"""Samples kept per series (at the default 5 s tick: about five minutes)."""
DEFAULT_STALE_STEPS = 12
"""Ticks a series' last sample is forecast from (at the default 5 s tick: a minute, the
loop's default ``max_data_age_s``); after that, no forecast."""

Series = tuple[str, str]
"""(entity, metric)."""


class _Samples:
    """A series' latest samples, oldest first: the tick of each, and its value (apart, so
    that the values are handed on as one copy)."""

    __slots__ = ("ticks", "values")

    def __init__(self, length: int) -> None:
        self.ticks: deque[int] = deque(maxlen=length)
        self.values: deque[float] = deque(maxlen=length)


@runtime_checkable
class MetricTable(Protocol):
    """A table of samples per node: ``values[n, c]`` for ``nodes[n]`` and ``columns[c]``
    (NaN: no sample). The telemetry layer's ``NodeMetrics`` has this shape."""

    @property
    def nodes(self) -> tuple[str, ...]: ...

    @property
    def columns(self) -> tuple[str, ...]: ...

    @property
    def values(self) -> FloatArray: ...


@runtime_checkable
class MetricSamples(Protocol):
    """Any snapshot data that lists its samples as (entity, metric, value)."""

    def metric_samples(self) -> Iterable[tuple[str, str, float]]: ...


class TrainedForecaster(Protocol):
    """A forecaster the panel can use instead of the last value."""

    @property
    def name(self) -> str:
        """What ``Forecasts.source`` reports (e.g. ``stgcn``)."""
        ...

    def knows(self, series: Series) -> bool:
        """Whether it forecasts this series (the panel hands it only those)."""
        ...

    def forecast(
        self, history: Mapping[Series, Sequence[float]], horizon_steps: int, first_tick: int = 0
    ) -> Mapping[Series, float]:
        """Predictions ``horizon_steps`` ahead for the series it can forecast. ``history``
        holds one value per tick for the same recent ticks for every series, the current
        tick last; NaN where a series had no sample (a gap is a gap, not a shorter series).
        ``first_tick``: the tick of the first of them, on the panel's own count, so that
        successive calls can tell where each history lies once the window is full (its
        length then stays the same while it moves)."""
        ...


class ForecastPanel:
    """Rolling history per (entity, metric) and this tick's predictions."""

    def __init__(
        self,
        *,
        horizon_steps: int = 1,
        history: int = DEFAULT_HISTORY,
        stale_steps: int = DEFAULT_STALE_STEPS,
        forget_steps: int | None = None,
    ) -> None:
        """``stale_steps``: a series whose last sample is that many ticks old or older
        forecasts nothing; ``forget_steps`` (None: ``max(history, stale_steps)``): one
        whose last sample is that old is dropped (module docstring)."""
        if horizon_steps < 1:
            raise ValueError(f"horizon_steps must be at least 1, got {horizon_steps}")
        if stale_steps < 1:
            raise ValueError(f"stale_steps must be at least 1, got {stale_steps}")
        forget = max(history, stale_steps) if forget_steps is None else forget_steps
        if forget < stale_steps:
            raise ValueError(f"forget_steps ({forget}) must be at least stale_steps")
        self._horizon = horizon_steps
        self._history_len = history
        self._stale = stale_steps
        self._forget = forget
        self._history: dict[Series, _Samples] = {}
        """Per series, its latest samples and the tick of each."""
        self._tick = 0
        """The tick the samples observed now belong to (:meth:`refresh` ends it)."""
        self._predicted: dict[Series, float] = {}
        self._forecaster: TrainedForecaster | None = None
        self.version = 0
        """Counts refreshes (and forecaster changes): what a cache of predictions keys on."""

    # -- the Forecasts protocol ---------------------------------------------------------

    @property
    def source(self) -> str:
        return self._forecaster.name if self._forecaster is not None else LAST_VALUE

    @property
    def horizon_steps(self) -> int:
        return self._horizon

    def predict(self, entity: str, metric: str) -> float | None:
        """The forecast, or None: the series is unknown, or its last sample is
        ``stale_steps`` ticks old or older (stale telemetry forecasts nothing)."""
        series = (entity, metric)
        samples = self._history.get(series)
        if not samples or not samples.ticks or self._age(samples.ticks[-1]) >= self._stale:
            return None
        if series in self._predicted:
            return self._predicted[series]
        return samples.values[-1]

    def _age(self, tick: int) -> int:
        """Ticks since ``tick``, as predictions (made after :meth:`refresh`) see it: 0 for
        a sample of the tick just ended (or of the one under way)."""
        return max(0, self._tick - 1 - tick)

    # -- feeding ------------------------------------------------------------------------

    @property
    def cold_start(self) -> bool:
        """True while no trained forecaster is plugged in."""
        return self._forecaster is None

    def use(self, forecaster: TrainedForecaster | None) -> None:
        """Plug in a trained forecaster (None: back to the last value)."""
        self._forecaster = forecaster
        self._predicted = {}
        self.version += 1

    def observe(self, entity: str, metric: str, value: float) -> None:
        """One sample of ``metric`` for ``entity`` (NaN and infinities are ignored)."""
        if not math.isfinite(value):
            return
        series = (entity, metric)
        samples = self._history.get(series)
        if samples is None:
            samples = self._history[series] = _Samples(self._history_len)
        if samples.ticks and samples.ticks[-1] == self._tick:
            samples.ticks.pop()  # a second sample in one tick replaces the first
            samples.values.pop()
        samples.ticks.append(self._tick)
        samples.values.append(float(value))

    def observe_table(self, table: MetricTable) -> None:
        """Every sample of a per-node table."""
        for n, node in enumerate(table.nodes):
            for c, column in enumerate(table.columns):
                self.observe(node, column, float(table.values[n, c]))

    def refresh(self) -> None:
        """Ask the forecaster (if any) for this tick's predictions; keep the last values
        for what it does not answer."""
        self.version += 1
        tick, self._tick = self._tick, self._tick + 1
        if tick % self._stale == 0:  # a pass over every series, now and then
            self._drop_forgotten()
        if self._forecaster is None:
            self._predicted = {}
            return
        self._predicted = {}  # cleared first: a forecaster that raises leaves last values
        history, first = self._on_ticks(tick, self._forecaster)
        self._predicted = dict(self._forecaster.forecast(history, self._horizon, first))

    def _drop_forgotten(self) -> None:
        """Drop the series whose last sample is ``forget_steps`` ticks old or older (run
        every ``stale_steps`` ticks: a series goes at most that many ticks late)."""
        forgotten = [
            series
            for series, samples in self._history.items()
            if self._age(samples.ticks[-1]) >= self._forget
        ]
        for series in forgotten:
            del self._history[series]

    def _on_ticks(
        self, tick: int, forecaster: TrainedForecaster
    ) -> tuple[dict[Series, tuple[float, ...]], int]:
        """The series ``forecaster`` knows over the last ticks up to ``tick`` (NaN: no
        sample that tick), and the first of those ticks."""
        length = min(self._history_len, tick + 1)
        first = tick - length + 1
        out: dict[Series, tuple[float, ...]] = {}
        for series, samples in self._history.items():
            if not forecaster.knows(series):
                continue
            ticks = samples.ticks
            if len(ticks) == length and ticks[0] == first:  # no gap: the usual case
                out[series] = tuple(samples.values)
                continue
            row = [math.nan] * length
            for at, value in zip(ticks, samples.values, strict=True):
                if at >= first:
                    row[at - first] = value
            out[series] = tuple(row)
        return out, first

    @property
    def answered(self) -> int:
        """Series the forecaster answered for at the last refresh (the rest: last value)."""
        return len(self._predicted)

    @property
    def seen(self) -> int:
        """Series with samples (those not yet dropped)."""
        return len(self._history)

    def series(self) -> list[Series]:
        """The (entity, metric) pairs seen so far."""
        return sorted(self._history)
