"""``kubesage data fetch genai`` and ``openb-variants``: files without pinned checksums,
and archives of one CSV each.

The GenAI trace's per-pod metrics are published as ``<metric>.tar.gz``; the fetch keeps
each one's CSV as ``<metric>.csv.gz`` beside it, records the first download's SHA-256
and checks it later. Archives are built here (from the shared GenAI hours where they
are present) and served on 127.0.0.1; nothing reaches beyond the loopback interface.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kubesage.core.errors import FetchError
from kubesage.core.forecast.panel import read_panel
from kubesage.core.traces import fetch as fetch_module
from kubesage.core.traces.fetch import (
    DATASETS,
    GENAI_METRICS,
    Dataset,
    RemoteFile,
    fetch_dataset,
)
from tests.builders import shared_data_dir
from tests.core.traces.http_mirror import (  # noqa: F401 (no_proxy: autouse fixture)
    QuietHandler,
    no_proxy,
    serving,
)

NAME = "genai-test"
DUTY = b"value,timestamp_anon,container_ip\n12.5,60,aa\n80,120,aa\n0,60,bb\n"


def tarball(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Mirror:
    """Files by name on a loopback HTTP server, with a count of requests per name."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: Counter[str] = Counter()
        self.url = ""


@pytest.fixture
def mirror() -> Iterator[Mirror]:
    state = Mirror()

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            name = self.path.rsplit("/", 1)[-1]
            state.requests[name] += 1
            data = state.files.get(name)
            if data is None:
                self.send_error(404)
                return
            self.send_bytes(data)

    with serving(Handler) as url:
        state.url = f"{url}/trace/"
        yield state


def cached(cache: Path) -> list[str]:
    folder = cache / NAME
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def register(monkeypatch: pytest.MonkeyPatch, mirror: Mirror, *metrics: str) -> None:
    files = tuple(RemoteFile(f"{m}.tar.gz", None, None, extract=f"{m}.csv") for m in metrics)
    datasets = {NAME: Dataset(name=NAME, base_url=mirror.url, files=files)}
    monkeypatch.setattr(fetch_module, "DATASETS", datasets)


def fetched_duty(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch, members: dict[str, bytes]
) -> Path:
    """``duty.tar.gz`` holding ``members``, served, registered and fetched: its CSV."""
    mirror.files["duty.tar.gz"] = tarball(members)
    register(monkeypatch, mirror, "duty")
    (path,) = fetch_dataset(NAME, cache_dir=tmp_path)
    return path


def test_an_archives_csv_is_kept_gzipped_and_the_first_downloads_sum_checked_later(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror.files["duty.tar.gz"] = tarball({"export/duty.csv": DUTY, "README": b"notes"})
    register(monkeypatch, mirror, "duty")

    (path,) = fetch_dataset(NAME, cache_dir=tmp_path)

    assert path == tmp_path / NAME / "duty.csv.gz"
    assert gzip.decompress(path.read_bytes()) == DUTY
    recorded = (tmp_path / NAME / "duty.tar.gz.sha256").read_text().strip()
    assert len(recorded) == 64
    assert fetch_dataset(NAME, cache_dir=tmp_path) == [path]
    assert mirror.requests["duty.tar.gz"] == 1  # the cached archive matched its record

    archive = tmp_path / NAME / "duty.tar.gz"
    archive.write_bytes(archive.read_bytes() + b"damage")
    fetch_dataset(NAME, cache_dir=tmp_path)
    assert mirror.requests["duty.tar.gz"] == 2  # no longer what was recorded: fetched again
    assert gzip.decompress(path.read_bytes()) == DUTY


def test_a_plain_file_without_a_pinned_sum_is_kept_as_fetched(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    # openb-variants: the trace's other pod lists, CSVs as they are.
    mirror.files["openb_pod_list_gpushare60.csv"] = DUTY
    files = (RemoteFile("openb_pod_list_gpushare60.csv", None, None),)
    monkeypatch.setattr(
        fetch_module, "DATASETS", {NAME: Dataset(name=NAME, base_url=mirror.url, files=files)}
    )
    (path,) = fetch_dataset(NAME, cache_dir=tmp_path)
    assert path.read_bytes() == DUTY
    assert (tmp_path / NAME / "openb_pod_list_gpushare60.csv.sha256").is_file()
    assert fetch_dataset(NAME, cache_dir=tmp_path) == [path]
    assert mirror.requests["openb_pod_list_gpushare60.csv"] == 1


def test_an_archive_whose_only_csv_has_another_name_gives_that_csv(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fetched_duty(tmp_path, mirror, monkeypatch, {"duty_anon_v2.csv": DUTY})
    assert gzip.decompress(path.read_bytes()) == DUTY


@pytest.mark.parametrize(
    ("members", "message"),
    [
        (("a.csv", "b.csv"), r"expected one duty\.csv in the archive; it holds a\.csv"),
        (("v1/duty.csv", "v2/duty.csv"), r"one duty\.csv .* holds v1/duty\.csv and v2/duty\.csv"),
    ],
)
def test_an_archive_without_exactly_one_csv_is_an_error_naming_what_it_holds(
    tmp_path: Path,
    mirror: Mirror,
    monkeypatch: pytest.MonkeyPatch,
    members: tuple[str, ...],
    message: str,
) -> None:
    mirror.files["duty.tar.gz"] = tarball(dict.fromkeys(members, DUTY))
    register(monkeypatch, mirror, "duty")
    with pytest.raises(FetchError, match=message):
        fetch_dataset(NAME, cache_dir=tmp_path)
    assert not (tmp_path / NAME / "duty.csv.gz").exists()
    assert not list((tmp_path / NAME).glob("*.part"))


def test_a_download_that_is_not_an_archive_is_not_trusted_next_time(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror.files["duty.tar.gz"] = b"<html>rate limited</html>"  # served with a 200
    register(monkeypatch, mirror, "duty")
    with pytest.raises(FetchError, match=r"not a readable tar archive.*downloads it again"):
        fetch_dataset(NAME, cache_dir=tmp_path)
    assert cached(tmp_path) == []  # neither the page nor a record of its sum stays
    mirror.files["duty.tar.gz"] = tarball({"duty.csv": DUTY})  # the mirror recovers
    (path,) = fetch_dataset(NAME, cache_dir=tmp_path)
    assert gzip.decompress(path.read_bytes()) == DUTY
    assert mirror.requests["duty.tar.gz"] == 2


def test_a_csv_the_archive_did_not_write_is_written_again(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file left by a killed run, or copied there by hand, is newer than the archive
    # but is not what the archive holds.
    path = fetched_duty(tmp_path, mirror, monkeypatch, {"duty.csv": DUTY})
    (tmp_path / NAME / "duty.csv.gz.source").unlink()
    path.write_bytes(gzip.compress(b"value,timestamp_anon,container_ip\n"))
    assert fetch_dataset(NAME, cache_dir=tmp_path) == [path]
    assert gzip.decompress(path.read_bytes()) == DUTY
    assert mirror.requests["duty.tar.gz"] == 1  # the archive itself was fine


def test_a_git_lfs_pointer_is_named_as_such(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror.files["duty.tar.gz"] = (
        b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 123456\n"
    )
    register(monkeypatch, mirror, "duty")
    with pytest.raises(FetchError, match="Git LFS pointer"):
        fetch_dataset(NAME, cache_dir=tmp_path)
    assert not (tmp_path / NAME / "duty.tar.gz").exists()


@pytest.mark.skipif(shared_data_dir() is None, reason="needs ../shared/data")
def test_the_fetched_genai_metrics_read_as_the_shared_hours_do(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trace's archives hold the whole files; the shared hours stand in for them here.
    shared = shared_data_dir()
    assert shared is not None
    genai = shared / "genai"
    for metric in GENAI_METRICS:
        csv = gzip.decompress((genai / f"{metric}.csv.gz").read_bytes())
        mirror.files[f"{metric}.tar.gz"] = tarball({f"{metric}.csv": csv})
    real = DATASETS["genai"]
    monkeypatch.setattr(
        fetch_module, "DATASETS", {"genai": Dataset("genai", mirror.url, real.files)}
    )

    paths = fetch_dataset("genai", cache_dir=tmp_path)

    assert sorted(path.name for path in paths) == sorted(f"{m}.csv.gz" for m in GENAI_METRICS)
    fetched, original = read_panel(tmp_path / "genai"), read_panel(genai)
    assert fetched.entities == original.entities and fetched.metrics == original.metrics
    np.testing.assert_array_equal(fetched.mask, original.mask)
    np.testing.assert_array_equal(fetched.values[fetched.mask], original.values[original.mask])


POD_LIST = (
    b"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    b"creation_time,deletion_time,scheduled_time\n"
    b"openb-pod-0000,12000,16384,1,1000,,LS,Running,0,100,1\n"
    b"openb-pod-0001,6000,8192,1,460,,BE,Running,5,200,6\n"
)


def register_variants(monkeypatch: pytest.MonkeyPatch, mirror: Mirror, name: str) -> None:
    """One of openb-variants' own files (with its pod-list check), served by ``mirror``."""
    (remote,) = [r for r in DATASETS["openb-variants"].files if r.name == name]
    datasets = {NAME: Dataset(name=NAME, base_url=mirror.url, files=(remote,))}
    monkeypatch.setattr(fetch_module, "DATASETS", datasets)


def test_a_pod_list_cut_short_is_not_kept_and_a_bad_cached_one_is_fetched_again(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "openb_pod_list_gpushare60.csv"
    register_variants(monkeypatch, mirror, name)
    mirror.files[name] = POD_LIST[: len(POD_LIST) - 20]  # a connection cut mid-line
    with pytest.raises(FetchError, match=rf"the download is not a {name} .*expected 11 fields"):
        fetch_dataset(NAME, cache_dir=tmp_path)
    assert cached(tmp_path) == []  # neither the file nor a sum of it
    # A cut copy an earlier release kept, with its sum: read again, it is fetched again.
    folder = tmp_path / NAME
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(POD_LIST[:-20])
    (folder / f"{name}.sha256").write_text(fetch_module.sha256_of(folder / name) + "\n")
    mirror.files[name] = POD_LIST
    (path,) = fetch_dataset(NAME, cache_dir=tmp_path)
    assert path.read_bytes() == POD_LIST and mirror.requests[name] == 2


def test_an_html_page_is_refused_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Portal(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_bytes(b"<html>sign in</html>", "text/html; charset=utf-8")

    with serving(Portal) as url:
        files = (RemoteFile("openb_pod_list_cpu0.csv", None, None),)
        monkeypatch.setattr(
            fetch_module, "DATASETS", {NAME: Dataset(name=NAME, base_url=url, files=files)}
        )
        with pytest.raises(FetchError, match="the server sent an HTML page"):
            fetch_dataset(NAME, cache_dir=tmp_path)
    assert cached(tmp_path) == []


def test_a_bad_archive_stops_the_fetch_before_the_next_download(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror.files["duty.tar.gz"] = b"truncated"
    mirror.files["qps.tar.gz"] = tarball({"qps.csv": DUTY})
    register(monkeypatch, mirror, "duty", "qps")
    with pytest.raises(FetchError, match=r"duty\.tar\.gz: not a readable tar archive"):
        fetch_dataset(NAME, cache_dir=tmp_path)
    assert mirror.requests["qps.tar.gz"] == 0 and cached(tmp_path) == []


def test_a_proxy_httpx_cannot_use_is_named(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(monkeypatch, mirror, "duty")
    monkeypatch.setenv("HTTPS_PROXY", "ftp://proxy.invalid:21")
    with pytest.raises(FetchError, match=r"cannot use the proxy .*HTTPS_PROXY=ftp://proxy"):
        fetch_dataset(NAME, cache_dir=tmp_path)
