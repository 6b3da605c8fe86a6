"""Download public trace files into a local cache and verify their checksums.

``kubesage data fetch openb`` fetches the openb GPU trace files from Alibaba's
public ``clusterdata`` repository at a pinned commit, so every user gets the same
bytes. A file already in the cache with the right SHA-256 is not fetched again; a
download is written to a temporary file and renamed only after its checksum
matches, so the cache never holds a partial or wrong file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from kubesage.core import paths
from kubesage.core.errors import FetchError, InputError

CLUSTERDATA_COMMIT = "7a6c496"
OPENB_BASE_URL = (
    "https://raw.githubusercontent.com/alibaba/clusterdata/"
    f"{CLUSTERDATA_COMMIT}/cluster-trace-gpu-v2023/csv/"
)


@dataclass(frozen=True)
class RemoteFile:
    """One file of a data set: its name, expected size and SHA-256."""

    name: str
    size_bytes: int
    sha256: str


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
}

ProgressCallback = Callable[[str, int, int], None]
"""Called as ``(file_name, bytes_done, bytes_total)`` while downloading."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code >= 500


def fetch_dataset(
    name: str,
    *,
    cache_dir: Path | None = None,
    base_url: str | None = None,
    client: httpx.Client | None = None,
    on_progress: ProgressCallback | None = None,
    attempts: int = 4,
) -> list[Path]:
    """Make sure every file of data set ``name`` is in the cache; return their paths."""
    dataset = DATASETS.get(name)
    if dataset is None:
        raise InputError(f"unknown data set '{name}'; known: {', '.join(sorted(DATASETS))}")
    target = (cache_dir or paths.cache_dir()) / dataset.name
    target.mkdir(parents=True, exist_ok=True)
    url_base = base_url or dataset.base_url
    if not url_base.endswith("/"):
        url_base += "/"
    owned = client is None
    http = client or httpx.Client(timeout=httpx.Timeout(30.0), follow_redirects=True)
    try:
        return [
            _fetch_one(
                http, url_base + remote.name, target / remote.name, remote, on_progress, attempts
            )
            for remote in dataset.files
        ]
    finally:
        if owned:
            http.close()


def _fetch_one(
    http: httpx.Client,
    url: str,
    path: Path,
    remote: RemoteFile,
    on_progress: ProgressCallback | None,
    attempts: int,
) -> Path:
    if path.is_file() and sha256_of(path) == remote.sha256:
        if on_progress:
            on_progress(remote.name, remote.size_bytes, remote.size_bytes)
        return path
    partial = path.with_name(path.name + ".part")

    @retry(
        retry=retry_if_exception(_is_transient),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.5, max=8.0),
        reraise=True,
    )
    def download() -> None:
        digest = hashlib.sha256()
        done = 0
        with http.stream("GET", url) as response, partial.open("wb") as out:
            response.raise_for_status()
            for chunk in response.iter_bytes():
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                if on_progress:
                    on_progress(remote.name, done, remote.size_bytes)
        if digest.hexdigest() != remote.sha256:
            partial.unlink(missing_ok=True)
            raise FetchError(
                f"{url}: checksum mismatch (got sha256 {digest.hexdigest()}, "
                f"expected {remote.sha256}); nothing was written to the cache"
            )

    try:
        download()
    except httpx.HTTPError as exc:
        partial.unlink(missing_ok=True)
        raise FetchError(f"{url}: download failed after {attempts} attempt(s): {exc}") from exc
    partial.replace(path)
    return path
