"""``kubesage data variant`` end to end (a real subprocess): a variant written, read back
with the shares its name sets; a bad name and a missing input refused by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubesage.core.traces import read_pods, write_pods
from kubesage.core.traces.openb_variants import variant_statistics
from kubesage.core.traces.synthetic import synthetic_workload


def kubesage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubesage.core.cli", "data", "variant", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("variant") / "base.csv"
    write_pods(synthetic_workload(3_000, seed=1), path)
    return path


def test_variant_written_and_read_back(base: Path, tmp_path: Path) -> None:
    out = tmp_path / "cpu200.csv"
    done = kubesage("cpu200", "--base", str(base), "--out", str(out), "--seed", "4")
    assert done.returncode == 0, done.stderr
    assert "pods written" in done.stderr
    assert variant_statistics(read_pods(out))["cpu"] == pytest.approx(0.20, abs=0.002)


def test_bad_name_and_missing_constraints_are_refused(base: Path, tmp_path: Path) -> None:
    bad = kubesage("gpu33", "--base", str(base), "--out", str(tmp_path / "x.csv"))
    assert bad.returncode != 0
    assert "'gpu33'" in bad.stderr
    missing = kubesage("gpuspec20", "--base", str(base), "--out", str(tmp_path / "y.csv"))
    assert missing.returncode != 0
    assert "GPU-model constraints" in missing.stderr
    assert not (tmp_path / "y.csv").exists()


def test_a_gz_name_is_written_compressed_and_a_bad_out_refused(base: Path, tmp_path: Path) -> None:
    out = tmp_path / "cpu200.csv.gz"
    done = kubesage("cpu200", "--base", str(base), "--out", str(out), "--seed", "4")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:2] == b"\x1f\x8b"  # gzip, as the name says: it reads back
    assert variant_statistics(read_pods(out))["cpu"] == pytest.approx(0.20, abs=0.002)
    for bad, words in [
        (tmp_path, "is a directory"),
        (base / "x.csv", "is not a directory"),  # under a file
    ]:
        refused = kubesage("cpu200", "--base", str(base), "--out", str(bad))
        assert refused.returncode == 2, refused.stderr
        assert words in refused.stderr and "Traceback" not in refused.stderr
