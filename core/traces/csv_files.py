"""Opening trace CSVs (plain or gzipped, with or without a byte-order mark) and
checking their header, shared by every trace reader."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from kubesage.core.errors import InputError, TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"


@contextmanager
def open_text(path: Path) -> Iterator[IO[str]]:
    """A text handle on ``path``; ``.gz`` files are decompressed, a UTF-8 BOM is dropped.

    A file that is not what its name says (gzip data in a ``.csv``, plain text in a
    ``.csv.gz``), a damaged gzip stream and text that is not UTF-8 are InputErrors
    naming the file, raised whenever the reading meets them."""
    with path.open("rb") as probe:
        start = probe.read(2)
    if not start:
        raise TraceFormatError(
            "empty file (a CSV needs at least its header line)", path=path, line=1
        )
    gzipped = start == GZIP_MAGIC
    if gzipped != (path.suffix == ".gz"):
        actual = "gzip-compressed" if gzipped else "not gzip-compressed"
        wanted = "name it .csv.gz" if gzipped else "name it without .gz"
        raise InputError(f"{path}: the file is {actual} ({wanted})")
    try:
        with (
            gzip.open(path, "rt", newline="", encoding="utf-8-sig")
            if gzipped
            else path.open(newline="", encoding="utf-8-sig")
        ) as handle:
            yield handle
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text (save it as UTF-8)") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: a damaged gzip stream ({exc or 'it ends early'})") from None


def check_header(
    header: Sequence[str],
    path: Path,
    *,
    required: Sequence[str],
    optional: Sequence[str] | None = None,
) -> None:
    """Reject repeated or missing columns, and unknown ones when ``optional`` is given;
    an empty column name (a header ending in a comma, as spreadsheets write it) is named
    as such."""
    if any(not name.strip() for name in header) and header:
        raise TraceFormatError(
            "the header has an empty column name (a trailing comma?): "
            + ", ".join(repr(name) for name in header),
            path=path,
            line=1,
        )
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
