"""Opening trace CSVs (plain or gzipped, with or without a byte-order mark) and
checking their header, shared by every trace reader."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from kubesage.core.errors import TraceFormatError


def open_text(path: Path) -> IO[str]:
    """A text handle on ``path``; ``.gz`` files are decompressed, a UTF-8 BOM is dropped."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", newline="", encoding="utf-8-sig")
    return path.open(newline="", encoding="utf-8-sig")


def check_header(
    header: Sequence[str],
    path: Path,
    *,
    required: Sequence[str],
    optional: Sequence[str] | None = None,
) -> None:
    """Reject repeated or missing columns, and unknown ones when ``optional`` is given."""
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise TraceFormatError(
            f"column(s) {', '.join(repeated)} appear more than once", path=path, line=1
        )
    missing = [name for name in required if name not in header]
    if missing:
        raise TraceFormatError(
            f"header lacks column(s) {', '.join(missing)}; found {', '.join(header)}",
            path=path,
            line=1,
        )
    if optional is not None:
        unknown = [name for name in header if name not in required and name not in optional]
        if unknown:
            raise TraceFormatError(f"unknown column(s) {', '.join(unknown)}", path=path, line=1)
