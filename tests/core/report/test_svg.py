"""The report's SVG charts: axes cover the data, every series is drawn inside the plot."""

from __future__ import annotations

import itertools
import re

import pytest

from kubesage.core.report.svg import _ticks, line_chart


@pytest.mark.parametrize(
    ("low", "high"), [(0.0, 130.0), (14.9, 99.7), (5.0, 5.0), (0.0, 0.003), (-3.0, 7.5)]
)
def test_ticks_cover_the_range(low: float, high: float) -> None:
    ticks = _ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1


def test_every_point_is_inside_the_plot_area() -> None:
    svg = line_chart(
        {"a": ([0, 50, 130], [10.0, 60.0, 95.3]), "b": ([0, 130], [12.0, 99.7])},
        title="t",
        x_label="x",
        y_label="y",
        width=700,
        height=400,
    )
    box = re.search(r'<rect x="(\d+)" y="(\d+)" width="(\d+)" height="(\d+)"', svg)
    assert box is not None
    left, top, width, height = map(int, box.groups())
    polylines = re.findall(r'<polyline[^>]*points="([^"]+)"', svg)
    assert len(polylines) == 2
    for points in polylines:
        for pair in points.split():
            x, y = map(float, pair.split(","))
            assert left - 0.1 <= x <= left + width + 0.1
            assert top - 0.1 <= y <= top + height + 0.1


def test_no_data_says_so() -> None:
    assert "no data" in line_chart({}, title="empty", x_label="x", y_label="y")
