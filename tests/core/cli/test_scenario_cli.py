"""``kubesage simulate --scenario mixed`` end to end, as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kubesage.core.scenario.result import FIGURE_LABELS, FIGURES, VARIANTS
from tests.core.cli.test_simulate_cli import kubesage as run_kubesage

TINY = ("--gpu-nodes", "4", "--hours", "0.5", "--seeds", "1,2", "--jobs", "1")


def kubesage(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command in a wide terminal (so rich wraps no table cell or message)."""
    return run_kubesage(*args, cwd=cwd, env={"COLUMNS": "200"})


def test_json_is_one_object_with_every_variant_and_figure(tmp_path: Path) -> None:
    run = kubesage(
        "simulate", "--scenario", "mixed", *TINY, "--format", "json",
        "--report-dir", str(tmp_path / "report"), cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 1
    document = json.loads(lines[0])
    assert document["scenario"]["gpu_nodes"] == 4 and document["scenario"]["seeds"] == [1, 2]
    assert list(document["variants"]) == list(VARIANTS)
    for figures in document["variants"].values():
        assert set(figures) == {*FIGURES, "actions"}
        assert all(isinstance(figures[name], (int, float)) for name in FIGURES)
    assert "Inference utilisation profiles: " in run.stderr  # the trace, or synthetic
    assert (tmp_path / "report" / "index.html").is_file()
    saved = json.loads((tmp_path / "report" / "results.json").read_text())
    assert saved["variants"] == document["variants"]


def test_a_subset_of_variants_and_the_table(tmp_path: Path) -> None:
    """Piped (as ``make run`` into a log) with an 80-column COLUMNS, the table is still
    whole: rich would otherwise cut names, figures and headings to fit 80 columns."""
    run = run_kubesage(
        "simulate", "--scenario", "mixed", *TINY, "--variants", "fgd,kubesage-no-defrag",
        "--no-report", cwd=tmp_path, env={"COLUMNS": "80"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stdout.splitlines() if "│" in line]
    rows = [line.split("│")[1].strip() for line in lines]
    assert {"fgd", "kubesage-no-defrag"} <= set(rows)
    assert "k8s-default" not in rows  # run for the gain, not shown
    assert "…" not in run.stdout
    heading = next(line for line in run.stdout.splitlines() if "variant" in line)
    assert all(FIGURE_LABELS[figure] in heading for figure in FIGURES)
    assert all(len(line.split("│")) == len(FIGURES) + 3 for line in lines)  # every cell


def test_bad_scenario_options_are_clear_errors(tmp_path: Path) -> None:
    unknown = kubesage("simulate", "--scenario", "other", "--no-report", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown --scenario 'other'" in unknown.stderr
    variant = kubesage(
        "simulate", "--scenario", "mixed", "--variants", "best", "--no-report", cwd=tmp_path
    )
    assert variant.returncode == 2 and "--variants: unknown best" in variant.stderr
    mixed_up = kubesage(
        "simulate", "--scenario", "mixed", "--policy", "fgd", "--no-report", cwd=tmp_path
    )
    assert mixed_up.returncode == 2 and "not the packing options" in mixed_up.stderr
    load = kubesage("simulate", "--scenario", "mixed", "--load", "0", "--no-report", cwd=tmp_path)
    assert load.returncode == 2 and "--load must be in" in load.stderr
    nodes = kubesage(
        "simulate", "--scenario", "mixed", "--gpu-nodes", "5000", "--no-report", cwd=tmp_path
    )
    assert nodes.returncode == 2
    assert "--gpu-nodes must be a whole number from 1 to 4096, got 5000" in nodes.stderr
    (tmp_path / "a-file").write_text("")
    report = kubesage("simulate", "--scenario", "mixed", "--report-dir", "a-file", cwd=tmp_path)
    assert report.returncode == 2 and "--report-dir a-file is a file" in report.stderr
    assert "Traceback" not in report.stderr and "runs" not in report.stderr  # before any run
    packing = kubesage("simulate", "--seeds", "1", "--report-dir", "a-file", cwd=tmp_path)
    assert packing.returncode == 2 and "--report-dir a-file is a file" in packing.stderr
    traces = kubesage(
        "simulate", "--scenario", "mixed", "--data-dir", str(tmp_path), "--no-report", cwd=tmp_path
    )
    assert traces.returncode == 2 and "no genai/ folder" in " ".join(traces.stderr.split())


def test_a_run_where_nothing_arrives_and_the_sweep_in_json(tmp_path: Path) -> None:
    # One node for 36 s at a light load: no arrival, and FGD has no typical pods to
    # derive; every variant reports an empty run instead of the whole command failing.
    empty = kubesage(
        "simulate", "--scenario", "mixed", "--gpu-nodes", "1", "--hours", "0.01",
        "--load", "0.3", "--seeds", "43", "--variants", "fgd,kubesage", "--jobs", "1",
        "--no-report", "--format", "json", cwd=tmp_path,
    )  # fmt: skip
    assert empty.returncode == 0, empty.stderr
    document = json.loads(empty.stdout.strip().splitlines()[-1])
    assert document["variants"]["fgd"]["gpu_allocation_pct"] == 0.0
    assert document["scenario"]["profiles"].startswith(("genai trace", "synthetic"))
    swept = kubesage(
        "simulate", "--scenario", "mixed", "--sweep", "--gpu-nodes", "2", "--hours", "0.05",
        "--seeds", "7", "--variants", "fgd", "--jobs", "1", "--no-report", "--format", "json",
        cwd=tmp_path,
    )  # fmt: skip
    assert swept.returncode == 0, swept.stderr
    sweep = json.loads(swept.stdout.strip().splitlines()[-1])["sweep"]
    assert [point["load"] for point in sweep] == [0.6, 0.7, 0.8, 0.85, 0.9, 0.95]
    assert all(list(point["variants"]) == ["fgd"] for point in sweep)
