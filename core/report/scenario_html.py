"""The mixed-workload scenario's report: one self-contained HTML page with SVG plots,
plus ``results.json``.

The page shows the variants side by side (the figures of ``--format json``, means
over the seeds, and the loop's actions per reconciler), how each variant's cluster
evolved over the run (the first seed's run), and, when a sweep over loads is given,
each headline figure against the offered load, one line per variant, so a reader sees
at which load each reconciler starts to matter.

``results.json`` is :func:`~kubesage.core.scenario.result.document`'s object (the
``--format json`` output) with two more keys: ``description``, and ``sweep`` (absent
without one): a list, in load order, of ``{"load": L, "variants": {name: M}}`` with
``M`` as in ``variants``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from kubesage.core.report.svg import Series, line_chart
from kubesage.core.scenario.result import (
    FIGURE_LABELS,
    FIGURES,
    ScenarioSettings,
    VariantRun,
    document,
    mean_figures,
    summed_actions,
    sweep_figures,
)

HEADLINE = (
    "large_task_schedulable_pct",
    "training_throughput_gain_pct",
    "validation_release_pct",
    "pods_migrated_pct",
)
"""The figures the sweep plots against load: the product's claims, and the migrations
the defragmentation costs."""

TIME_CHARTS = (
    ("gpu_allocation", 100.0, "GPU allocation over time", "allocated GPU (% of capacity)"),
    ("pending_large", 1.0, "Pending large tasks over time", "large tasks pending"),
    ("migrations", 1.0, "Migrations so far", "pods migrated (cumulative)"),
    ("released_gpus", 1.0, "GPUs released by elastic scaling", "GPUs released now"),
)
"""Per chart: the series (see :data:`~kubesage.core.scenario.result.SERIES`), the
factor it is shown at, the title and the y-axis label."""

STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
caption { font-weight: bold; text-align: left; padding-bottom: 4px; }
figure { margin: 1.5em 0; }
"""


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.2f}"


def _table(caption: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return (
        f"<table><caption>{escape(caption)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def _settings_table(settings: ScenarioSettings, seeds: Sequence[int]) -> str:
    rows = [[name, str(value)] for name, value in vars(settings).items()]
    rows.append(["seeds", ", ".join(str(seed) for seed in seeds)])
    return _table("Scenario", ["setting", "value"], rows)


def _figures_table(runs: Mapping[str, Sequence[VariantRun]]) -> str:
    rows = []
    for name, variant_runs in runs.items():
        means = mean_figures(variant_runs)
        rows.append([name, *(_number(means[figure]) for figure in FIGURES)])
    return _table(
        "Figures per variant (means over seeds)",
        ["variant", *(FIGURE_LABELS.get(f, f) for f in FIGURES)],
        rows,
    )


def _actions_table(runs: Mapping[str, Sequence[VariantRun]]) -> str:
    actions = {name: summed_actions(variant_runs) for name, variant_runs in runs.items()}
    columns = sorted(
        {
            (reconciler, kind)
            for per in actions.values()
            for reconciler in per
            for kind in per[reconciler]
        }
    )
    if not columns:
        return "<p>No variant took loop actions.</p>"
    rows = [
        [name, *(_number(per.get(reconciler, {}).get(kind, 0.0)) for reconciler, kind in columns)]
        for name, per in actions.items()
    ]
    return _table(
        "Loop actions per variant (means over seeds)",
        ["variant", *(f"{reconciler}: {kind}" for reconciler, kind in columns)],
        rows,
    )


def _time_charts(runs: Mapping[str, Sequence[VariantRun]]) -> list[str]:
    """The first seed's run of every variant over time (x in hours)."""
    first = {name: variant_runs[0] for name, variant_runs in runs.items() if variant_runs}
    charts = []
    for series, factor, title, y_label in TIME_CHARTS:
        lines: dict[str, Series] = {}
        for name, run in first.items():
            hours = [t / 3600.0 for t in run.series.get("time_s", [])]
            values = [v * factor for v in run.series.get(series, [])]
            if hours and len(values) == len(hours):
                lines[name] = (hours, values)
        charts.append(line_chart(lines, title=title, x_label="time (h)", y_label=y_label))
    return charts


def _sweep_charts(sweep: Mapping[float, Mapping[str, Sequence[VariantRun]]]) -> list[str]:
    """Each headline figure against the offered load, one line per variant."""
    loads = sorted(sweep)
    variants = list(dict.fromkeys(name for load in loads for name in sweep[load]))
    charts = []
    for figure in HEADLINE:
        lines: dict[str, Series] = {}
        for name in variants:
            points = [
                (100.0 * load, mean_figures(sweep[load][name])[figure])
                for load in loads
                if sweep[load].get(name)
            ]
            if points:
                lines[name] = ([x for x, _ in points], [y for _, y in points])
        charts.append(
            line_chart(
                lines,
                title=f"{FIGURE_LABELS[figure]} against load",
                x_label="offered GPU load (% of capacity)",
                y_label=FIGURE_LABELS[figure],
            )
        )
    return charts


def _sweep_table(sweep: Mapping[float, Mapping[str, Sequence[VariantRun]]]) -> str:
    rows = []
    for load in sorted(sweep):
        for name, variant_runs in sweep[load].items():
            if variant_runs:
                means = mean_figures(variant_runs)
                rows.append([f"{load:g}", name, *(_number(means[f]) for f in HEADLINE)])
    return _table(
        "Headline figures per load (means over seeds)",
        ["load", "variant", *(FIGURE_LABELS[f] for f in HEADLINE)],
        rows,
    )


def write_scenario_report(
    directory: Path,
    settings: ScenarioSettings,
    seeds: Sequence[int],
    runs: Mapping[str, Sequence[VariantRun]],
    *,
    sweep: Mapping[float, Mapping[str, Sequence[VariantRun]]] | None = None,
    description: str,
    profiles: str | None = None,
) -> Path:
    """Write ``index.html`` and ``results.json`` into ``directory``; return the HTML path.

    ``runs``: variant → its runs, one per seed (the first seed's run is the one plotted
    over time); ``sweep``: load → the same, at each load of a sweep; ``profiles``: where
    the inference utilisation profiles came from (the trace or synthetic), said on the
    page and kept as ``scenario.profiles`` in ``results.json``, as ``--format json`` has it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    title = "Mixed-workload scenario"
    sections = [
        _settings_table(settings, seeds),
        _figures_table(runs),
        _actions_table(runs),
        "<h2>Over time</h2>",
        f"<p>The run of seed {seeds[0]} of every variant.</p>" if seeds else "",
        *(f"<figure>{chart}</figure>" for chart in _time_charts(runs)),
    ]
    if sweep:
        sections += [
            "<h2>Against load</h2>",
            "<p>Each headline figure at every load of the sweep, means over the seeds"
            + (
                ": where a line leaves <code>k8s-default</code>'s, its reconciler starts to "
                "matter.</p>"
                if "k8s-default" in runs
                else ".</p>"
            ),
            *(f"<figure>{chart}</figure>" for chart in _sweep_charts(sweep)),
            _sweep_table(sweep),
        ]
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>{STYLE}</style></head><body>
<h1>{escape(title)}</h1>
<p>{escape(description)}</p>
<p>Generated {generated}. Figures are means over the seeds.{
        f" Inference utilisation profiles: {escape(profiles)}." if profiles else ""
    }</p>
{"".join(sections)}
<p>Raw numbers: <a href="results.json">results.json</a>.</p>
</body></html>
"""
    html_path = directory / "index.html"
    html_path.write_text(page, encoding="utf-8")
    result = document(settings, seeds, runs)
    if profiles is not None and isinstance(result["scenario"], dict):
        result["scenario"]["profiles"] = profiles
    result["description"] = description
    if sweep:
        result["sweep"] = sweep_figures(settings, seeds, sweep)
    (directory / "results.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return html_path
