"""The simulation report: one self-contained HTML page with SVG plots, plus JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from kubesage.core.report.svg import line_chart
from kubesage.core.sim.runner import RunResult
from kubesage.core.sim.summary import json_document, missing_points, summarise, summary_table


def _table(results: Sequence[RunResult]) -> str:
    title, headers, rows = summary_table(results)
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return (
        f"<table><caption>{escape(title)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def write_report(
    results: Sequence[RunResult],
    directory: Path,
    *,
    title: str,
    description: str,
) -> Path:
    """Write ``index.html`` and ``results.json`` into ``directory``; return the HTML path."""
    directory.mkdir(parents=True, exist_ok=True)
    summaries = summarise(results)
    mode = results[0].mode if results else "fgd"
    suffix, x_label = (
        ("_by_arrived", "arrived workload (% of GPU capacity)")
        if mode == "fgd"
        else ("_by_time", "time (s)")
    )
    charts = [
        line_chart(
            {s.policy: s.curves[f"allocation{suffix}"] for s in summaries},
            title="GPU allocation ratio",
            x_label=x_label,
            y_label="allocated GPU (% of capacity)",
        ),
        line_chart(
            {s.policy: s.curves[f"fragmentation{suffix}"] for s in summaries},
            title="GPU fragmentation ratio (FGD measure)",
            x_label=x_label,
            y_label="fragmented / idle GPU (%)",
        ),
    ]
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1000px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 4px 10px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
figure {{ margin: 1.5em 0; }}
</style></head><body>
<h1>{escape(title)}</h1>
<p>{escape(description)}</p>
<p>Mode: <code>{escape(mode)}</code>. Generated {generated}. Values are means over the
seeds that have a value at that point. {escape(_what_curves_show(mode, results))}</p>
{_table(results)}
{_caveats(missing_points(results))}
{"".join(f"<figure>{chart}</figure>" for chart in charts)}
<p>Raw numbers: <a href="results.json">results.json</a>.</p>
</body></html>
"""
    html_path = directory / "index.html"
    html_path.write_text(page, encoding="utf-8")
    document = json_document(results)
    document["description"] = description
    (directory / "results.json").write_text(json.dumps(document, indent=2), encoding="utf-8")
    return html_path


def _what_curves_show(mode: str, results: Sequence[RunResult]) -> str:
    """What the charts plot: a mean over seeds only where every seed has a point."""
    if mode == "fgd":
        return (
            "The curves are means over seeds at the arrived shares every seed reached "
            "(they end where the shortest run ends)."
        )
    seed = results[0].seed if results else None
    return f"The curves are one run each: seed {seed} (the time series differ per seed)."


def _caveats(notes: Sequence[str]) -> str:
    """The runs whose figures need a caveat (the CLI prints the same on stderr)."""
    if not notes:
        return ""
    items = "".join(f"<li>{escape(note)}</li>" for note in notes)
    return f"<h2>Caveats</h2><ul>{items}</ul>"
