"""A download stopped part-way — by an HTTP error (its attempts used up, or one not tried
again) or by Ctrl-C — leaves its bytes for the next run to go on from.

Within one run an attempt cut off mid-file is continued by the next
(:mod:`~kubesage.core.traces.fetch_transfer`). Across runs the held bytes are *parked*
beside the target: synced to disk, renamed to ``<file>.<token>.resume``, and named by
the record ``<file>.resume.json`` with the URL they came from, the file's version (the
strong ``ETag`` or ``Last-Modified`` date the mirror named) and how many bytes are good.
The next download of that file *adopts* them when the record names the same URL: the
parked file the record names is renamed into the download's own temporary file (one
rename, so of two runs sharing a cache only one adopts it), and the download asks for
the rest with ``If-Range`` set to the recorded version, so a file that changed in
between is sent whole.

Bytes without a version are never parked (they could not be continued safely), nor are
those of a download refused for its content (a page instead of the file, a wrong
checksum). A record that does not match, cannot be read, or names more bytes than its
parked file holds is ignored and the file fetched whole; a successful download of the
file removes whatever was parked for it.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import secrets
from pathlib import Path

from kubesage.core.traces.fetch_transfer import Partial

PARKED_SUFFIX = ".resume"
_TOKEN = re.compile(r"[0-9a-f]{16}")


def _parked(path: Path, token: str) -> Path:
    return path.with_name(f"{path.name}.{token}{PARKED_SUFFIX}")


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + PARKED_SUFFIX + ".json")


def park(partial: Partial, path: Path, url: str) -> bool:
    """Keep ``partial``'s bytes for the next download of ``path`` from ``url``; whether
    they were kept (not when they have no version, or the cache cannot be written; the
    bytes are then where they were)."""
    if partial.version is None or partial.size == 0:
        return False
    token = secrets.token_hex(8)
    parked, record = _parked(path, token), _record_path(path)
    written = record.with_name(f"{record.name}.{token}.tmp")
    try:
        fd = os.open(partial.path, os.O_RDONLY)
        try:
            os.fsync(fd)  # the record must never name bytes that are not on disk
        finally:
            os.close(fd)
        held = {"url": url, "version": partial.version, "size": partial.size, "token": token}
        written.write_text(json.dumps(held))
        os.replace(partial.path, parked)
    except OSError:
        written.unlink(missing_ok=True)
        return False
    try:
        os.replace(written, record)
    except OSError:
        os.replace(parked, partial.path)  # back where the caller will remove it
        written.unlink(missing_ok=True)
        return False
    _remove_parked(path, keep=parked)  # what an older record named
    return True


def adopt(partial: Partial, path: Path, url: str) -> None:
    """Go on, in ``partial`` (a new download of ``path`` from ``url``, holding nothing),
    from the bytes a stopped run parked, when they are this URL's."""
    try:
        record = json.loads(_record_path(path).read_text())
    except (OSError, ValueError):
        return
    if not isinstance(record, dict) or record.get("url") != url:
        return
    version, size, token = record.get("version"), record.get("size"), record.get("token")
    if not isinstance(version, str) or not isinstance(size, int) or size <= 0:
        return
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        return
    try:
        os.replace(_parked(path, token), partial.path)  # the claim: a second run finds none
        if partial.path.stat().st_size < size:
            return  # not what the record says: the download starts over (and cuts it)
    except OSError:
        return
    partial.size, partial.version = size, version  # bytes past ``size`` are cut on writing
    with contextlib.suppress(OSError):
        _record_path(path).unlink()


def discard(path: Path) -> None:
    """Remove whatever was parked for ``path`` (it has been fetched whole)."""
    with contextlib.suppress(OSError):
        _record_path(path).unlink()
    _remove_parked(path)


def _remove_parked(path: Path, keep: Path | None = None) -> None:
    name = glob.escape(path.name)
    leftovers = [
        *path.parent.glob(f"{name}.*{PARKED_SUFFIX}"),
        *path.parent.glob(f"{name}{PARKED_SUFFIX}.json.*.tmp"),  # records never renamed
    ]
    for leftover in leftovers:
        if leftover != keep:
            with contextlib.suppress(OSError):
                leftover.unlink()
