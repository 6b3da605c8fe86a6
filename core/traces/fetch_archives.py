"""What ``kubesage data fetch`` does with a downloaded archive: the CSV inside it, kept
gzip-compressed beside it.

Alibaba's GenAI serving trace publishes each metric as ``<metric>.tar.gz`` holding one
CSV; the project's readers take ``<metric>.csv.gz``. :func:`extract_csv` writes that
file from the archive (the member named ``<metric>.csv``, or the archive's only CSV),
through a private temporary file renamed at the end, so a killed run leaves no partial
file behind. It runs again whenever the archive is newer than the CSV it made.

A Git LFS pointer served in place of a file (a text file of three lines beginning
``version https://git-lfs``) is recognised by :func:`lfs_pointer` so that the download
can say what happened instead of failing later as "not an archive".
"""

from __future__ import annotations

import gzip
import os
import secrets
import shutil
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from kubesage.core.errors import FetchError

LFS_POINTER_START = b"version https://git-lfs"
"""How a Git LFS pointer file begins."""


def lfs_pointer(first_bytes: bytes) -> bool:
    """Whether a download that begins with ``first_bytes`` is a Git LFS pointer."""
    return first_bytes.startswith(LFS_POINTER_START)


def extracted_path(archive: Path, member: str) -> Path:
    """Where :func:`extract_csv` writes ``member`` of ``archive``: ``<member>.gz`` beside it."""
    return archive.with_name(f"{member}.gz")


def extract_csv(archive: Path, member: str) -> Path:
    """The CSV ``member`` of the tar ``archive`` as ``<member>.gz`` beside it (see the module
    docstring); FetchError when the archive cannot be read or holds no such CSV."""
    target = extracted_path(archive, member)
    try:
        if target.is_file() and target.stat().st_mtime >= archive.stat().st_mtime:
            return target
    except OSError as exc:
        raise FetchError(f"cannot read {target}: {exc.strerror or exc}") from exc
    part = target.with_name(f"{target.name}.{os.getpid()}-{secrets.token_hex(4)}.part")
    try:
        with tarfile.open(archive, "r:*") as tar:
            source = _member(tar, archive, member)
            reader = tar.extractfile(source)
            if reader is None:  # pragma: no cover - _member returns regular files only
                raise FetchError(f"{archive}: {source.name} is not a regular file")
            with reader, gzip.open(part, "wb", compresslevel=6) as out:
                shutil.copyfileobj(reader, out, 1 << 20)
        os.replace(part, target)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise FetchError(f"{archive}: not a readable tar archive ({exc})") from exc
    except OSError as exc:
        raise FetchError(f"cannot write {target}: {exc.strerror or exc}") from exc
    finally:
        part.unlink(missing_ok=True)
    return target


def _member(tar: tarfile.TarFile, archive: Path, member: str) -> tarfile.TarInfo:
    """The archive's regular file named ``member`` (in any folder), else its only CSV."""
    files = [info for info in tar.getmembers() if info.isfile()]
    named = [info for info in files if PurePosixPath(info.name).name == member]
    if len(named) == 1:
        return named[0]
    csvs = [info for info in files if info.name.endswith(".csv")]
    if not named and len(csvs) == 1:
        return csvs[0]
    found = ", ".join(info.name for info in files[:10]) or "no files"
    raise FetchError(f"{archive}: expected one {member} in the archive; it holds {found}")
