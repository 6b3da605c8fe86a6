"""``fetch_dataset`` and ``kubesage data fetch`` against a real HTTP server on 127.0.0.1.

Nothing here reaches beyond the loopback interface: every data set used is a tiny one
registered for the test, served by a ``ThreadingHTTPServer`` on an ephemeral port.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kubesage.core.cli.main import app
from kubesage.core.errors import FetchError, InputError
from kubesage.core.paths import cache_dir as default_cache_dir
from kubesage.core.traces import fetch as fetch_module
from kubesage.core.traces.fetch import Dataset, RemoteFile, fetch_dataset
from tests.core.traces.http_mirror import (  # noqa: F401 (no_proxy: autouse fixture)
    QuietHandler,
    no_proxy,
    serving,
)

FILES = {
    "alpha.csv": b"sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,0,\n",
    "beta.csv": b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + b"p0,1,1,0,0\n" * 5000,
}
NAME = "tiny"
PREFIX = "/mirror/"


@dataclass
class Server:
    """A loopback HTTP server over ``root`` that counts requests and can fail on purpose."""

    root: Path
    url: str = ""
    requests: Counter[str] = field(default_factory=Counter)
    # file name -> status codes to answer (in order) before serving the file
    failures: dict[str, list[int]] = field(default_factory=dict)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    root = tmp_path / "served"
    root.mkdir()
    for name, data in FILES.items():
        (root / name).write_bytes(data)
    state = Server(root=root)

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if not self.path.startswith(PREFIX):
                self.send_error(404)
                return
            name = self.path[len(PREFIX) :]
            state.requests[name] += 1
            pending = state.failures.get(name)
            if pending:
                code = pending.pop(0)
                if code == 429:  # a throttling mirror says how long to wait
                    self.send_response(429)
                    self.send_header("Retry-After", "2")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_error(code)
                return
            path = state.root / name
            if "/" in name or not path.is_file():
                self.send_error(404)
                return
            self.send_bytes(path.read_bytes(), "text/csv")

    with serving(Handler) as url:
        state.url = f"{url}{PREFIX}"
        yield state


@pytest.fixture
def dataset(server: Server, monkeypatch: pytest.MonkeyPatch) -> Dataset:
    """Register a two-file data set whose base URL is the local server."""
    tiny = Dataset(
        name=NAME,
        base_url=server.url,
        files=tuple(
            RemoteFile(name, len(data), hashlib.sha256(data).hexdigest())
            for name, data in FILES.items()
        ),
    )
    monkeypatch.setattr(fetch_module, "DATASETS", {NAME: tiny})
    return tiny


def cached_files(cache: Path) -> list[str]:
    folder = cache / NAME
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# --------------------------------------------------------------------------- fetch_dataset


def test_first_fetch_downloads_and_verifies(tmp_path: Path, server: Server, dataset: Dataset):
    cache = tmp_path / "cache"
    progress: list[tuple[str, int, int]] = []
    paths = fetch_dataset(NAME, cache_dir=cache, on_progress=lambda *a: progress.append(a))
    assert paths == [cache / NAME / name for name in FILES]
    for path, data in zip(paths, FILES.values(), strict=True):
        assert path.read_bytes() == data
    assert cached_files(cache) == sorted(FILES)  # no .part left behind
    assert server.requests == {name: 1 for name in FILES}
    for name, data in FILES.items():
        last = [p for p in progress if p[0] == name][-1]
        assert last == (name, len(data), len(data))
        done = [p[1] for p in progress if p[0] == name]
        assert done == sorted(done)


def test_second_fetch_uses_the_cache(tmp_path: Path, server: Server, dataset: Dataset):
    cache = tmp_path / "cache"
    first = fetch_dataset(NAME, cache_dir=cache)
    progress: list[tuple[str, int, int]] = []
    second = fetch_dataset(NAME, cache_dir=cache, on_progress=lambda *a: progress.append(a))
    assert second == first
    assert server.requests == {name: 1 for name in FILES}  # nothing fetched again
    assert progress == [(name, len(data), len(data)) for name, data in FILES.items()]


def test_a_damaged_cached_file_is_fetched_again(
    tmp_path: Path, server: Server, dataset: Dataset
) -> None:
    cache = tmp_path / "cache"
    fetch_dataset(NAME, cache_dir=cache)
    (cache / NAME / "beta.csv").write_bytes(b"truncated")
    fetch_dataset(NAME, cache_dir=cache)
    assert (cache / NAME / "beta.csv").read_bytes() == FILES["beta.csv"]
    assert server.requests == {"alpha.csv": 1, "beta.csv": 2}


def test_base_url_override_with_or_without_slash(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch, dataset: Dataset
) -> None:
    # the registered base URL is unreachable; only the override can work
    unreachable = Dataset(name=NAME, base_url="http://127.0.0.1:9/nothing/", files=dataset.files)
    monkeypatch.setattr(fetch_module, "DATASETS", {NAME: unreachable})
    a = fetch_dataset(NAME, cache_dir=tmp_path / "a", base_url=server.url.rstrip("/"))
    b = fetch_dataset(NAME, cache_dir=tmp_path / "b", base_url=server.url)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b] == list(FILES.values())


def test_checksum_mismatch_leaves_nothing_in_the_cache(
    tmp_path: Path, server: Server, dataset: Dataset
) -> None:
    (server.root / "alpha.csv").write_bytes(b"tampered\n")
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match="checksum mismatch") as info:
        fetch_dataset(NAME, cache_dir=cache)
    assert "alpha.csv" in str(info.value)
    assert hashlib.sha256(b"tampered\n").hexdigest() in str(info.value)
    assert cached_files(cache) == []
    assert server.requests["alpha.csv"] == 1  # a wrong checksum is not retried


def test_checksum_mismatch_on_a_later_file_keeps_the_good_ones(
    tmp_path: Path, server: Server, dataset: Dataset
) -> None:
    (server.root / "beta.csv").write_bytes(FILES["beta.csv"][:-1])
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match="checksum mismatch"):
        fetch_dataset(NAME, cache_dir=cache)
    assert cached_files(cache) == ["alpha.csv"]


def test_not_found_is_a_fetch_error(tmp_path: Path, server: Server, dataset: Dataset) -> None:
    (server.root / "alpha.csv").unlink()
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match="404") as info:
        fetch_dataset(NAME, cache_dir=cache)
    assert f"{server.url}alpha.csv" in str(info.value)
    assert cached_files(cache) == []
    assert server.requests["alpha.csv"] == 1  # a 4xx is not retried


def test_server_error_is_retried(tmp_path: Path, server: Server, dataset: Dataset) -> None:
    server.failures["alpha.csv"] = [500]
    cache = tmp_path / "cache"
    paths = fetch_dataset(NAME, cache_dir=cache, attempts=2)
    assert paths[0].read_bytes() == FILES["alpha.csv"]
    assert server.requests == {"alpha.csv": 2, "beta.csv": 1}
    assert cached_files(cache) == sorted(FILES)


def test_a_throttled_or_timed_out_request_is_asked_again_after_the_wait_asked_for(
    tmp_path: Path, server: Server, dataset: Dataset
) -> None:
    """429 and 408 mean "not now": retried, and a 429's Retry-After (2 s) is waited for
    although the backoff alone would be 0.5 s (1 s for both files)."""
    server.failures["alpha.csv"] = [429]
    server.failures["beta.csv"] = [408]
    started = time.monotonic()
    paths = fetch_dataset(NAME, cache_dir=tmp_path / "cache", attempts=2)
    assert time.monotonic() - started >= 2.0
    assert [path.read_bytes() for path in paths] == [FILES["alpha.csv"], FILES["beta.csv"]]
    assert server.requests == {"alpha.csv": 2, "beta.csv": 2}


def test_server_error_every_time_gives_up(tmp_path: Path, server: Server, dataset: Dataset) -> None:
    server.failures["alpha.csv"] = [503, 503, 503]
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match=r"after 2 attempt\(s\)"):
        fetch_dataset(NAME, cache_dir=cache, attempts=2)
    assert server.requests["alpha.csv"] == 2
    assert cached_files(cache) == []


def test_unknown_dataset(tmp_path: Path, dataset: Dataset) -> None:
    with pytest.raises(InputError, match=f"unknown data set 'nope'; known: {NAME}"):
        fetch_dataset("nope", cache_dir=tmp_path)
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"KUBESAGE_CACHE_DIR": "/k", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/k"),
        ({"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/kubesage"),
        ({"XDG_CACHE_HOME": "", "HOME": "/h"}, "/h/.cache/kubesage"),
        ({"HOME": "/h"}, "/h/.cache/kubesage"),
        ({"KUBESAGE_CACHE_DIR": "~/kcache", "HOME": "/h"}, "/h/kcache"),  # a Docker ENV
        ({"XDG_CACHE_HOME": "~/xc", "HOME": "/h"}, "/h/xc/kubesage"),
        ({"XDG_CACHE_HOME": "relative/cache", "HOME": "/h"}, "/h/.cache/kubesage"),  # XDG spec
    ],
)
def test_default_cache_dir(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for name in ("KUBESAGE_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert default_cache_dir() == Path(expected)


# --------------------------------------------------------------------------- the CLI


def test_cli_data_fetch(tmp_path: Path, server: Server, dataset: Dataset) -> None:
    cache = tmp_path / "cache"
    args = ["data", "fetch", NAME, "--cache-dir", str(cache), "--base-url", server.url]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [str(cache / NAME / name) for name in FILES]
    assert f"2 file(s) verified in {cache / NAME}" in " ".join(result.stderr.split())
    for name, data in FILES.items():
        assert (cache / NAME / name).read_bytes() == data

    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert again.stdout == result.stdout
    assert server.requests == {name: 1 for name in FILES}


def test_cli_data_fetch_failure_is_one_line_exit_2(
    tmp_path: Path, server: Server, dataset: Dataset
) -> None:
    (server.root / "beta.csv").unlink()
    cache = tmp_path / "cache"
    result = CliRunner().invoke(
        app, ["data", "fetch", NAME, "--cache-dir", str(cache), "--base-url", server.url]
    )
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "error:" in result.stderr
    assert "404" in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert cached_files(cache) == ["alpha.csv"]


def test_cli_data_fetch_unknown_dataset(tmp_path: Path, dataset: Dataset) -> None:
    result = CliRunner().invoke(app, ["data", "fetch", "nope", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown data set 'nope'" in result.stderr
