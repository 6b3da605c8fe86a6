"""Which trace folder a benchmark's ``--data-dir`` names, and how bad input ends a
benchmark (``benchmarks/_common.py``).

A folder given on the command line is read or refused, never swapped for the
shared data behind the user's back.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from benchmarks._common import find_trace, json_line, positive_float, positive_int, trace_dir


def test_data_dir_may_hold_the_trace_folder_or_be_it(tmp_path: Path) -> None:
    (tmp_path / "genai").mkdir()
    assert find_trace(tmp_path, "genai") == tmp_path / "genai"
    assert find_trace(tmp_path / "genai", "genai") == tmp_path / "genai"
    # A folder without genai/ is taken as the trace's own folder: its reader says what
    # it lacks, and the defaults are not consulted.
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert find_trace(other, "genai") == other


def test_a_data_dir_that_is_not_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--data-dir .*missing: not a folder"):
        find_trace(tmp_path / "missing", "openb")


def test_without_data_dir_the_environment_names_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "openb").mkdir()
    monkeypatch.setenv("KUBESAGE_SHARED_DATA", str(tmp_path))
    assert trace_dir(None, "openb") == tmp_path / "openb"


def test_a_trace_found_nowhere_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBESAGE_SHARED_DATA", str(tmp_path))  # set, it alone decides
    assert find_trace(None, "genai") is None
    with pytest.raises(SystemExit, match="kubesage data fetch openb"):
        trace_dir(None, "openb")
    with pytest.raises(SystemExit, match="point --data-dir at a copy"):
        trace_dir(None, "genai")


def test_bad_input_ends_a_benchmark_with_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks._common import run_main
    from kubesage.core.errors import InputError

    def main() -> int:
        raise InputError("pods.csv: no such file")

    with pytest.raises(SystemExit) as ended:
        run_main(main)
    assert ended.value.code == 2
    assert capsys.readouterr().err == "error: pods.csv: no such file\n"
    with pytest.raises(SystemExit) as ended:
        run_main(lambda: 0)
    assert ended.value.code == 0


def test_the_json_line_is_compact_and_strict_json() -> None:
    line = json_line({"a": [1.5, math.nan, {"b": math.inf}], "c": (1, 2)})
    assert line == '{"a":[1.5,null,{"b":null}],"c":[1,2]}'
    assert json.loads(line, parse_constant=lambda name: pytest.fail(f"bare {name}"))


@pytest.mark.parametrize("text", ["0", "-3", "1.5", "many"])
def test_a_count_must_be_a_whole_number_of_at_least_one(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        positive_int(text)
    assert positive_int("7") == 7


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "x"])
def test_a_scale_must_be_a_finite_positive_number(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        positive_float(text)
    assert positive_float("0.25") == 0.25
