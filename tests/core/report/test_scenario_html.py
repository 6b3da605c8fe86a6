"""The scenario report: the page names every variant and chart, and results.json
carries the ``--format json`` document, the description and the sweep."""

from __future__ import annotations

import json
from pathlib import Path

from kubesage.core.report.scenario_html import (
    FIGURE_LABELS,
    HEADLINE,
    TIME_CHARTS,
    write_scenario_report,
)
from kubesage.core.scenario.result import FIGURES, SERIES, ScenarioSettings, VariantRun

VARIANTS = ("k8s-default", "kubesage", "kubesage-no-defrag")


def _run(variant: str, seed: int, level: float) -> VariantRun:
    ticks = 5
    return VariantRun(
        variant=variant,
        seed=seed,
        figures={name: level + index for index, name in enumerate(FIGURES)},
        actions={"gpu-defrag": {"migrate": seed % 3}} if variant != "k8s-default" else {},
        series={
            "time_s": [60.0 * (t + 1) for t in range(ticks)],
            "gpu_allocation": [0.1 * t for t in range(ticks)],
            "pending_large": [float(t % 2) for t in range(ticks)],
            "migrations": [float(t) for t in range(ticks)],
            "released_gpus": [2.0] * ticks,
        },
    )


def _runs(seeds: list[int], level: float) -> dict[str, list[VariantRun]]:
    return {
        variant: [_run(variant, seed, level + offset) for seed in seeds]
        for offset, variant in enumerate(VARIANTS)
    }


def test_report_shows_every_variant_and_chart(tmp_path: Path) -> None:
    settings = ScenarioSettings(gpu_nodes=4, hours=0.25, load=0.8)
    seeds = [1, 2]
    sweep = {0.6: _runs(seeds, 10.0), 0.8: _runs(seeds, 20.0), 0.95: _runs(seeds, 30.0)}
    page_path = write_scenario_report(
        tmp_path / "report",
        settings,
        seeds,
        sweep[0.8],
        sweep=sweep,
        description="tiny <test> scenario",
    )
    assert page_path == tmp_path / "report" / "index.html"
    page = page_path.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "tiny &lt;test&gt; scenario" in page  # the description is escaped
    for variant in VARIANTS:
        assert variant in page
    titles = [title for _, _, title, _ in TIME_CHARTS]
    titles += [f"{FIGURE_LABELS[figure]} against load" for figure in HEADLINE]
    for title in titles:
        assert title in page
    assert page.count("<svg") == len(TIME_CHARTS) + len(HEADLINE)
    assert "gpu-defrag: migrate" in page
    assert {name for name, *_ in TIME_CHARTS} <= set(SERIES)

    document = json.loads((tmp_path / "report" / "results.json").read_text(encoding="utf-8"))
    assert document["description"] == "tiny <test> scenario"
    assert document["scenario"]["gpu_nodes"] == 4
    assert document["scenario"]["seeds"] == seeds
    assert list(document["variants"]) == list(VARIANTS)
    kubesage = document["variants"]["kubesage"]
    assert set(FIGURES) <= set(kubesage)
    assert kubesage["large_task_schedulable_pct"] == 21.0  # level 20 + offset 1, both seeds
    assert kubesage["actions"] == {"gpu-defrag": {"migrate": 1.5}}  # (1 + 2) / 2 seeds
    assert [point["load"] for point in document["sweep"]] == [0.6, 0.8, 0.95]
    low = document["sweep"][0]["variants"]["k8s-default"]
    assert low["large_task_schedulable_pct"] == 10.0
    assert set(FIGURES) <= set(low)


def test_report_without_sweep_has_no_load_charts(tmp_path: Path) -> None:
    settings = ScenarioSettings(gpu_nodes=4, hours=0.25)
    write_scenario_report(
        tmp_path, settings, [7], _runs([7], 0.0), description="no sweep", profiles="synthetic"
    )
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "Inference utilisation profiles: synthetic." in page
    assert "against load" not in page
    assert page.count("<svg") == len(TIME_CHARTS)
    document = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert "sweep" not in document
    assert document["scenario"]["profiles"] == "synthetic"  # as --format json has it
    assert document["variants"]["k8s-default"]["actions"] == {}
