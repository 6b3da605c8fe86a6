"""The simulation report page (``kubesage.core.report.html``)."""

from __future__ import annotations

from pathlib import Path

from kubesage.core.report.html import write_report
from kubesage.core.sim.runner import RunResult

CURVES = {
    "allocation_by_arrived": ([0.0, 50.0, 100.0], [0.0, 48.0, 80.0]),
    "fragmentation_by_arrived": ([0.0, 50.0, 100.0], [0.0, 5.0, 9.0]),
}


def run(seed: int, alloc_130: float | None, end: float = 131.0) -> RunResult:
    return RunResult(
        "fgd", seed, "fgd", 80.0, alloc_130, None, 0, 0.0, 0.0, 10, 4, 0.1, end, curves=CURVES
    )


def test_a_seed_left_out_of_a_mean_is_said_on_the_page(tmp_path: Path) -> None:
    """The table's means leave out a seed without a value there: the page says which
    (it had been said only on stderr), and what the curves are."""
    page = write_report(
        [run(1, 90.0), run(2, None, end=127.6)], tmp_path, title="t", description="d"
    ).read_text()
    assert "<h2>Caveats</h2>" in page
    assert "fgd, seed 2: its arrivals end at 127.6 % of GPU capacity" in page
    assert "means over seeds at the arrived shares every seed reached" in page
    clean = write_report([run(1, 90.0)], tmp_path / "clean", title="t", description="d")
    assert "Caveats" not in clean.read_text()
