"""A download stopped part-way — attempts used up, or Ctrl-C — is continued by the next
run from the bytes it kept, through the same local mirror as the in-run resume tests
(its first answer is cut off halfway through the body)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import kubesage.core.cli.data as data_cli
from kubesage.core.cli.main import app
from kubesage.core.errors import FetchError
from kubesage.core.traces.fetch import fetch_dataset
from kubesage.core.traces.fetch_parking import PARKED_SUFFIX
from tests.core.traces.test_fetch_resume import (  # noqa: F401  (mirror: a fixture)
    CUT,
    DATA,
    FILE_NAME,
    NAME,
    NEW_DATA,
    Asked,
    Mirror,
    mirror,
    use,
)


def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def left(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (cache(tmp_path) / NAME).iterdir())


def parked(tmp_path: Path) -> bool:
    """Whether the cache holds one parked file of bytes and its record, and nothing else."""
    names = left(tmp_path)
    return len(names) == 2 and names[1] == RECORD and names[0].endswith(PARKED_SUFFIX)


RECORD = FILE_NAME + PARKED_SUFFIX + ".json"


def test_a_run_out_of_attempts_leaves_its_bytes_to_the_next_run(
    tmp_path: Path,
    mirror: Mirror,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use(monkeypatch, DATA)
    with pytest.raises(FetchError, match=f"the {CUT} bytes held are kept for the next"):
        fetch_dataset(NAME, cache_dir=cache(tmp_path), base_url=mirror.base("resume"), attempts=1)
    assert parked(tmp_path)
    (path,) = fetch_dataset(NAME, cache_dir=cache(tmp_path), base_url=mirror.base("resume"))
    assert path.read_bytes() == DATA
    assert mirror.asked == [Asked(None, None), Asked(f"bytes={CUT}-", '"v1"')]
    assert mirror.sent == len(DATA)  # nothing sent twice, across the two runs
    assert left(tmp_path) == [FILE_NAME]


def test_ctrl_c_leaves_the_bytes_written_to_the_next_run(
    tmp_path: Path,
    mirror: Mirror,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use(monkeypatch, DATA)
    seen: list[int] = []

    def interrupted(name: str, done: int, total: int | None) -> None:
        seen.append(done)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fetch_dataset(
            NAME, cache_dir=cache(tmp_path), base_url=mirror.base("resume"), on_progress=interrupted
        )
    assert parked(tmp_path)
    (path,) = fetch_dataset(NAME, cache_dir=cache(tmp_path), base_url=mirror.base("resume"))
    assert path.read_bytes() == DATA
    assert mirror.asked[1] == Asked(f"bytes={seen[0]}-", '"v1"')


@pytest.mark.parametrize("record", ["another mirror's", "more bytes than parked", "not JSON"])
def test_parked_bytes_that_are_not_this_downloads_are_not_used(
    tmp_path: Path,
    mirror: Mirror,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    record: str,
) -> None:
    use(monkeypatch, DATA)
    with pytest.raises(FetchError):
        fetch_dataset(NAME, cache_dir=cache(tmp_path), base_url=mirror.base("resume"), attempts=1)
    kept = cache(tmp_path) / NAME / RECORD
    if record == "more bytes than parked":
        kept.write_text(json.dumps({**json.loads(kept.read_text()), "size": CUT + 1}))
    elif record == "not JSON":
        kept.write_text("{")
    base = mirror.base("other" if record == "another mirror's" else "resume")
    (path,) = fetch_dataset(NAME, cache_dir=cache(tmp_path), base_url=base)
    assert path.read_bytes() == DATA
    assert mirror.asked[1] == Asked(None, None)  # the whole file, from the start
    assert left(tmp_path) == [FILE_NAME]  # and what was parked is gone


def test_bytes_without_a_version_are_not_kept(
    tmp_path: Path,
    mirror: Mirror,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use(monkeypatch, DATA)
    with pytest.raises(FetchError) as failed:
        fetch_dataset(
            NAME, cache_dir=cache(tmp_path), base_url=mirror.base("no-version"), attempts=1
        )
    assert "kept" not in str(failed.value)
    assert left(tmp_path) == []


def test_the_command_stopped_by_ctrl_c_says_how_to_go_on(
    tmp_path: Path,
    mirror: Mirror,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use(monkeypatch, DATA)

    def stopped_after_the_first_bytes(*args: Any, **options: Any) -> list[Path]:
        def interrupt(name: str, done: int, total: int | None) -> None:
            raise KeyboardInterrupt

        return fetch_dataset(*args, **{**options, "on_progress": interrupt})

    command = ["data", "fetch", NAME, "--cache-dir", str(cache(tmp_path))]
    command += ["--base-url", mirror.base("resume")]
    with monkeypatch.context() as patched:
        patched.setattr(data_cli, "fetch_dataset", stopped_after_the_first_bytes)
        stopped = CliRunner().invoke(app, command)
    assert stopped.exit_code == 130, stopped.output
    assert "run the same command again to go on" in " ".join(stopped.stderr.split())
    assert parked(tmp_path)
    held = json.loads((cache(tmp_path) / NAME / RECORD).read_text())["size"]
    again = CliRunner().invoke(app, command)
    assert again.exit_code == 0, again.output
    assert (cache(tmp_path) / NAME / FILE_NAME).read_bytes() == DATA
    assert held > 0 and mirror.asked[1] == Asked(f"bytes={held}-", '"v1"')


@pytest.mark.parametrize("mode", ["changed", "refuses-range"])
def test_parked_bytes_the_mirror_no_longer_continues_give_the_whole_file(
    tmp_path: Path,
    mirror: Mirror,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    use(monkeypatch, None)  # unpinned: only the version tells the two files apart
    with pytest.raises(FetchError):
        fetch_dataset(NAME, cache_dir=cache(tmp_path), base_url=mirror.base(mode), attempts=1)
    (path,) = fetch_dataset(NAME, cache_dir=cache(tmp_path), base_url=mirror.base(mode))
    assert mirror.asked[1] == Asked(f"bytes={CUT}-", '"v1"')  # the parked bytes were offered
    assert path.read_bytes() == (NEW_DATA if mode == "changed" else DATA)  # never spliced
    assert left(tmp_path) == [FILE_NAME, FILE_NAME + ".sha256"]


def test_bytes_past_the_recorded_size_are_cut_and_one_park_replaces_another(
    tmp_path: Path,
    mirror: Mirror,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use(monkeypatch, DATA)
    for _ in range(2):  # the second run adopts the first's bytes and parks them again
        with pytest.raises(FetchError):
            fetch_dataset(
                NAME, cache_dir=cache(tmp_path), base_url=mirror.base("resume"), attempts=1
            )
        mirror.asked.clear()  # every run's first answer is cut off at CUT
    assert parked(tmp_path)
    (bytes_file,) = (cache(tmp_path) / NAME).glob(f"*{PARKED_SUFFIX}")
    with bytes_file.open("ab") as handle:
        handle.write(b"written after the size was recorded")
    (path,) = fetch_dataset(NAME, cache_dir=cache(tmp_path), base_url=mirror.base("resume"))
    assert path.read_bytes() == DATA
    assert left(tmp_path) == [FILE_NAME]
