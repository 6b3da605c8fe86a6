"""The Forecaster extension point and its implementations.

``Forecaster`` is what the Flink autoscaler and the placement policies call:
``fit`` on a panel's history up to a step, ``predict(history, horizon)`` for the
next steps in each metric's own units. Baselines (last value, moving average,
linear) and neural models (ST-GCN, LSTM) all satisfy it.

Cold start: a neural forecaster with too little history to train on, or asked
to predict from fewer steps than its input window, falls back to the last-value
baseline and says so in ``Forecast.note`` (and in ``fallback_reason``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, get_args, runtime_checkable

import numpy as np
import torch

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import InputError
from kubesage.core.forecast import (
    ABLATION_NAMES,
    DEFAULT_HISTORY,
    DEFAULT_HORIZON,
    MODEL_NAMES,
    baselines,
)
from kubesage.core.forecast.anchor import ANCHOR_STEPS
from kubesage.core.forecast.graph import EntityGraph, correlation_graph
from kubesage.core.forecast.highway import (
    RECENT_ORIGINS,
    BlendSet,
    LinearHighway,
    Made,
    NeuralPredict,
)
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.stgcn import STGCN, LSTMBaseline, Spatial
from kubesage.core.forecast.training import (
    ProgressCallback,
    TrainConfig,
    TrainReport,
    predict_windows,
    split,
    train,
    train_residual,
)
from kubesage.core.forecast.windows import (
    MAX_WINDOW_SERIES,
    Normaliser,
    Windows,
    make_windows,
    thinned_origins,
)

NeuralKind = Literal["stgcn", "lstm"]
BaselineKind = Literal["last_value", "moving_average", "moving_median", "linear", "linear_lad"]
ABLATION_PARTS: dict[str, tuple[Spatial, bool, BlendSet]] = {
    "stgcn_temporal": ("none", False, "floored"),
    "stgcn_no_adaptive": ("correlation", True, "floored"),
    "stgcn_no_correlation": ("adaptive", True, "floored"),
    "stgcn_no_highway": ("both", False, "floored"),
    "stgcn_no_floor": ("both", True, "convex"),
    "stgcn_no_neural": ("none", True, "linear"),
}
"""The ST-GCN ablations (see ABLATION_NAMES) by the graphs their spatial part keeps,
whether they keep the linear highway and the blends it chooses among (the blends are
moot without it)."""

MIN_TRAINING_WINDOWS = 16
"""Windows needed beyond the ``horizon − 1`` left out between training and validation."""


@dataclass(frozen=True)
class Forecast:
    """Point forecasts ``values[h, n, m]`` for the ``h+1``-th step after the history."""

    values: FloatArray
    model: str
    note: str = ""


@runtime_checkable
class Forecaster(Protocol):
    @property
    def name(self) -> str: ...

    def fit(self, panel: MetricPanel, until_step: int) -> None:
        """Learn from steps before ``until_step``."""
        ...

    def predict(self, history: MetricPanel, horizon: int) -> Forecast:
        """Forecast the ``horizon`` steps after the end of ``history``."""
        ...


def observed_windows(panel: MetricPanel, origins: IntArray, history: int, horizon: int) -> int:
    """How many of the windows at ``origins`` hold at least one observed input cell and
    one observed target cell: what a model can learn from (a grid that starts at a stray
    early row, or a cut-off right after an outage, has windows with neither)."""
    if origins.size == 0:
        return 0
    observed = panel.mask.any(axis=(1, 2)).astype(np.int64)
    seen = np.concatenate([[0], np.cumsum(observed)])  # seen[k]: observed steps before k
    inputs = seen[origins] - seen[origins - history]
    targets = seen[np.minimum(origins + horizon, panel.steps)] - seen[origins]
    return int(np.count_nonzero((inputs > 0) & (targets > 0)))


@dataclass
class WindowedForecaster:
    """Common state: normalisation, window sizes, and the training/test windows."""

    history: int = DEFAULT_HISTORY
    horizon: int = DEFAULT_HORIZON
    normaliser: Normaliser | None = None
    fallback_reason: str = ""
    max_window_series: int = MAX_WINDOW_SERIES
    """Training windows × entities at most; more origins are thinned evenly."""
    training_note: str = ""
    """How the training windows were thinned, when they were (empty otherwise)."""
    training_windows: int = 0
    """Windows the last fit trained on (0 on a cold start)."""

    def _training_windows(self, panel: MetricPanel, until_step: int) -> Windows | None:
        self.normaliser = Normaliser.fit(panel, until_step)
        origins = np.arange(self.history, until_step - self.horizon + 1)
        needed = MIN_TRAINING_WINDOWS + self.horizon
        self.training_note, self.training_windows = "", 0
        if origins.size < needed:
            self.fallback_reason = (
                f"cold start: {until_step} steps of history give {max(origins.size, 0)} training "
                f"windows, need {needed} (history {self.history}, horizon {self.horizon}); "
                "using last_value"
            )
            return None
        usable = observed_windows(panel, origins, self.history, self.horizon)
        if usable < needed:
            self.fallback_reason = (
                f"cold start: of the {origins.size} training windows before step {until_step}, "
                f"{usable} hold an observed input and an observed target, need {needed} "
                f"(history {self.history}, horizon {self.horizon}: no entity reported in most "
                "of the training steps); using last_value"
            )
            return None
        self.fallback_reason = ""
        entities = len(panel.entities)
        kept = thinned_origins(origins, entities, self.max_window_series, needed)
        self.training_windows = int(kept.size)
        self.training_note = (
            ""
            if kept.size == origins.size
            else f"trained on {kept.size:,} of {origins.size:,} windows, evenly spaced, so "
            f"that windows × {entities:,} entities stays within {self.max_window_series:,}"
        )
        return make_windows(
            panel, self.normaliser, kept, history=self.history, horizon=self.horizon
        )

    @property
    def context(self) -> int:
        """Input steps a window must hold for this model's forecast: its ``history``, and
        for an ST-GCN whose highway chooses its weights online, what that looks back."""
        return self.history

    def windows_at(self, panel: MetricPanel, origins: IntArray) -> Windows:
        """Windows of :attr:`context` steps for forecasts from ``origins`` of ``panel``
        (after :meth:`fit`); steps before the panel's start count as unobserved."""
        assert self.normaliser is not None
        origins = np.asarray(origins, dtype=np.int64)
        missing = int(max(0, self.context - origins.min())) if origins.size else 0
        if missing:
            panel, origins = _pad_front(panel, panel.steps + missing), origins + missing
        return make_windows(
            panel, self.normaliser, origins, history=self.context, horizon=self.horizon
        )

    def _window_at_end(self, history: MetricPanel) -> Windows:
        return self.windows_at(history, np.array([history.steps]))

    @property
    def name(self) -> str:
        """The model name (each model defines it)."""
        raise NotImplementedError

    def fit(self, panel: MetricPanel, until_step: int) -> None:
        """Learn from steps before ``until_step`` (each model defines it)."""
        raise NotImplementedError

    def _predict_normalised(self, windows: Windows) -> FloatArray:
        raise NotImplementedError

    def forecast_windows(self, windows: Windows) -> FloatArray:
        """Forecasts in each metric's units for prepared windows ``(B, H, N, M)``."""
        assert self.normaliser is not None
        if self.fallback_reason:
            normalised = baselines.last_value(windows, self.horizon)
        else:
            normalised = self._predict_normalised(windows)
        return np.asarray(self.normaliser.invert(normalised))

    def predict(self, history: MetricPanel, horizon: int) -> Forecast:
        if self.normaliser is None:
            raise InputError("predict() before fit()")
        if horizon > self.horizon:
            raise InputError(f"horizon {horizon} is beyond the trained horizon {self.horizon}")
        name = self.name
        if history.steps < self.history:
            values = np.asarray(
                self.normaliser.invert(baselines.last_value(self._window_at_end(history), horizon))
            )
            return Forecast(
                values=values[0],
                model="last_value",
                note=f"cold start: {history.steps} steps of history, {name} needs {self.history}",
            )
        values = self.forecast_windows(self._window_at_end(history))[0, :horizon]
        model = "last_value" if self.fallback_reason else name
        return Forecast(values=values, model=model, note=self.fallback_reason)


def _pad_front(panel: MetricPanel, steps: int) -> MetricPanel:
    missing = steps - panel.steps
    pad = ((missing, 0), (0, 0), (0, 0))
    return MetricPanel(
        entities=panel.entities,
        metrics=panel.metrics,
        start_s=panel.start_s - missing * panel.step_s,
        step_s=panel.step_s,
        values=np.pad(panel.values, pad),
        mask=np.pad(panel.mask, pad),
        alive=np.pad(panel.alive, pad[:2]),
        absent_as_zero=panel.absent_as_zero,
    )


@dataclass
class BaselineForecaster(WindowedForecaster):
    kind: BaselineKind = "last_value"
    _linear: baselines.LinearForecaster | baselines.LeastAbsoluteForecaster | None = None

    @property
    def name(self) -> str:
        return self.kind

    def fit(self, panel: MetricPanel, until_step: int) -> None:
        windows = self._training_windows(panel, until_step)
        if self.kind == "linear" and windows is not None:
            self._linear = baselines.LinearForecaster().fit(windows)
        elif self.kind == "linear_lad" and windows is not None:
            assert self.normaliser is not None
            self._linear = baselines.LeastAbsoluteForecaster().fit(windows, self.normaliser.std)
        elif self.kind not in ("linear", "linear_lad"):
            self.fallback_reason = ""  # needs no training windows

    def _predict_normalised(self, windows: Windows) -> FloatArray:
        if self.kind == "last_value":
            return baselines.last_value(windows, self.horizon)
        if self.kind == "moving_average":
            return baselines.moving_average(windows, self.horizon)
        if self.kind == "moving_median":
            return baselines.moving_median(windows, self.horizon)
        assert self._linear is not None
        return self._linear.predict(windows)


@dataclass
class NeuralForecaster(WindowedForecaster):
    kind: NeuralKind = "stgcn"
    config: TrainConfig = field(default_factory=TrainConfig)
    hidden: int = 64
    spatial: Spatial = "both"
    """The ST-GCN's graphs (``none``: its temporal part alone); unused by the LSTM."""
    highway: bool = False
    """Whether the ST-GCN blends in its linear highway (:mod:`~kubesage.core.forecast.highway`)."""
    highway_blends: BlendSet = "floored"
    """The blends its highway chooses among (``floored``: the neural part, the linear part
    and each series' zero; see :mod:`~kubesage.core.forecast.highway`)."""
    anchor_steps: int = ANCHOR_STEPS
    """The steps whose median the forecast is a change from (0: the last value; see
    :mod:`~kubesage.core.forecast.anchor`)."""
    entities: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    fixed_graph: EntityGraph | None = None
    """A graph to use instead of the correlation graph (the topology graph)."""
    temporal_from: torch.nn.Module | None = None
    """A fitted LSTM baseline (same windows and seed) to take as the ST-GCN's temporal
    part instead of training that stage again — the two are the same computation."""
    graph: EntityGraph | None = None
    """The graph the model was trained with."""
    model: torch.nn.Module | None = None
    report: TrainReport | None = None
    temporal_report: TrainReport | None = None
    """The ST-GCN's first stage (its temporal part), when it was trained here."""
    linear_highway: LinearHighway | None = None
    """The fitted highway, when ``highway`` is set and there were windows to fit it on."""
    highway_recent: int = RECENT_ORIGINS
    """Recent matured origins the highway chooses its weights on at each forecast (0:
    the validation weights throughout; see :mod:`~kubesage.core.forecast.highway`)."""
    made: Made = field(default_factory=Made, repr=False)
    """What :meth:`predict` made for the highway, by the absolute step of each origin:
    successive live forecasts share all but one earlier origin, so each is forecast once
    and each of its steps scored once (emptied by :meth:`fit`)."""

    @property
    def context(self) -> int:
        lookback = self.linear_highway.lookback() if self.linear_highway is not None else 0
        return self.history + lookback

    @property
    def name(self) -> str:
        parts = (self.spatial, self.highway, self.highway_blends if self.highway else "floored")
        if self.kind == "stgcn" and parts != ("both", True, "floored"):
            named = (k for k, v in ABLATION_PARTS.items() if v == parts)
            blends = f", blends={self.highway_blends}" if self.highway else ""
            return next(named, f"stgcn(spatial={self.spatial}, highway={self.highway}{blends})")
        return self.kind

    def build(self, metrics: int) -> torch.nn.Module:
        torch.manual_seed(self.config.seed)
        if self.kind == "stgcn":
            # Built temporal part first, so under one seed it starts as the LSTM baseline does.
            return STGCN(
                2 * metrics,
                metrics,
                self.horizon,
                nodes=len(self.entities),
                hidden=self.hidden,
                spatial=self.spatial,
                anchor_steps=self.anchor_steps,
            )
        return LSTMBaseline(
            2 * metrics, metrics, self.horizon, hidden=self.hidden, anchor_steps=self.anchor_steps
        )

    def fit(
        self, panel: MetricPanel, until_step: int, on_epoch: ProgressCallback | None = None
    ) -> None:
        self.entities, self.metrics = panel.entities, panel.metrics
        self.graph = self.fixed_graph or correlation_graph(panel, until_step)
        windows = self._training_windows(panel, until_step)
        self.model = self.build(len(panel.metrics))
        self.report = self.temporal_report = None
        self.linear_highway = None
        self.made = Made()
        if windows is None:
            return
        edges = self._edge_index()
        if not isinstance(self.model, STGCN):
            self.report = train(self.model, windows, edges, self.config, on_epoch)
            return
        if self.temporal_from is not None:
            self.model.temporal.load_state_dict(self.temporal_from.state_dict())
        else:
            self.temporal_report = train(self.model.temporal, windows, edges, self.config, on_epoch)
            self.report = self.temporal_report
        if self.spatial != "none":
            self.report = train_residual(self.model, windows, edges, self.config, on_epoch)
        if self.highway:
            assert self.normaliser is not None
            model = self.model
            train_index, validation_index = split(
                windows.inputs.shape[0], windows.targets.shape[1], self.config
            )
            self.linear_highway = LinearHighway.fit(
                lambda some: predict_windows(
                    model, some, edges, max_series=self.config.max_batch_series
                ),
                windows,
                train_index,
                validation_index,
                self.normaliser.std,
                self._floor(),
                self.highway_recent,
                self.highway_blends,
            )

    def _floor(self) -> FloatArray:
        """Each series' zero in normalised units: the highway's floor."""
        assert self.normaliser is not None
        return self.normaliser.apply(np.zeros_like(self.normaliser.mean))

    def _edge_index(self) -> torch.Tensor:
        assert self.graph is not None
        return torch.from_numpy(self.graph.edge_index)

    def _predict_normalised(self, windows: Windows) -> FloatArray:
        assert self.normaliser is not None
        neural = self._neural()
        if self.linear_highway is None:
            return neural(windows)
        return self.linear_highway.forecast(
            neural, windows, self.history, self.normaliser.std, self._floor()
        )

    def _neural(self) -> NeuralPredict:
        """The neural part's normalised forecasts for windows of its own history."""
        model, edges = self.model, self._edge_index()
        assert model is not None

        def neural(some: Windows) -> FloatArray:
            return predict_windows(model, some, edges, max_series=self.config.max_batch_series)

        return neural

    def predict(self, history: MetricPanel, horizon: int) -> Forecast:
        self.check_compatible(history)
        highway, normaliser = self.linear_highway, self.normaliser
        if (
            highway is None
            or highway.recent == 0
            or normaliser is None
            or self.fallback_reason
            or not self.history <= history.steps
            or not 0 < horizon <= self.horizon
        ):
            return super().predict(history, horizon)
        # The forecasts made from earlier origins are those of earlier calls: reuse them,
        # by the origin's step on the history's clock (its start, not its length: a rolling
        # window keeps its length). A clock that did not move on is another history's (or
        # the same origin asked again, whose data may have changed): start afresh.
        window = self._window_at_end(history)
        at = round(history.start_s / history.step_s) + history.steps
        if self.made.errors and at <= max(self.made.errors):
            self.made = Made()
        values = highway.forecast(
            self._neural(),
            window,
            self.history,
            normaliser.std,
            self._floor(),
            memo=self.made,
            offset=at - int(window.origins[0]),
        )
        return Forecast(values=np.asarray(normaliser.invert(values))[0, :horizon], model=self.name)

    def check_compatible(self, panel: MetricPanel) -> None:
        """Refuse data whose entities or metrics differ from the training data."""
        if panel.metrics != self.metrics:
            raise InputError(
                f"model was trained on metrics {list(self.metrics)}, "
                f"the data has {list(panel.metrics)}"
            )
        if panel.entities != self.entities:
            missing = sorted(set(self.entities) - set(panel.entities))[:3]
            extra = sorted(set(panel.entities) - set(self.entities))[:3]
            raise InputError(
                f"model was trained on {len(self.entities)} other entities than the data's "
                f"{len(panel.entities)} (missing e.g. {missing}, new e.g. {extra})"
            )


def make_forecaster(
    name: str,
    *,
    config: TrainConfig | None = None,
    history: int = DEFAULT_HISTORY,
    horizon: int = DEFAULT_HORIZON,
) -> WindowedForecaster:
    """A forecaster by model name (see MODEL_NAMES and ABLATION_NAMES)."""
    if name in ABLATION_PARTS:
        spatial, highway, blends = ABLATION_PARTS[name]
        return NeuralForecaster(
            history=history,
            horizon=horizon,
            kind="stgcn",
            spatial=spatial,
            highway=highway,
            highway_blends=blends,
            config=config or TrainConfig(),
        )
    if name in ("stgcn", "lstm"):
        return NeuralForecaster(
            history=history,
            horizon=horizon,
            kind=name,  # type: ignore[arg-type]
            highway=name == "stgcn",
            config=config or TrainConfig(),
        )
    if name in get_args(BaselineKind):
        return BaselineForecaster(history=history, horizon=horizon, kind=name)  # type: ignore[arg-type]
    known = ", ".join((*MODEL_NAMES, *ABLATION_NAMES))
    raise InputError(f"unknown model '{name}'; known: {known}")
