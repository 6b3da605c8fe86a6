"""Shared helpers for the benchmark scripts: the tiny size, the shared traces, tables.

Every script takes ``--tiny`` (or reads ``KUBESAGE_BENCH_TINY=1`` from the
environment): the same code at a size that runs in seconds, so a test
(``tests/benchmarks``) runs every benchmark in ``make test`` and they cannot rot
unseen. Tiny figures mean nothing; options given explicitly still win over the tiny
defaults. With ``--format json`` the last line of stdout is one compact JSON object
(:func:`json_line`: a figure not measured is ``null``); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kubesage.core.durations import parse_duration_s
from kubesage.core.errors import InputError
from kubesage.core.paths import shared_trace_dir

if TYPE_CHECKING:
    from kubesage.core.forecast.panel import MetricPanel

REPO = Path(__file__).resolve().parents[1]
TINY_ENV = "KUBESAGE_BENCH_TINY"
"""Environment variable that turns ``--tiny`` on for every script (``1``, ``true``, ``yes``)."""


def run_main(main: Callable[[], int]) -> None:
    """Run a script's ``main`` and exit with its status; bad input (an InputError: a
    missing trace file, an unknown trace name) is one line on stderr and status 2, as
    the CLI's, not a traceback."""
    try:
        status = main()
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        status = 2
    raise SystemExit(status)


def json_line(document: object) -> str:
    """``document`` as the one compact JSON line a benchmark prints last with ``--format
    json``. A non-finite figure (NaN, ±inf: "not measured") is written ``null``, which is
    JSON; a bare ``NaN`` is not and breaks a strict reader."""
    return json.dumps(_finite(document), separators=(",", ":"), allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number ≥ 1 (a count of runs, pods, seeds)."""
    return int(_positive(text, int, "a whole number"))


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number > 0 (a duration, a scale)."""
    return _positive(text, float, "a number")


def _positive(text: str, parse: Callable[[str], float], what: str) -> float:
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: '{text}'") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def tiny_from_environment() -> bool:
    """Whether ``$KUBESAGE_BENCH_TINY`` asks for the tiny size."""
    return os.environ.get(TINY_ENV, "").strip().lower() in {"1", "true", "yes"}


def parse_args(
    parser: argparse.ArgumentParser,
    tiny: Mapping[str, object],
    argv: Sequence[str] | None = None,
) -> argparse.Namespace:
    """Add ``--tiny`` to ``parser`` and parse; with it, ``tiny`` replaces the defaults.

    ``tiny`` maps option destinations to their tiny values; an option given on the
    command line keeps its value.
    """
    parser.add_argument(
        "--tiny",
        action="store_true",
        default=tiny_from_environment(),
        help=f"Run at a tiny size, to check that the script works (also ${TINY_ENV}=1).",
    )
    args = parser.parse_args(argv)
    if args.tiny:
        parser.set_defaults(**tiny)
        args = parser.parse_args(argv)
        print(f"tiny run ({parser.prog}): its figures mean nothing", file=sys.stderr)
    return args


def replay_start(panel: MetricPanel, train_until: str) -> int:
    """The first step after ``--train-until`` (``+DURATION`` after the panel's first
    sample): forecasters train before it and the replay starts there."""
    if not train_until.startswith("+"):
        raise SystemExit("--train-until must be +DURATION (e.g. +10h) after the first sample")
    offset = parse_duration_s(train_until[1:], "--train-until")
    cut = panel.step_of(panel.start_s + offset)
    if not 0 < cut < panel.steps:
        raise SystemExit(f"--train-until {train_until} leaves no replay in {panel.steps} steps")
    return cut


def find_trace(explicit: Path | None, trace: str) -> Path | None:
    """The folder of ``trace`` (``openb`` or ``genai``): from ``--data-dir`` (the folder
    that holds ``trace/``, or that folder itself), else the shared trace where every
    command looks for it (:func:`kubesage.core.paths.shared_trace_dir`); None when there
    is none. A ``--data-dir`` that is not a folder is an error, never a silent fallback
    to the defaults."""
    if explicit is not None:
        if (explicit / trace).is_dir():
            return explicit / trace
        if explicit.is_dir():
            return explicit  # the trace's own folder; its reader says what it lacks
        raise SystemExit(f"error: --data-dir {explicit}: not a folder")
    return shared_trace_dir(trace)


def trace_dir(explicit: Path | None, trace: str = "openb") -> Path:
    """:func:`find_trace`, or a clear exit naming the ways to provide the trace."""
    found = find_trace(explicit, trace)
    if found is not None:
        return found
    fetch = (
        "fetch it with `kubesage data fetch openb` and point --data-dir at the cache"
        if trace == "openb"
        else "point --data-dir at a copy of it"
    )
    raise SystemExit(
        f"error: the {trace} trace was not found; pass --data-dir, set KUBESAGE_SHARED_DATA, "
        f"or {fetch}"
    )


def openb_traces(openb: Path, chosen: str) -> list[str]:
    """The pod lists named in ``chosen`` (comma-separated), or every ``openb_pod_list_*.csv``
    in ``openb`` when it names none."""
    return [t for t in chosen.split(",") if t] or sorted(
        p.stem.removeprefix("openb_pod_list_") for p in openb.glob("openb_pod_list_*.csv")
    )


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, digits: int = 2
) -> str:
    """A plain fixed-width table (first column left-aligned, the rest right-aligned)."""
    cells = [[str(h) for h in headers]] + [[_cell(v, digits) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        )

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def _cell(value: object, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"  # not measured (null in JSON)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


PUBLISHED_NAMES = {
    "random": "Random",
    "dotprod": "DotProd",
    "gpuclustering": "GpuClustering",
    "gpupacking": "GpuPacking",
    "bestfit": "BestFit",
    "fgd": "FGD",
}
"""Our policy names → the names in ``published_allocation_ratio.csv``."""


def published_allocation(openb: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """``(workload, published policy name) → (allocation % at 100 %, at 130 % arrived)``
    from the FGD paper's simulator (``openb/published_allocation_ratio.csv``); empty when
    the file is not there."""
    path = openb / "published_allocation_ratio.csv"
    if not path.is_file():
        return {}
    with path.open() as handle:
        return {
            (row["workload"], row["policy"]): (
                float(row["alloc_at_100"]),
                float(row["alloc_at_130"]),
            )
            for row in csv.DictReader(handle)
        }
