"""A download cut off mid-file goes on from the bytes it wrote, where the mirror allows.

A local mirror (``ThreadingHTTPServer`` on 127.0.0.1) cuts its first answer off halfway
through the body and then answers as the test's mode says: ranges honoured, ignored,
answered wrongly or refused, the file changed in between, or no version to resume by.
Every outcome is the right file in the cache, or a FetchError and nothing in it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kubesage.core.errors import FetchError
from kubesage.core.traces import fetch as fetch_module
from kubesage.core.traces.fetch import Dataset, RemoteFile, fetch_dataset
from tests.core.traces.http_mirror import QuietHandler, no_proxy, serving  # noqa: F401

NAME = "tiny"
FILE_NAME = "pods.csv"
DATA = b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + b"".join(
    f"p{i},{i % 97},{i % 89},0,0\n".encode() for i in range(20_000)
)
NEW_DATA = DATA.replace(b",0,0\n", b",1,0\n")
"""What the ``changed`` mirror serves after its first answer (same length, other bytes)."""
CUT = len(DATA) // 2
MODIFIED = "Tue, 01 Dec 2026 10:00:00 GMT"


@dataclass
class Asked:
    range: str | None
    if_range: str | None


@dataclass
class Mirror:
    """Serves ``/<mode>/pods.csv``: the first answer is cut off after ``CUT`` bytes."""

    url: str = ""
    asked: list[Asked] = field(default_factory=list)
    sent: int = 0

    def base(self, mode: str) -> str:
        return f"{self.url}/{mode}/"


@pytest.fixture
def mirror() -> Iterator[Mirror]:
    state = Mirror()

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            mode = self.path.strip("/").partition("/")[0]
            first = not state.asked
            state.asked.append(Asked(self.headers.get("Range"), self.headers.get("If-Range")))
            version = {
                "no-version": {},
                "weak": {"ETag": 'W/"v1"', "Last-Modified": MODIFIED},
            }.get(mode, {"ETag": '"v1"'})
            data = NEW_DATA if mode == "changed" and not first else DATA
            if mode == "changed" and not first:
                version = {"ETag": '"v2"'}
            wanted = self.headers.get("Range")
            still = self.headers.get("If-Range") in version.values()
            if first:
                self._answer(200, data, version, end=CUT)
            elif mode == "always-partial":
                self._answer(206, data, version, start=10)
            elif wanted and mode == "refuses-range":
                self._answer(416, b"", version, content_range=f"bytes */{len(data)}")
            elif wanted and mode == "wrong-range":
                self._answer(206, data, version, start=0)
            elif wanted and still and mode not in ("ignores-range", "no-version"):
                self._answer(206, data, version, start=int(wanted.split("=")[1].rstrip("-")))
            else:
                self._answer(200, data, version)

        def _answer(
            self,
            status: int,
            data: bytes,
            version: dict[str, str],
            *,
            start: int = 0,
            end: int | None = None,
            content_range: str | None = None,
        ) -> None:
            body = data[start:]
            self.send_response(status)
            for header, value in version.items():
                self.send_header(header, value)
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            if content_range:
                self.send_header("Content-Range", content_range)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            sent = body if end is None else body[:end]
            self.wfile.write(sent)
            state.sent += len(sent)
            self.wfile.flush()
            self.close_connection = True

    with serving(Handler) as url:
        state.url = url
        yield state


def use(monkeypatch: pytest.MonkeyPatch, data: bytes | None) -> None:
    """The data set is one file, pinned to ``data`` (None: not pinned)."""
    remote = (
        RemoteFile(FILE_NAME, None, None)
        if data is None
        else RemoteFile(FILE_NAME, len(data), hashlib.sha256(data).hexdigest())
    )
    tiny = Dataset(name=NAME, base_url="http://127.0.0.1:9/unused/", files=(remote,))
    monkeypatch.setattr(fetch_module, "DATASETS", {NAME: tiny})


def fetched(tmp_path: Path, mirror: Mirror, mode: str) -> bytes:
    (path,) = fetch_dataset(NAME, cache_dir=tmp_path / "cache", base_url=mirror.base(mode))
    assert sorted(p.name for p in path.parent.iterdir() if p.suffix == ".part") == []
    return path.read_bytes()


def test_a_cut_off_download_asks_only_for_the_missing_bytes(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, DATA)
    progress: list[int] = []
    (path,) = fetch_dataset(
        NAME,
        cache_dir=tmp_path / "cache",
        base_url=mirror.base("resume"),
        on_progress=lambda name, done, total: progress.append(done),
    )
    assert path.read_bytes() == DATA
    assert mirror.asked == [Asked(None, None), Asked(f"bytes={CUT}-", '"v1"')]
    assert mirror.sent == len(DATA)  # nothing sent twice
    assert progress == sorted(progress) and progress[-1] == len(DATA)


def test_a_file_changed_between_attempts_is_fetched_whole_not_spliced(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, None)  # no pinned sum: the version is all that tells the two apart
    assert fetched(tmp_path, mirror, "changed") == NEW_DATA
    assert mirror.asked[1] == Asked(f"bytes={CUT}-", '"v1"')


@pytest.mark.parametrize("mode", ["ignores-range", "wrong-range", "refuses-range"])
def test_a_mirror_that_does_not_honour_the_range_gives_the_whole_file(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    use(monkeypatch, DATA)
    assert fetched(tmp_path, mirror, mode) == DATA
    assert mirror.asked[1].range == f"bytes={CUT}-"
    # a range answered wrongly or refused is followed at once by a request for the whole
    assert [asked.range for asked in mirror.asked[2:]] == (
        [] if mode == "ignores-range" else [None]
    )


def test_without_a_version_nothing_is_resumed(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, DATA)
    assert fetched(tmp_path, mirror, "no-version") == DATA
    assert mirror.asked == [Asked(None, None), Asked(None, None)]


def test_a_weak_etag_resumes_by_the_last_modified_date(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, DATA)
    assert fetched(tmp_path, mirror, "weak") == DATA
    assert mirror.asked[1] == Asked(f"bytes={CUT}-", MODIFIED)


def test_a_mirror_answering_a_whole_request_with_a_part_is_an_error(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, DATA)
    with pytest.raises(FetchError, match="answered a request for the whole file with part"):
        fetched(tmp_path, mirror, "always-partial")
    assert [p.name for p in (tmp_path / "cache" / NAME).iterdir()] == []
