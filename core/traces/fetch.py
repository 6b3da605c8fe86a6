"""Download public trace files into a local cache and verify their checksums.

``kubesage data fetch openb`` fetches the openb GPU trace files from Alibaba's
public ``clusterdata`` repository at a pinned commit, so every user gets the same
bytes. A file already in the cache with the right SHA-256 is not fetched again; a
download is written to a temporary file and renamed only after its checksum
matches, so the cache never holds a partial or wrong file.

``kubesage data fetch openb-variants`` fetches the trace's other openb pod lists (the
FGD paper's variants that ``openb`` leaves out). ``kubesage data fetch genai`` fetches
the GenAI serving trace's per-pod metrics, all their hours (the project's tests use the
first 16), from the same commit: one ``<metric>.tar.gz`` each, whose CSV is kept as
``<metric>.csv.gz`` beside it (:mod:`~kubesage.core.traces.fetch_archives`), the form
``kubesage forecast … --data`` reads. The sizes and checksums of these two sets were not
known when this release was cut, so they are not pinned here: the commit pins their
content, a download is capped at :data:`MAX_UNPINNED_BYTES`, and the SHA-256 of the
first download is recorded beside it (``<file>.sha256``) and checked on later runs,
which fetch again a file that no longer matches. Each of those pod lists is also read as
one (:func:`~kubesage.core.traces.openb.read_pods`) before it is kept and before a cached
copy is trusted again, so a download cut short or a portal's page is never recorded as
the file; an archive is opened before the next file is fetched, and one that is not an
archive is removed with its sum at once. A Git LFS pointer or an HTML page served
instead of a file is a FetchError saying so, as is a proxy setting httpx cannot use.

Every download writes its own temporary file beside the target
(``<file>.<pid>-<random>.part``), stops reading once more bytes than expected arrive,
fsyncs, hashes the file as it is on disk and only then renames it over the target with
:func:`os.replace`. Two runs sharing one cache therefore never write into the same
file; whichever finishes last replaces the file with the same verified bytes. An
attempt cut off mid-file is continued by the next from the bytes it wrote, where the
mirror allows (:mod:`~kubesage.core.traces.fetch_transfer`), and a download stopped by
an HTTP error or Ctrl-C is continued by the next run
(:mod:`~kubesage.core.traces.fetch_parking`). Any other failed download removes its
temporary file; one left by a killed run is removed by a later successful fetch of that
file once it is an hour old. A cache that
cannot be written is a :class:`FetchError` naming the folder; a read-only cache that
already holds verified files keeps working. Only ``http://`` and ``https://`` base
URLs are accepted (a ``file://`` mirror is an InputError, not retried). What is
tried again, and after how long, is :mod:`~kubesage.core.traces.fetch_retry`'s rule.
"""

from __future__ import annotations

import glob
import hashlib
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from tenacity import retry, retry_if_exception, stop_after_attempt

from kubesage.core import paths
from kubesage.core.errors import FetchError, InputError, KubesageError
from kubesage.core.traces.fetch_archives import (
    ArchiveError,
    extract_csv,
    extracted_path,
)
from kubesage.core.traces.fetch_parking import adopt, discard, park
from kubesage.core.traces.fetch_retry import is_transient, wait_s
from kubesage.core.traces.fetch_transfer import Partial, ProgressCallback, transfer
from kubesage.core.traces.openb import read_pods

CLUSTERDATA_COMMIT = "7a6c496"
CLUSTERDATA_URL = f"https://raw.githubusercontent.com/alibaba/clusterdata/{CLUSTERDATA_COMMIT}/"
OPENB_BASE_URL = f"{CLUSTERDATA_URL}cluster-trace-gpu-v2023/csv/"
GENAI_BASE_URL = f"{CLUSTERDATA_URL}cluster-trace-v2026-GenAI/"
GENAI_METRICS = (
    "pod_gpu_duty_cycle_anon",
    "pod_gpu_memory_used_bytes_anon",
    "pod_memory_util_anon",
    "qps",
)
"""The GenAI trace's per-pod series the forecasters read (``../shared/data/genai``'s files)."""
OPENB_OTHER_POD_LISTS = (
    "cpu0", "cpu037", "cpu072", "cpu100", "cpu200", "cpu235", "cpu250", "cpu300",
    "gpushare20", "gpushare60", "gpushare80", "gpushare100",
    "gpuspec05", "gpuspec10", "gpuspec25", "gpuspec33",
    "multigpu30", "multigpu40", "multigpu50",
)  # fmt: skip
"""The trace's other openb pod lists (the FGD paper's variants beside the five above)."""
MAX_UNPINNED_BYTES = 8 << 30
"""The most a file without a pinned size may take (8 GiB)."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a data set: its name, expected size and SHA-256 (None: not pinned, see
    the module docstring), and for an archive the CSV member to keep (``extract``)."""

    name: str
    size_bytes: int | None
    sha256: str | None
    extract: str | None = None
    """A tar archive's CSV, kept as ``<extract>.gz`` beside it; what the fetch returns."""
    check: Callable[[Path], object] | None = None
    """Reads a download without a pinned checksum before it is kept (and a cached copy
    before it is trusted again); raises KubesageError when it is not what it should be."""


@dataclass(frozen=True)
class Dataset:
    """A named set of files under one base URL."""

    name: str
    base_url: str
    files: tuple[RemoteFile, ...]


DATASETS: dict[str, Dataset] = {
    "openb": Dataset(
        name="openb",
        base_url=OPENB_BASE_URL,
        files=(
            RemoteFile(
                "openb_node_list_all_node.csv",
                52_287,
                "5a85c2af79c66a1efff8bbcbda430400aae56d8431370d738480967e1a9c6b15",
            ),
            RemoteFile(
                "openb_node_list_gpu_node.csv",
                42_353,
                "2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5",
            ),
            RemoteFile(
                "openb_pod_list_default.csv",
                575_468,
                "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8",
            ),
            RemoteFile(
                "openb_pod_list_cpu050.csv",
                525_811,
                "747f43247bffc2b0bb081d7f61f0705ca8d390dafc0b647e642c92f3baf3ba1e",
            ),
            RemoteFile(
                "openb_pod_list_gpushare40.csv",
                572_662,
                "d83ce79a4eb6987524bedbb0c65e41aed3a36bf6c1b78b86234c3687a07e1d40",
            ),
            RemoteFile(
                "openb_pod_list_gpuspec20.csv",
                582_612,
                "6b9b89ab8913c1c074e994e98f548cf1a872fc5f76f2442ca8cd514a478b00a9",
            ),
            RemoteFile(
                "openb_pod_list_multigpu20.csv",
                271_530,
                "d9ec6f6c74fb980cc0b81239470c6353fceea077ea9abd610003b604c7cc2b01",
            ),
        ),
    ),
    "openb-variants": Dataset(
        name="openb-variants",
        base_url=OPENB_BASE_URL,
        files=tuple(
            RemoteFile(f"openb_pod_list_{name}.csv", None, None, check=read_pods)
            for name in OPENB_OTHER_POD_LISTS
        ),
    ),
    "genai": Dataset(
        name="genai",
        base_url=GENAI_BASE_URL,
        files=tuple(
            RemoteFile(f"{metric}.tar.gz", None, None, extract=f"{metric}.csv")
            for metric in GENAI_METRICS
        ),
    ),
}

SUPPORTED_SCHEMES = ("http", "https")
PART_SUFFIX = ".part"
STALE_PART_SECONDS = 3600.0
"""A temporary file untouched this long belongs to a run that was killed."""

SUM_SUFFIX = ".sha256"
"""Beside a file without a pinned checksum: the SHA-256 of its first download."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _cache_error(what: str, path: Path, exc: OSError) -> FetchError:
    reason = exc.strerror or str(exc)
    return FetchError(
        f"cannot {what} {path}: {reason}; choose a writable cache with --cache-dir "
        "or KUBESAGE_CACHE_DIR"
    )


def _checked_base_url(url: str) -> str:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InputError(f"base URL '{url}' is not a valid URL: {exc}") from exc
    scheme = parsed.scheme
    if parsed.query or parsed.fragment:
        raise InputError(
            f"base URL '{url}': a mirror's folder has no query or fragment (the file names "
            "are appended to its path)"
        )
    if scheme not in SUPPORTED_SCHEMES:
        raise InputError(
            f"base URL '{url}': only http:// and https:// mirrors are supported "
            f"(got '{scheme or 'no scheme'}')"
        )
    return url if url.endswith("/") else url + "/"


def fetch_dataset(
    name: str,
    *,
    cache_dir: Path | None = None,
    base_url: str | None = None,
    client: httpx.Client | None = None,
    on_progress: ProgressCallback | None = None,
    attempts: int = 4,
) -> list[Path]:
    """Make sure every file of data set ``name`` is in the cache; return their paths.

    Raises InputError for an unknown data set or a base URL that is not http(s), and
    FetchError for a failed download, a wrong checksum or a cache that cannot be written.
    """
    dataset = DATASETS.get(name)
    if dataset is None:
        raise InputError(f"unknown data set '{name}'; known: {', '.join(sorted(DATASETS))}")
    url_base = _checked_base_url(base_url or dataset.base_url)
    target = (cache_dir or paths.cache_dir()) / dataset.name
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cache_error("create the cache folder", target, exc) from exc
    owned = client is None
    http = client or _client()
    try:
        fetched: list[Path] = []
        for remote in dataset.files:
            path = _fetch_one(
                http, url_base + remote.name, target / remote.name, remote, on_progress, attempts
            )
            # An archive is opened before the next download: a bad one is removed now,
            # not one per run after every download has been made.
            fetched.append(_extracted(path, remote.extract) if remote.extract else path)
        return fetched
    finally:
        if owned:
            http.close()


PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")


def _client() -> httpx.Client:
    """The HTTP client, with the proxy the environment names (as httpx reads it)."""
    try:
        return httpx.Client(timeout=httpx.Timeout(30.0), follow_redirects=True)
    except (ImportError, ValueError) as exc:  # socks5:// without socksio, ftp://, …
        named = [
            f"{name}={os.environ[variant]}"
            for name in PROXY_VARIABLES
            for variant in (name, name.lower())
            if os.environ.get(variant)
        ]
        raise FetchError(
            f"cannot use the proxy the environment names ({', '.join(named) or 'none set'}): {exc}"
        ) from exc


def _extracted(archive: Path, member: str) -> Path:
    """The archive's CSV beside it (:func:`extract_csv`). An archive that is not one, or
    lacks the CSV, is removed with its recorded sum, so the next run downloads it again
    rather than trusting a first download that was never the archive."""
    try:
        recorded = _recorded_sum(archive).read_text().strip()
    except OSError as exc:
        raise _cache_error("read the recorded sum of", archive, exc) from exc
    try:
        return extract_csv(archive, member, recorded)
    except ArchiveError as exc:
        try:
            archive.unlink(missing_ok=True)
            _recorded_sum(archive).unlink(missing_ok=True)
            again = "removed from the cache, the next fetch downloads it again"
        except OSError as removal:
            again = f"remove it from the cache ({removal.strerror or removal}) to fetch it again"
        raise FetchError(f"{exc}; {again}") from exc
    finally:
        _remove_stale_parts(extracted_path(archive, member))


def _recorded_sum(path: Path) -> Path:
    return path.with_name(path.name + SUM_SUFFIX)


def pinned(name: str) -> bool:
    """Whether every file of data set ``name`` has a pinned checksum."""
    return all(remote.sha256 is not None for remote in DATASETS[name].files)


def _is_verified(path: Path, remote: RemoteFile) -> bool:
    """Whether ``path`` already holds the right bytes (a read-only cache is fine): the
    pinned ones, or for a file without a pinned checksum those of its first download."""
    if not path.is_file():
        return False
    try:
        if remote.sha256 is None:
            recorded = _recorded_sum(path)
            if not recorded.is_file() or recorded.read_text().strip() != sha256_of(path):
                return False
            return _passes_check(path, remote) is None  # else fetched again, replacing it
        return path.stat().st_size == remote.size_bytes and sha256_of(path) == remote.sha256
    except OSError as exc:
        raise _cache_error("read the cached file", path, exc) from exc


def _passes_check(path: Path, remote: RemoteFile) -> str | None:
    """Why ``path`` fails ``remote.check`` (None: it passes, or there is no check)."""
    if remote.check is None:
        return None
    try:
        remote.check(path)
    except KubesageError as exc:
        return str(exc)
    return None


def _record_sum(path: Path, digest: str) -> None:
    """Write ``digest`` beside ``path`` (a private temporary file renamed over it)."""
    fd, part = _new_part(_recorded_sum(path))
    try:
        with os.fdopen(fd, "w") as out:
            out.write(digest + "\n")
        os.replace(part, _recorded_sum(path))
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def _new_part(path: Path) -> tuple[int, Path]:
    """Create a temporary file beside ``path`` that no other download shares.

    ``os.open`` with ``O_EXCL`` rather than ``tempfile.mkstemp``: the same guarantee,
    but the file gets the usual umask-derived mode, not 0600, so a shared cache stays
    readable after the rename.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        part = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}{PART_SUFFIX}")
        try:
            return os.open(part, flags, 0o666), part
        except FileExistsError:
            continue


def _remove_stale_parts(path: Path) -> None:
    """Remove temporary files of ``path`` left by downloads that were killed long ago."""
    cutoff = time.time() - STALE_PART_SECONDS
    for part in path.parent.glob(f"{glob.escape(path.name)}.*{PART_SUFFIX}"):
        try:
            if part.stat().st_mtime < cutoff:
                part.unlink()
        except OSError:
            pass  # another run removed it, or the folder is read-only: harmless


def _keep(part: Path, path: Path, url: str, remote: RemoteFile) -> None:
    """Verify the finished download as it is on disk and rename it over ``path``."""
    # hash what is on disk, not what was received: the file is what the cache keeps
    actual = sha256_of(part)
    if remote.sha256 is not None and actual != remote.sha256:
        raise FetchError(
            f"{url}: checksum mismatch (got sha256 {actual}, "
            f"expected {remote.sha256}); nothing was written to the cache"
        )
    problem = _passes_check(part, remote)
    if problem is not None:
        raise FetchError(
            f"{url}: the download is not a {remote.name} ({problem}); nothing was "
            "written to the cache"
        )
    # atomic: a concurrent run that finishes second replaces it with the same bytes
    os.replace(part, path)
    if remote.sha256 is None:
        _record_sum(path, actual)


def _fetch_one(
    http: httpx.Client,
    url: str,
    path: Path,
    remote: RemoteFile,
    on_progress: ProgressCallback | None,
    attempts: int,
) -> Path:
    if _is_verified(path, remote):
        if on_progress:
            size = path.stat().st_size
            on_progress(remote.name, size, size)
        return path
    try:
        fd, part = _new_part(path)
        os.close(fd)
    except OSError as exc:
        raise _cache_error("write to the cache folder", path.parent, exc) from exc
    partial = Partial(part)
    limit = remote.size_bytes if remote.size_bytes is not None else MAX_UNPINNED_BYTES
    made = 0
    kept = ""

    @retry(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(attempts),
        wait=wait_s,
        reraise=True,
    )
    def download() -> None:
        nonlocal made
        made += 1
        transfer(http, url, partial, remote.name, remote.size_bytes, limit, on_progress)

    try:
        try:
            try:
                adopt(partial, path, url)  # what a stopped run left, if it is this URL's
                download()
            except (httpx.HTTPError, KeyboardInterrupt):
                if park(partial, path, url):  # for the next run to go on from
                    kept = f"; the {partial.size} bytes held are kept for the next fetch"
                raise
            if on_progress and remote.size_bytes is None:
                on_progress(remote.name, partial.size, partial.size)  # the total is known now
            _keep(part, path, url, remote)
        except httpx.HTTPError as exc:
            raise FetchError(
                f"{url}: download failed after {made} attempt(s): {exc}{kept}"
            ) from exc
        except OSError as exc:
            raise _cache_error("write to the cache folder", path.parent, exc) from exc
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    discard(path)
    _remove_stale_parts(path)
    return path
