"""``fetch_dataset`` under races, bad mirrors and unwritable caches.

Two fetches into one cache must never leave a corrupt file (each download writes its
own temporary file, verified on disk before the atomic rename); a mirror that sends
too much is cut off; a cache that cannot be written, or a base URL that is not
http(s), is a one-line error rather than a traceback or minutes of retries. Every
file is generated here and served by a ``ThreadingHTTPServer`` on 127.0.0.1.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kubesage.core.cli.main import app
from kubesage.core.errors import FetchError, InputError
from kubesage.core.traces import fetch as fetch_module
from kubesage.core.traces.fetch import Dataset, RemoteFile, fetch_dataset
from tests.core.traces.http_mirror import no_proxy, serving  # noqa: F401 (autouse fixture)

NAME = "tiny"
FILE_NAME = "pods.csv"
DATA = b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + b"".join(
    f"p{i},{i % 97},{i % 89},0,0\n".encode() for i in range(20_000)
)
ENDLESS_CAP = 64 << 20
"""What the ``endless`` mode sends at most when the client never stops reading."""


@dataclass
class Server:
    """Serves ``DATA`` under ``/<mode>/<file>``; modes: full, cut, endless, to-file."""

    url: str = ""
    requests: Counter[str] = field(default_factory=Counter)
    endless_sent: int = 0
    endless_done: threading.Event = field(default_factory=threading.Event)

    def base(self, mode: str) -> str:
        return f"{self.url}/{mode}/"


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            mode, _, name = self.path.strip("/").partition("/")
            state.requests[mode] += 1
            if name != FILE_NAME:
                self.send_error(404)
            elif mode == "to-file":
                self.send_response(302)
                self.send_header("Location", f"file:///{FILE_NAME}")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif mode == "endless":
                self._endless()
            elif mode in ("full", "cut"):
                self.send_response(200)
                self.send_header("Content-Length", str(len(DATA)))
                self.end_headers()
                self.wfile.write(DATA if mode == "full" else DATA[: len(DATA) // 2])
                self.wfile.flush()
                self.close_connection = True
            else:
                self.send_error(404)

        def _endless(self) -> None:
            # no Content-Length: the body ends only when the server closes
            self.send_response(200)
            self.end_headers()
            chunk = b"x" * 65536
            try:
                while state.endless_sent < ENDLESS_CAP:
                    self.wfile.write(chunk)
                    state.endless_sent += len(chunk)
            except OSError:
                pass  # the client hung up: what the test wants
            finally:
                self.close_connection = True
                state.endless_done.set()

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Handler) as url:
        state.url = url
        yield state


@pytest.fixture(autouse=True)
def dataset(monkeypatch: pytest.MonkeyPatch) -> Dataset:
    """One generated file; every test passes its mirror with ``base_url``."""
    tiny = Dataset(
        name=NAME,
        base_url="http://127.0.0.1:9/unused/",
        files=(RemoteFile(FILE_NAME, len(DATA), hashlib.sha256(DATA).hexdigest()),),
    )
    monkeypatch.setattr(fetch_module, "DATASETS", {NAME: tiny})
    return tiny


def folder_entries(cache: Path) -> list[str]:
    folder = cache / NAME
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def assert_verified_or_absent(cache: Path, *, in_flight: bool = False) -> None:
    """The cache holds the right file or nothing; never a partial one.

    ``in_flight``: a download is still running, so its private ``.part`` may exist.
    """
    entries = folder_entries(cache)
    if in_flight:
        entries = [e for e in entries if not e.endswith(".part")]
    assert entries in ([], [FILE_NAME]), entries
    if entries:
        assert (cache / NAME / FILE_NAME).read_bytes() == DATA


# --------------------------------------------------------------------------- races


class Paused:
    """Runs fetch A in a thread that stops after writing its first chunk, until released."""

    def __init__(self, cache: Path, base_url: str) -> None:
        self.wrote = threading.Event()
        self.release = threading.Event()
        self.result: list[Path] | BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(cache, base_url), daemon=True)

    def _progress(self, name: str, done: int, total: int) -> None:
        if not self.wrote.is_set():
            self.wrote.set()
            assert self.release.wait(timeout=30)

    def _run(self, cache: Path, base_url: str) -> None:
        try:
            self.result = fetch_dataset(
                NAME, cache_dir=cache, base_url=base_url, on_progress=self._progress, attempts=1
            )
        except BaseException as exc:  # handed to the test thread
            self.result = exc

    def __enter__(self) -> Paused:
        self.thread.start()
        assert self.wrote.wait(timeout=30), "fetch A never started writing"
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


def test_a_racer_cut_off_mid_body_does_not_touch_the_other_download(
    tmp_path: Path, server: Server
) -> None:
    cache = tmp_path / "cache"
    with Paused(cache, server.base("full")) as a:
        # B starts while A is mid-file, on the same cache, and its body is cut off
        result = CliRunner().invoke(
            app,
            ["data", "fetch", NAME, "--cache-dir", str(cache), "--base-url", server.base("cut")],
        )
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert "peer closed connection" in result.stderr
        assert_verified_or_absent(cache, in_flight=True)
    assert a.result == [cache / NAME / FILE_NAME], a.result
    assert_verified_or_absent(cache)
    assert folder_entries(cache) == [FILE_NAME]
    umask = os.umask(0o022)
    os.umask(umask)
    # the usual mode of a new file, not mkstemp's 0600: a shared cache stays readable
    assert stat.S_IMODE((cache / NAME / FILE_NAME).stat().st_mode) == 0o666 & ~umask


def test_two_complete_racers_both_succeed_with_the_same_bytes(
    tmp_path: Path, server: Server
) -> None:
    cache = tmp_path / "cache"
    with Paused(cache, server.base("full")) as a:
        b = fetch_dataset(NAME, cache_dir=cache, base_url=server.base("full"), attempts=1)
        assert b == [cache / NAME / FILE_NAME]
        assert_verified_or_absent(cache, in_flight=True)
    assert a.result == b, a.result
    assert folder_entries(cache) == [FILE_NAME]
    assert (cache / NAME / FILE_NAME).read_bytes() == DATA
    assert server.requests == {"full": 2}


def test_the_file_is_verified_as_written_on_disk(tmp_path: Path, server: Server) -> None:
    """Bytes that change on disk after arriving (another writer, a bad disk) are caught."""
    cache = tmp_path / "cache"

    def tamper(name: str, done: int, total: int) -> None:
        if done == total:
            for part in (cache / NAME).glob(f"{FILE_NAME}*.part"):
                with part.open("ab") as other:
                    other.write(b"\0" * 65536)

    with pytest.raises(FetchError, match="checksum mismatch"):
        fetch_dataset(
            NAME, cache_dir=cache, base_url=server.base("full"), on_progress=tamper, attempts=1
        )
    assert folder_entries(cache) == []


def test_a_stale_part_of_a_killed_run_is_removed(tmp_path: Path, server: Server) -> None:
    folder = tmp_path / "cache" / NAME
    folder.mkdir(parents=True)
    stale = folder / f"{FILE_NAME}.4242-deadbeef.part"
    live = folder / f"{FILE_NAME}.4343-cafef00d.part"
    stale.write_bytes(b"half")
    live.write_bytes(b"half")
    hours_ago = time.time() - 2 * 3600
    os.utime(stale, (hours_ago, hours_ago))
    fetch_dataset(NAME, cache_dir=tmp_path / "cache", base_url=server.base("full"))
    assert sorted(p.name for p in folder.iterdir()) == sorted([FILE_NAME, live.name])


# --------------------------------------------------------------------------- bad mirrors


def test_a_mirror_sending_too_much_is_cut_off(tmp_path: Path, server: Server) -> None:
    cache = tmp_path / "cache"
    progress: list[int] = []
    with pytest.raises(FetchError, match=f"more than the expected {len(DATA)} bytes"):
        fetch_dataset(
            NAME,
            cache_dir=cache,
            base_url=server.base("endless"),
            on_progress=lambda name, done, total: progress.append(done),
        )
    assert progress and max(progress) <= len(DATA)
    assert server.requests == {"endless": 1}  # not retried
    assert folder_entries(cache) == []
    assert server.endless_done.wait(timeout=30)
    assert server.endless_sent < ENDLESS_CAP  # the client stopped reading


@pytest.mark.parametrize("url", ["http://mirror.test/openb/?token=x", "http://mirror.test/#top"])
def test_a_base_url_with_a_query_or_fragment_is_refused(tmp_path: Path, url: str) -> None:
    # The file name would land after the '?' or '#': a checksum mismatch, not a URL error.
    with pytest.raises(InputError, match="has no query or fragment"):
        fetch_dataset(NAME, cache_dir=tmp_path / "cache", base_url=url)


def test_a_file_url_is_refused_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(InputError, match=r"only http:// and https://.*got 'file'"):
        fetch_dataset(NAME, cache_dir=tmp_path / "cache", base_url=f"file://{tmp_path}/")
    assert time.monotonic() - started < 1.0
    assert not (tmp_path / "cache").exists()

    result = CliRunner().invoke(
        app, ["data", "fetch", NAME, "--cache-dir", str(tmp_path), "--base-url", "ftp://x/"]
    )
    assert result.exit_code == 2
    assert "only http:// and https://" in result.stderr
    assert "Traceback" not in result.output


def test_a_redirect_to_another_scheme_is_not_retried(tmp_path: Path, server: Server) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match=r"after 1 attempt\(s\)"):
        fetch_dataset(NAME, cache_dir=cache, base_url=server.base("to-file"), attempts=4)
    assert server.requests == {"to-file": 1}
    assert folder_entries(cache) == []


# --------------------------------------------------------------------------- unwritable cache


@pytest.mark.parametrize("blocked", ["root", "dataset folder"])
def test_a_cache_that_is_a_file_is_a_one_line_error(
    tmp_path: Path, server: Server, blocked: str
) -> None:
    cache = tmp_path / "cache"
    if blocked == "root":
        cache.write_text("not a folder")
    else:
        cache.mkdir()
        (cache / NAME).write_text("not a folder")
    with pytest.raises(FetchError, match="--cache-dir or KUBESAGE_CACHE_DIR") as info:
        fetch_dataset(NAME, cache_dir=cache, base_url=server.base("full"))
    assert f"cannot create the cache folder {cache / NAME}" in str(info.value)

    args = ["data", "fetch", NAME, "--cache-dir", str(cache), "--base-url", server.base("full")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert str(cache / NAME) in " ".join(result.stderr.split())
    assert server.requests == {}


def read_only_file_system(path: Path) -> tuple[int, Path]:
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))


def test_a_read_only_cache_with_verified_files_keeps_working(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = fetch_dataset(NAME, cache_dir=cache, base_url=server.base("full"))
    monkeypatch.setattr(fetch_module, "_new_part", read_only_file_system)
    assert fetch_dataset(NAME, cache_dir=cache, base_url=server.base("full")) == first
    assert server.requests == {"full": 1}


def test_a_read_only_cache_missing_a_file_is_a_fetch_error(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    (cache / NAME).mkdir(parents=True)
    monkeypatch.setattr(fetch_module, "_new_part", read_only_file_system)
    with pytest.raises(FetchError, match="Read-only file system") as info:
        fetch_dataset(NAME, cache_dir=cache, base_url=server.base("full"))
    assert f"cannot write to the cache folder {cache / NAME}" in str(info.value)
    assert server.requests == {}


def writes_despite_mode(folder: Path) -> bool:
    """Whether this process can create files in a 0555 folder (root with DAC override)."""
    try:
        (folder / "probe").touch()
    except PermissionError:
        return False
    (folder / "probe").unlink()
    return True


def test_a_chmod_read_only_cache(tmp_path: Path, server: Server) -> None:
    cache = tmp_path / "cache"
    folder = cache / NAME
    folder.mkdir(parents=True)
    folder.chmod(0o555)
    try:
        if writes_despite_mode(folder):
            pytest.skip("this user writes into read-only folders (root)")
        with pytest.raises(FetchError, match="Permission denied") as info:
            fetch_dataset(NAME, cache_dir=cache, base_url=server.base("full"))
        assert str(folder) in str(info.value)
        folder.chmod(0o755)
        first = fetch_dataset(NAME, cache_dir=cache, base_url=server.base("full"))
        folder.chmod(0o555)
        assert fetch_dataset(NAME, cache_dir=cache, base_url=server.base("full")) == first
        assert folder_entries(cache) == [FILE_NAME]
    finally:
        folder.chmod(0o755)
