"""Shared helpers for the benchmark scripts: locating the shared traces, printing tables."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir(explicit: Path | None = None) -> Path:
    """``--data-dir``, else ``$KUBESAGE_SHARED_DATA``, else ``../shared/data`` beside the repo."""
    candidates = [explicit] if explicit else []
    if env := os.environ.get("KUBESAGE_SHARED_DATA"):
        candidates.append(Path(env))
    candidates.append(REPO.parent / "shared" / "data")
    for path in candidates:
        if path is not None and (path / "openb").is_dir():
            return path
    raise SystemExit(
        "error: the openb trace was not found; pass --data-dir, set KUBESAGE_SHARED_DATA, "
        "or fetch it with `kubesage data fetch openb` and point --data-dir at the cache"
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
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
