"""A download stopped part-way — its attempts used up, or Ctrl-C — leaves its bytes for
the next run to go on from.

Within one run an attempt cut off mid-file is continued by the next
(:mod:`~kubesage.core.traces.fetch_transfer`). Across runs the held bytes are *parked*
beside the target: ``<file>.resume``, and ``<file>.resume.json`` recording the URL they
came from, the file's version (the strong ``ETag`` or ``Last-Modified`` date the
mirror named) and how many bytes are good. The next download of that file *adopts*
them when the record names the same URL: the parked file is renamed into the download's
own temporary file (one rename, so of two runs sharing a cache only one adopts it) and
the download asks for the rest with ``If-Range`` set to the recorded version, so a file
that changed in between is sent whole. Bytes without a version are never parked (they
could not be continued safely), nor are those of a download refused for its content (a
page instead of the file, a wrong checksum). A record that does not match, cannot be
read, or names more bytes than the parked file holds is ignored and the file is fetched
whole; a successful download of the file removes what was parked for it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from kubesage.core.traces.fetch_transfer import Partial

PARKED_SUFFIX = ".resume"


def parked_path(path: Path) -> Path:
    """Where the bytes of a stopped download of ``path`` wait for the next run."""
    return path.with_name(path.name + PARKED_SUFFIX)


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + PARKED_SUFFIX + ".json")


def park(partial: Partial, path: Path, url: str) -> bool:
    """Keep ``partial``'s bytes for the next download of ``path`` from ``url``; whether
    they were kept (not when they have no version, or the cache cannot be written)."""
    if partial.version is None or partial.size == 0:
        return False
    record = {"url": url, "version": partial.version, "size": partial.size}
    written = _record_path(path).with_name(f"{_record_path(path).name}.{os.getpid()}.tmp")
    try:
        written.write_text(json.dumps(record))
        os.replace(partial.path, parked_path(path))
        os.replace(written, _record_path(path))
    except OSError:
        written.unlink(missing_ok=True)
        return False
    return True


def adopt(path: Path, url: str, part: Path) -> Partial:
    """The download of ``path`` from ``url`` into its temporary file ``part``: going on
    from the bytes a stopped run parked when they are this URL's, from nothing otherwise."""
    try:
        record = json.loads(_record_path(path).read_text())
    except (OSError, ValueError):
        return Partial(part)
    if not isinstance(record, dict) or record.get("url") != url:
        return Partial(part)
    version, size = record.get("version"), record.get("size")
    if not isinstance(version, str) or not isinstance(size, int) or size <= 0:
        return Partial(part)
    try:
        if parked_path(path).stat().st_size < size:
            return Partial(part)
        os.replace(parked_path(path), part)  # the claim: a second run finds nothing
    except OSError:
        return Partial(part)
    with contextlib.suppress(OSError):
        _record_path(path).unlink()
    return Partial(part, size, version)  # bytes past ``size`` are cut when writing resumes


def discard(path: Path) -> None:
    """Remove what was parked for ``path`` (it has been fetched whole)."""
    for leftover in (parked_path(path), _record_path(path)):
        with contextlib.suppress(OSError):
            leftover.unlink()
