"""One metric CSV's rows, and where their samples fall on a panel's time grid
(:mod:`kubesage.core.forecast.panel` builds the panel from them; its docstring says how
the trace writes the files and what is counted as missing)."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import InputError, TraceFormatError
from kubesage.core.traces.csv_files import check_header, open_text

REQUIRED_COLUMNS = ("value", "timestamp_anon", "container_ip")
MISSING_MARKERS = frozenset({"", "none", "null"})
"""How the trace writes a missing id or value (compared lower-cased, stripped)."""


def metric_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv"):
        name = name.removesuffix(suffix)
    return name.removeprefix("pod_").removesuffix("_anon")


def metric_files(directory: Path) -> list[Path]:
    """The metric files in ``directory``: every plain or gzipped CSV, sorted by name."""
    return sorted(
        p for p in directory.iterdir() if p.name.endswith((".csv", ".csv.gz")) and p.is_file()
    )


@dataclass
class MetricRows:
    """One metric file's rows, split by what they can be used for."""

    with_entity: list[tuple[str, float, float]]
    """``(entity, timestamp, value)``."""
    lines: list[int]
    """The file line of each ``with_entity`` row (for errors that name a row)."""
    without_entity: list[tuple[float, float]]
    """``(timestamp, value)`` of the rows without an entity id."""
    by_request_type: bool
    """The file splits values by ``request_type`` (the types' rates add up)."""
    null_values: int
    """Rows whose value is marked missing."""
    duplicate_rows: int = 0
    """Rows repeating an earlier row of a ``request_type`` file field for field: not
    counted again (they would add to the same cell)."""
    negative_values: int = 0
    """Rows with a value below 0 (kept: a metric may be signed, but the trace's are not)."""
    kinds: list[str] = field(default_factory=list)
    """The ``request_type`` of each ``with_entity`` row (a ``by_request_type`` file)."""
    kinds_without_entity: list[str] = field(default_factory=list)
    """The ``request_type`` of each ``without_entity`` row."""


def read_metric_rows(path: Path) -> MetricRows:
    """The file's rows; see the module docstring for the missing markers."""
    rows: list[tuple[str, float, float]] = []
    lines: list[int] = []
    without_entity: list[tuple[float, float]] = []
    kinds: list[str] = []
    kinds_without_entity: list[str] = []
    null_values = 0
    seen: set[tuple[str, ...]] = set()
    duplicates = 0
    negative = 0
    with open_text(path) as handle:
        reader = csv.DictReader(handle)
        header = [name.strip() for name in reader.fieldnames or []]  # "value, timestamp"
        reader.fieldnames = header
        check_header(header, path, required=REQUIRED_COLUMNS)
        by_request_type = "request_type" in header
        for row in reader:
            line = reader.line_num
            extra = row.get(None) or []  # DictReader puts surplus fields under None
            given = sum(row.get(name) is not None for name in header) + len(extra)
            if given != len(header):
                raise TraceFormatError(
                    f"expected {len(header)} fields, found {given}", path=path, line=line
                )
            if by_request_type:  # an exact repeat would count twice in its type's mean
                key = tuple(str(value) for value in row.values())
                if key in seen:
                    duplicates += 1
                    continue
                seen.add(key)
            entity = (row["container_ip"] or "").strip()
            if entity.lower() in MISSING_MARKERS:
                entity = ""
            try:
                timestamp = float(row["timestamp_anon"])
            except (TypeError, ValueError):
                raise TraceFormatError(
                    f"not a number: {row['timestamp_anon']!r}",
                    path=path,
                    line=line,
                    field="timestamp_anon",
                ) from None
            if not math.isfinite(timestamp):  # refused even where the value is missing
                raise TraceFormatError(
                    f"not a finite number: {row['timestamp_anon']!r}",
                    path=path,
                    line=line,
                    field="timestamp_anon",
                )
            text = (row["value"] or "").strip()
            if text.lower() in MISSING_MARKERS:
                null_values += 1
                continue
            try:
                value = float(text)
            except ValueError:
                raise TraceFormatError(
                    f"not a number: {row['value']!r}", path=path, line=line, field="value"
                ) from None
            if math.isnan(value):
                null_values += 1
                continue
            if not math.isfinite(value):
                raise TraceFormatError(
                    f"not a finite number: {row['value']!r}", path=path, line=line, field="value"
                )
            kind = str(row["request_type"]).strip() if by_request_type else ""
            if not entity:
                without_entity.append((timestamp, value))
                kinds_without_entity.append(kind)
                continue
            rows.append((entity, timestamp, value))
            lines.append(line)
            kinds.append(kind)
            negative += value < 0
    return MetricRows(
        rows,
        lines,
        without_entity,
        by_request_type,
        null_values,
        duplicates,
        negative,
        kinds,
        kinds_without_entity,
    )


def grid_cells(stamps: FloatArray, start_s: float, step_s: float) -> IntArray:
    """The grid step each timestamp falls in: step k holds ``[k − ½, k + ½)`` steps after
    the start (halves round up, as :meth:`MetricPanel.step_of` counts them)."""
    return np.floor((stamps - start_s) / step_s + 0.5).astype(np.int64)


PHASE_AGREEMENT = 0.5
"""How closely the samples must agree on their phase within a step (the length of their
mean direction, 1 when all share it) for the grid to follow it."""


def grid_start(first_s: float, step_s: float, dense_stamps: FloatArray) -> float:
    """The grid's first step: at the phase most samples keep (their circular mean modulo
    the step), the one nearest the earliest sample ``first_s``. A stray row off that
    phase then moves no other sample from its step, as a grid starting at the stray
    row would (jittered samples half a step off would fall two to a step, and gaps)."""
    angles = 2 * np.pi * np.mod(dense_stamps - first_s, step_s) / step_s
    mean = complex(np.exp(1j * angles).mean())
    if abs(mean) < PHASE_AGREEMENT:  # no phase most samples keep: start at the first
        return first_s
    phase = float(np.angle(mean)) / (2 * np.pi) * step_s
    return first_s + phase - step_s * math.floor(phase / step_s + 0.5)


def rate_per_cell(
    shape: tuple[int, int],
    cells: IntArray,
    entities: IntArray,
    kinds: Sequence[str],
    values: FloatArray,
) -> FloatArray:
    """A rate split by request type: each type's samples in a cell averaged (several
    samples of one rate in a step are one rate), then the types added up."""
    names = {kind: k for k, kind in enumerate(dict.fromkeys(kinds))}
    kind = np.array([names[k] for k in kinds], dtype=np.int64)
    sums = np.zeros((*shape, max(len(names), 1)))
    counts = np.zeros_like(sums)
    np.add.at(sums, (cells, entities, kind), values)
    np.add.at(counts, (cells, entities, kind), 1)
    return np.asarray(np.divide(sums, np.maximum(counts, 1)).sum(axis=2))


def grid_step(rows_by_metric: dict[str, list[tuple[str, float, float]]]) -> float:
    """The median gap between one entity's consecutive distinct timestamps (robust to jitter)."""
    gaps: list[FloatArray] = []
    for rows in rows_by_metric.values():
        by_entity: dict[str, list[float]] = {}
        for entity, timestamp, _ in rows:
            by_entity.setdefault(entity, []).append(timestamp)
        for stamps in by_entity.values():
            unique = np.unique(np.asarray(stamps))
            if unique.size > 1:
                gaps.append(np.diff(unique))
    if not gaps:
        raise InputError("need at least two distinct timestamps of one entity to find the step")
    return float(np.median(np.concatenate(gaps)))
