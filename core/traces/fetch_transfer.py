"""One attempt of a trace download, and how the next attempt goes on from where it stopped.

An attempt streams the file into the download's private temporary file
(:mod:`~kubesage.core.traces.fetch` creates it, verifies it and renames it), counting
the bytes as they reach it, and refuses what is not the file: an HTML page, a Git LFS
pointer, more bytes than expected.

A download cut off mid-file (a reset connection, a timeout, a body shorter than its
``Content-Length``) is tried again (:mod:`~kubesage.core.traces.fetch_retry`), and the
next attempt asks only for the bytes still missing — ``Range: bytes=<held>-`` — when the
answer the held bytes came from named the file's version: a strong ``ETag``, or else its
``Last-Modified`` date. The version goes in ``If-Range``, so a mirror whose file changed
in between sends the whole new file rather than the rest of another one. What the mirror
answers decides where the body goes:

- 206 whose ``Content-Range`` starts at the bytes held: after them;
- 200 (the mirror ignores ranges, or the file changed): from the start, the held bytes
  dropped;
- 206 starting elsewhere, or 416 (the range no longer fits the file): the held bytes are
  dropped and the whole file asked for at once.

Without a version (neither header, or only a weak ``ETag``) nothing is resumed: bytes
whose version cannot be named might belong to another file. A resumed file is checked
as a whole one is, by its checksum (pinned, or the first download's recorded sum).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from kubesage.core.errors import FetchError
from kubesage.core.traces.fetch_archives import lfs_pointer

ProgressCallback = Callable[[str, int, int | None], None]
"""Called as ``(file_name, bytes_done, bytes_total)`` while downloading (total None:
not known before the download ends)."""
PARTIAL_CONTENT = 206
RANGE_NOT_SATISFIABLE = 416
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$")


@dataclass
class Partial:
    """A download in progress: its temporary file, the bytes written to it, and the
    version of the file they came from (None: they cannot be continued)."""

    path: Path
    size: int = 0
    version: str | None = None

    def headers(self) -> dict[str, str]:
        """The request's headers: the range of the missing bytes when the held ones can
        be continued, none otherwise."""
        if self.size == 0 or self.version is None:
            return {}
        return {"Range": f"bytes={self.size}-", "If-Range": self.version}

    def start_of(self, response: httpx.Response) -> int | None:
        """Where ``response``'s body goes in the file: after the held bytes or at 0;
        None when the answer to a range cannot be used and the file must be asked for
        whole (an error status otherwise is the caller's to raise)."""
        asked = bool(self.headers())
        if response.status_code == RANGE_NOT_SATISFIABLE and asked:
            return None
        if response.status_code != PARTIAL_CONTENT:
            return 0
        match = _CONTENT_RANGE.match(response.headers.get("content-range", ""))
        if not asked or match is None or int(match.group(1)) != self.size:
            return None
        return self.size

    def begin(self, response: httpx.Response, start: int) -> None:
        """Record that ``response``'s body is written from ``start`` on."""
        if start == 0:
            self.size = 0
            self.version = version_of(response)

    def drop(self) -> None:
        """Forget the held bytes (the file is cut back when the next body is written)."""
        self.size = 0
        self.version = None


def version_of(response: httpx.Response) -> str | None:
    """What names the file's version in ``If-Range``: a strong ETag, or else the
    Last-Modified date (RFC 9110 §13.1.5 allows no weak ETag there)."""
    etag: str | None = response.headers.get("etag")
    if etag and not etag.startswith("W/"):
        return etag
    modified: str | None = response.headers.get("last-modified")
    return modified


def transfer(
    http: httpx.Client,
    url: str,
    partial: Partial,
    name: str,
    size_bytes: int | None,
    limit: int,
    on_progress: ProgressCallback | None,
) -> None:
    """One attempt: stream the file ``name`` from ``url``, or the rest of it, into
    ``partial``'s file, at most ``limit`` bytes in all. A mirror whose answer to a range
    cannot be used is asked once more, for the whole file; one that answers that with
    part of it too is a FetchError."""
    for _ in range(2):
        with http.stream("GET", url, headers=partial.headers()) as response:
            start = partial.start_of(response)
            if start is None:
                partial.drop()
                continue
            response.raise_for_status()
            if response.headers.get("content-type", "").startswith("text/html"):
                raise FetchError(
                    f"{url}: the server sent an HTML page (a login page or a captive portal?), "
                    "not the file; nothing was written to the cache"
                )
            partial.begin(response, start)

            def written(done: int) -> None:
                if on_progress:
                    on_progress(name, done, size_bytes)

            _write_body(url, response, partial, limit, written)
            return
    raise FetchError(
        f"{url}: the server answered a request for the whole file with part of it "
        f"(HTTP {response.status_code}, Content-Range "
        f"{response.headers.get('content-range')!r}); nothing was written to the cache"
    )


def _write_body(
    url: str, response: httpx.Response, partial: Partial, limit: int, written: Callable[[int], None]
) -> None:
    """Write ``response``'s body after the bytes ``partial`` holds, counting them as they
    reach the file (``written`` is told the count after each chunk), and sync it."""
    with partial.path.open("r+b") as out:
        out.seek(partial.size)
        out.truncate()
        for chunk in response.iter_bytes():
            if partial.size == 0 and lfs_pointer(chunk):
                raise FetchError(
                    f"{url}: the server sent a Git LFS pointer, not the file; fetch from "
                    "a mirror that serves LFS content (--base-url)"
                )
            if partial.size + len(chunk) > limit:
                raise FetchError(
                    f"{url}: the server sent more than the expected {limit} "
                    "bytes; stopped reading, nothing was written to the cache"
                )
            out.write(chunk)
            partial.size += len(chunk)
            written(partial.size)
        out.flush()
        os.fsync(out.fileno())
