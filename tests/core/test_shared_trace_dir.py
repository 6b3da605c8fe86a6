"""Where every command looks for the shared traces (``kubesage.core.paths.shared_trace_dir``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesage.core import paths
from kubesage.core.errors import ConfigError
from kubesage.core.paths import SHARED_DATA_ENV, shared_trace_dir


def test_the_variable_alone_decides_when_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SHARED_DATA_ENV, str(tmp_path))
    assert shared_trace_dir("genai") is None  # not looked for beside the checkout
    (tmp_path / "genai").mkdir()
    assert shared_trace_dir("genai") == tmp_path / "genai"
    assert shared_trace_dir("openb") is None


def test_a_variable_that_names_no_folder_is_an_error_not_synthetic_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SHARED_DATA_ENV, str(tmp_path / "mistyped"))
    with pytest.raises(ConfigError, match=rf"{SHARED_DATA_ENV} is set to '.*mistyped'"):
        shared_trace_dir("genai")


def test_beside_the_checkout_then_beside_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SHARED_DATA_ENV, raising=False)
    checkout = tmp_path / "checkout"
    (checkout / "configs").mkdir(parents=True)
    monkeypatch.setattr(paths.resources, "files", lambda package: checkout / "configs")
    elsewhere = tmp_path / "work" / "here"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    assert shared_trace_dir("genai") is None
    (tmp_path / "work" / "shared" / "data" / "genai").mkdir(parents=True)
    assert shared_trace_dir("genai") == tmp_path / "work" / "shared" / "data" / "genai"
    (tmp_path / "shared" / "data" / "genai").mkdir(parents=True)  # beside the checkout wins
    assert shared_trace_dir("genai") == tmp_path / "shared" / "data" / "genai"
