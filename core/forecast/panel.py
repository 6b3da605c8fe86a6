"""Per-entity metric series aligned on one time grid: the forecaster's input.

A directory in the GenAI trace layout holds one CSV (optionally gzipped) per
metric, with columns read by name: ``value``, ``timestamp_anon`` and
``container_ip`` (the entity), optionally ``request_type``. The metric name is the
file name without ``pod_``, ``_anon`` and the extension.

Alignment (:mod:`kubesage.core.forecast.metric_rows`): the grid step is the median gap
between an entity's consecutive timestamps in the dense metrics (57 s in the GenAI
trace), its phase the one most of their samples keep (``grid_start``: a stray row off
it moves no other); a sample goes to the cell ``floor((t − t0) / step + ½)``
(``grid_cells``). Two samples of one entity in
one cell are averaged and counted; in a file with ``request_type`` the samples of each
request type are averaged and the types' rates added up (several samples of one rate
in a step are one rate; rates of different request types add up). A row with fewer or
more fields than the header is an error naming its line. Cells without a sample are
marked missing in ``mask``
— never filled — with one declared exception: metrics named in ``absent_as_zero``
(``qps`` by default, whose files only hold rows for non-zero rates) read 0 at the
steps where the entity reported any other metric.

Exact repeats: in a ``request_type`` file a row that repeats an earlier one field
for field is counted in ``duplicate_rows`` and not added again. A zero-filled metric
may have no rows at all (a quiet hour's request rate): it reads 0 wherever alive.

The grid spans the samples of the entities used. One that would exceed
``MAX_PANEL_CELLS`` is refused before it is allocated, naming the earliest and the
latest rows (a stray timestamp, or milliseconds in one file); a long stretch with no
entity reporting is said by :func:`describe`.

Entities are those present in every dense (not zero-filled) metric; the others
(a CPU-only pod in a folder of GPU metrics, a pod that only has a request rate) are
counted per metric in ``left_out`` — entities and rows — and said by :func:`describe`,
never dropped unsaid. ``alive``
marks the steps where an entity reported a dense metric: it is known at that step,
never inferred from later data, so no input depends on the future. Rows without
an entity id (gateway-level rows) belong to no entity: they are counted in
``excluded_rows``, not used.

Missing markers: the trace writes a missing container id as ``None`` or ``NULL`` (its
README recommends reading both as missing), so an id that is empty, ``None`` or
``NULL`` (any case) is no id. A value written that way, empty or ``NaN`` is a missing
sample: counted per metric in ``null_values`` and said by :func:`describe`, not used.
Any other value that is not a finite number is an error naming the file and line, and
so is a timestamp that is not one, even on a row whose value is missing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kubesage.core.arrays import BoolArray, FloatArray
from kubesage.core.durations import format_duration
from kubesage.core.errors import InputError, TraceFormatError
from kubesage.core.forecast.metric_rows import (
    grid_cells,
    grid_start,
    grid_step,
    metric_files,
    metric_name,
    rate_per_cell,
    read_metric_rows,
)

DEFAULT_ABSENT_AS_ZERO = ("qps",)
SILENT_SHARE = 0.05
"""A stretch with no entity reporting that covers this share of the grid is said."""
MAX_PANEL_CELLS = 50_000_000
"""Steps × entities × metrics a panel may hold: about 2 GB while it is built (sums,
counts, values and masks). A month of the GenAI trace's 57 s steps for 300 pods and
four metrics is 18 million; a grid beyond the limit is almost always a stray timestamp."""


@dataclass
class MetricPanel:
    """``values[s, n, m]``: metric m of entity n at grid step s; ``mask`` says which are real."""

    entities: tuple[str, ...]
    metrics: tuple[str, ...]
    start_s: float
    """Timestamp of grid step 0."""
    step_s: float
    values: FloatArray
    mask: BoolArray
    alive: BoolArray
    """``alive[s, n]``: entity n reported some dense metric at step s."""
    absent_as_zero: tuple[str, ...] = ()
    excluded_rows: dict[str, int] = field(default_factory=dict)
    merged_samples: int = 0
    left_out: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per metric, the (entities, rows) of entities not in every dense metric: not used."""
    null_values: dict[str, int] = field(default_factory=dict)
    """Per metric, the rows whose value is marked missing (empty, None, NULL, NaN)."""
    duplicate_rows: dict[str, int] = field(default_factory=dict)
    """Per ``request_type`` metric, rows that repeat an earlier row exactly: not added again."""
    no_rows: tuple[str, ...] = ()
    """Zero-filled metrics whose file holds no row with an entity id (0 wherever alive)."""
    negative_values: dict[str, int] = field(default_factory=dict)
    """Per metric, the rows with a value below 0: kept, and said."""

    @property
    def steps(self) -> int:
        return int(self.values.shape[0])

    def times_s(self) -> FloatArray:
        return np.asarray(self.start_s + self.step_s * np.arange(self.steps), dtype=np.float64)

    def step_of(self, timestamp_s: float) -> int:
        """The first step that may hold a sample at or after ``timestamp_s``.

        Step k holds samples from ``(k − ½)`` to ``(k + ½)`` steps after the start, so
        every step before the returned one holds only samples before ``timestamp_s``.
        """
        return int(np.floor((timestamp_s - self.start_s) / self.step_s + 0.5 + 1e-9))

    def head(self, steps: int) -> MetricPanel:
        """The first ``steps`` steps (a history ending before step ``steps``)."""
        return MetricPanel(
            entities=self.entities,
            metrics=self.metrics,
            start_s=self.start_s,
            step_s=self.step_s,
            values=self.values[:steps],
            mask=self.mask[:steps],
            alive=self.alive[:steps],
            absent_as_zero=self.absent_as_zero,
        )


def dense_metrics(metrics: tuple[str, ...], absent_as_zero: tuple[str, ...]) -> list[str]:
    """The metrics whose rows say an entity is alive: all but the zero-filled ones (all
    of them when every one is zero-filled)."""
    return [m for m in metrics if m not in absent_as_zero] or list(metrics)


def read_panel(
    directory: Path | str,
    *,
    absent_as_zero: tuple[str, ...] = DEFAULT_ABSENT_AS_ZERO,
    metrics: Sequence[str] | None = None,
) -> MetricPanel:
    """Read every ``*.csv``/``*.csv.gz`` metric file in ``directory`` into one panel, or
    only those of ``metrics`` (their names as :func:`metric_name` reads them: a folder
    may hold other CSVs, such as a trace's request or latency logs)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory")
    files = metric_files(directory)
    if not files:
        raise InputError(f"{directory}: no .csv or .csv.gz metric files")
    if metrics is not None:
        available = {metric_name(path): path for path in files}
        unknown = [name for name in metrics if name not in available]
        if unknown or not metrics:
            raise InputError(
                f"{directory}: no metric file for {', '.join(unknown) or 'an empty list'}; "
                f"it has {', '.join(sorted(available))}"
            )
        files = [available[name] for name in dict.fromkeys(metrics)]
    per_metric: dict[str, list[tuple[str, float, float]]] = {}
    sources: dict[str, tuple[Path, list[int]]] = {}
    excluded: dict[str, int] = {}
    null_values: dict[str, int] = {}
    duplicates: dict[str, int] = {}
    negatives: dict[str, int] = {}
    summed: set[str] = set()
    kinds: dict[str, list[str]] = {}
    for path in files:
        name = metric_name(path)
        if name in per_metric:
            raise InputError(f"{directory}: two files give metric '{name}'")
        try:
            read = read_metric_rows(path)
        except TraceFormatError as exc:
            if exc.line == 1 and metrics is None:  # its header: perhaps not a metric file
                exc.args = (
                    f"{exc} — if it is not a metric file, name the ones to read (--metrics)",
                )
            raise
        per_metric[name] = read.with_entity
        sources[name] = (path, read.lines)
        excluded[name] = len(read.without_entity)
        if read.null_values:
            null_values[name] = read.null_values
        if read.duplicate_rows:
            duplicates[name] = read.duplicate_rows
        if read.negative_values:
            negatives[name] = read.negative_values
        if read.by_request_type:
            summed.add(name)
            kinds[name] = read.kinds
    metrics = tuple(sorted(per_metric))
    dense = dense_metrics(metrics, absent_as_zero)
    for name in dense:  # a zero-filled metric may have no row at all: 0 wherever alive
        if not per_metric[name]:
            raise TraceFormatError("no rows with an entity id", path=sources[name][0], line=1)
    entity_sets = [{row[0] for row in per_metric[m]} for m in dense]
    entities = tuple(sorted(set.intersection(*entity_sets)))
    if not entities:
        raise InputError(f"{directory}: no entity appears in all of {', '.join(dense)}")
    index = {entity: i for i, entity in enumerate(entities)}
    used = {m: [k for k, r in enumerate(per_metric[m]) if r[0] in index] for m in metrics}
    stamps = {m: np.array([per_metric[m][k][1] for k in used[m]]) for m in metrics}
    step = grid_step({m: [per_metric[m][k] for k in used[m]] for m in dense})  # entities used
    first = min(float(t.min()) for t in stamps.values() if t.size)
    start = grid_start(first, step, np.concatenate([stamps[m] for m in dense]))
    end = max(float(t.max()) for t in stamps.values() if t.size)
    steps = int(grid_cells(np.array([end]), start, step)[0]) + 1
    _check_grid_size(directory, steps * len(entities) * len(metrics), step, stamps, used, sources)
    left_out: dict[str, tuple[int, int]] = {}
    sums = np.zeros((steps, len(entities), len(metrics)))
    counts = np.zeros((steps, len(entities), len(metrics)), dtype=np.int64)
    rates: dict[str, FloatArray] = {}
    for m, name in enumerate(metrics):
        rows = [per_metric[name][k] for k in used[name]]
        if len(rows) < len(per_metric[name]):  # entities outside the panel: say how many
            outside = {r[0] for r in per_metric[name]}.difference(index)
            left_out[name] = (len(outside), len(per_metric[name]) - len(rows))
        ent = np.array([index[r[0]] for r in rows], dtype=np.int64)
        cell = grid_cells(stamps[name], start, step)
        samples = np.array([r[2] for r in rows])
        np.add.at(sums[:, :, m], (cell, ent), samples)
        np.add.at(counts[:, :, m], (cell, ent), 1)
        if name in summed:
            shape = (steps, len(entities))
            rates[name] = rate_per_cell(
                shape, cell, ent, [kinds[name][k] for k in used[name]], samples
            )
    observed: BoolArray = counts > 0
    values = np.divide(sums, np.maximum(counts, 1))
    for name, rate in rates.items():
        values[:, :, metrics.index(name)] = rate
    dense_index = [metrics.index(m) for m in dense]
    alive: BoolArray = np.asarray(observed[:, :, dense_index].any(axis=2), dtype=bool)
    mask = observed.copy()
    zero_filled = tuple(m for m in metrics if m in absent_as_zero)
    for name in zero_filled:
        m = metrics.index(name)
        mask[:, :, m] = alive | observed[:, :, m]
        values[:, :, m] = np.where(observed[:, :, m], values[:, :, m], 0.0)
    return MetricPanel(
        entities=entities,
        metrics=metrics,
        start_s=start,
        step_s=step,
        values=values,
        mask=mask,
        alive=alive,
        absent_as_zero=zero_filled,
        excluded_rows={k: v for k, v in excluded.items() if v},
        merged_samples=int((counts > 1).sum()),
        left_out=left_out,
        null_values=null_values,
        duplicate_rows=duplicates,
        negative_values=negatives,
        no_rows=tuple(m for m in zero_filled if not per_metric[m]),
    )


def _check_grid_size(
    directory: Path,
    cells: int,
    step: float,
    stamps: dict[str, FloatArray],
    used: dict[str, list[int]],
    sources: dict[str, tuple[Path, list[int]]],
) -> None:
    """Refuse a grid over ``MAX_PANEL_CELLS`` before allocating it, naming the rows that
    stretch it: one stray timestamp (a 0, a year off, milliseconds in one file) would
    otherwise ask for gigabytes."""
    if cells <= MAX_PANEL_CELLS:
        return

    filled = [m for m in stamps if stamps[m].size]
    first = min(filled, key=lambda m: float(stamps[m].min()))
    last = max(filled, key=lambda m: float(stamps[m].max()))

    def row(metric: str, k: int) -> str:
        path, lines = sources[metric]
        return f"{path.name}:{lines[used[metric][k]]} ({stamps[metric][k]:g})"

    every = np.unique(np.concatenate([stamps[m] for m in filled]))
    gap = float(np.diff(every).max()) if every.size > 1 else 0.0
    raise InputError(
        f"{directory}: the samples span a grid of {cells:,} cells at {step:g} s a step, "
        f"over the limit of {MAX_PANEL_CELLS:,}; the earliest timestamp is "
        f"{row(first, int(stamps[first].argmin()))}, the latest "
        f"{row(last, int(stamps[last].argmax()))}, and the largest gap between samples is "
        f"{format_duration(gap)} — check those rows, and that every file's timestamps are "
        "in seconds"
    )


def read_entityless(directory: Path | str, panel: MetricPanel, metric: str) -> FloatArray:
    """The rows of ``metric`` without an entity id (in the GenAI trace, the gateway's
    request rate), per step of ``panel``'s grid (each request type's samples averaged,
    the types added up); 0 at steps without such a row.
    Rows outside the grid are left out (the panel's span decides)."""
    directory = Path(directory)
    found = [p for p in metric_files(directory) if metric_name(p) == metric]
    if not found:
        raise InputError(f"{directory}: no file gives metric '{metric}'")
    read = read_metric_rows(found[0])
    if not read.without_entity:
        return np.zeros(panel.steps)
    stamps, values = np.asarray(read.without_entity, dtype=np.float64).T
    cells = grid_cells(stamps, panel.start_s, panel.step_s)
    inside = (cells >= 0) & (cells < panel.steps)
    kinds = read.kinds_without_entity
    return rate_per_cell(
        (panel.steps, 1),
        cells[inside],
        np.zeros(int(inside.sum()), dtype=np.int64),
        [kind for kind, keep in zip(kinds, inside.tolist(), strict=True) if keep],
        values[inside],
    )[:, 0]


def silent_stretch(panel: MetricPanel) -> tuple[int, int]:
    """The longest run of steps ``[first, last)`` where no entity reported (``(0, 0)``
    when every step has one)."""
    silent = np.concatenate([[False], ~panel.alive.any(axis=1), [False]])
    edges = np.flatnonzero(np.diff(silent.astype(np.int8)))
    if edges.size == 0:
        return 0, 0
    starts, ends = edges[0::2], edges[1::2]
    longest = int(np.argmax(ends - starts))
    return int(starts[longest]), int(ends[longest])


def describe(panel: MetricPanel) -> str:
    """One paragraph on what was read, for the CLI and logs."""
    parts = [
        f"{len(panel.entities)} entities × {len(panel.metrics)} metrics "
        f"({', '.join(panel.metrics)}) on a {panel.step_s:g} s grid of {panel.steps} steps",
    ]
    if panel.absent_as_zero:
        parts.append(f"absent rows read as 0 for {', '.join(panel.absent_as_zero)} (declared)")
    if panel.excluded_rows:
        counts = Counter(panel.excluded_rows)
        parts.append(
            "rows without an entity id not used: "
            + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        )
    if panel.left_out:
        dense = ", ".join(dense_metrics(panel.metrics, panel.absent_as_zero))
        parts.append(
            f"entities not in every one of {dense} not used: "
            + ", ".join(
                f"{metric} {entities} ({rows} rows)"
                for metric, (entities, rows) in sorted(panel.left_out.items())
            )
        )
    if panel.null_values:
        parts.append(
            "values marked missing (empty, None, NULL, NaN) not used: "
            + ", ".join(f"{k} {v}" for k, v in sorted(panel.null_values.items()))
        )
    if panel.duplicate_rows:
        parts.append(
            "rows repeating an earlier row exactly, not added again: "
            + ", ".join(f"{k} {v}" for k, v in sorted(panel.duplicate_rows.items()))
        )
    if panel.negative_values:
        parts.append(
            "values below 0 (kept; check the source): "
            + ", ".join(f"{k} {v}" for k, v in sorted(panel.negative_values.items()))
        )
    if panel.no_rows:
        parts.append(f"no rows with an entity id (0 wherever alive): {', '.join(panel.no_rows)}")
    if panel.merged_samples:
        parts.append(f"{panel.merged_samples} cells had several samples (combined)")
    first, last = silent_stretch(panel)
    if last - first >= max(2, SILENT_SHARE * panel.steps):
        parts.append(
            f"no entity reported for {format_duration((last - first) * panel.step_s)} "
            f"(steps {first}–{last - 1}, {(last - first) / panel.steps:.0%} of the grid)"
        )
    live_cells = int(panel.alive.sum()) * len(panel.metrics)
    missing = 1.0 - panel.mask.sum() / max(1, live_cells)
    parts.append(f"{missing:.1%} of live cells missing (masked)")
    return "; ".join(parts)
