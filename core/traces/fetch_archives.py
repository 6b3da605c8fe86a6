"""What ``kubesage data fetch`` does with a downloaded archive: the CSV inside it, kept
gzip-compressed beside it.

Alibaba's GenAI serving trace publishes each metric as ``<metric>.tar.gz`` holding one
CSV; the project's readers take ``<metric>.csv.gz``. :func:`extract_csv` writes that
file from the archive (the member named ``<metric>.csv``, written as the one pass over
the compressed stream reaches it; else the archive's only CSV) through a private
temporary file, fsynced and renamed at the end, and then records
which archive it came from (``<metric>.csv.gz.source``: the archive's SHA-256). It is
written again whenever that record does not name the archive's bytes, so neither a file
from a killed run nor one placed there by hand passes for the archive's CSV.

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


class ArchiveError(FetchError):
    """The archive itself is wrong: not a readable tar, or without the CSV."""


LFS_POINTER_START = b"version https://git-lfs"
"""How a Git LFS pointer file begins."""


def lfs_pointer(first_bytes: bytes) -> bool:
    """Whether a download that begins with ``first_bytes`` is a Git LFS pointer."""
    return first_bytes.startswith(LFS_POINTER_START)


def extracted_path(archive: Path, member: str) -> Path:
    """Where :func:`extract_csv` writes ``member`` of ``archive``: ``<member>.gz`` beside it."""
    return archive.with_name(f"{member}.gz")


def _source_record(target: Path) -> Path:
    return target.with_name(target.name + ".source")


def extract_csv(archive: Path, member: str, archive_sha256: str) -> Path:
    """The CSV ``member`` of the tar ``archive`` (whose SHA-256 is ``archive_sha256``) as
    ``<member>.gz`` beside it (see the module docstring); FetchError when the archive
    cannot be read or holds no such CSV (:class:`ArchiveError`), or the CSV cannot be
    written."""
    target = extracted_path(archive, member)
    record = _source_record(target)
    try:
        if target.is_file() and record.is_file() and record.read_text().strip() == archive_sha256:
            return target
    except OSError as exc:
        raise FetchError(f"cannot read {record}: {exc.strerror or exc}") from exc
    part = target.with_name(f"{target.name}.{os.getpid()}-{secrets.token_hex(4)}.part")
    try:
        # One pass over the compressed stream: the named member is written as it is
        # reached. Only an archive without it, whose only CSV must be found first, is
        # read twice.
        with tarfile.open(archive, "r:*") as tar:
            files: list[tarfile.TarInfo] = []
            written = None
            for info in tar:
                if not info.isfile():
                    continue
                files.append(info)
                if PurePosixPath(info.name).name == member:
                    if written is not None:
                        raise ArchiveError(
                            f"{archive}: expected one {member} in the archive; it holds "
                            f"{written.name} and {info.name}"
                        )
                    _write_gzip(tar, info, part)
                    written = info
        if written is None:
            with tarfile.open(archive, "r:*") as tar:
                _write_gzip(tar, _only_csv(files, archive, member), part)
        os.replace(part, target)
        record.write_text(archive_sha256 + "\n")
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        detail = " ".join(str(exc).split())  # tarfile's reasons span lines
        raise ArchiveError(f"{archive}: not a readable tar archive ({detail})") from exc
    except OSError as exc:  # reading the archive or writing the CSV
        reason = exc.strerror or str(exc)
        raise FetchError(f"extracting {member} from {archive} to {target}: {reason}") from exc
    finally:
        part.unlink(missing_ok=True)
    return target


def _write_gzip(tar: tarfile.TarFile, info: tarfile.TarInfo, part: Path) -> None:
    """``info``'s bytes, gzip-compressed, to ``part`` (fsynced)."""
    reader = tar.extractfile(info)
    if reader is None:  # pragma: no cover - only regular files are passed
        raise FetchError(f"{info.name} is not a regular file")
    with reader, part.open("wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as out:
            shutil.copyfileobj(reader, out, 1 << 20)
        raw.flush()
        os.fsync(raw.fileno())


def _only_csv(files: list[tarfile.TarInfo], archive: Path, member: str) -> tarfile.TarInfo:
    """The archive's only CSV, for an archive without ``member``."""
    csvs = [info for info in files if info.name.endswith(".csv")]
    if len(csvs) == 1:
        return csvs[0]
    found = ", ".join(info.name for info in files[:10]) or "no files"
    raise ArchiveError(f"{archive}: expected one {member} in the archive; it holds {found}")
