"""Dependency-free SVG line charts for the HTML report."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)

Series = tuple[Sequence[float], Sequence[float]]


def _ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round-number ticks covering [low, high]."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    stop = math.ceil(high / step) * step
    count_out = round((stop - start) / step)
    ticks = [round(start + i * step, 10) for i in range(count_out + 1)]
    return ticks


def line_chart(
    series: Mapping[str, Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    width: int = 720,
    height: int = 400,
) -> str:
    """An SVG document with one polyline per named series and a legend."""
    left, right, top, bottom = 64, 170, 36, 48
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = [x for xs_, _ in series.values() for x in xs_]
    ys = [y for _, ys_ in series.values() for y in ys_ if math.isfinite(y)]
    if not xs or not ys:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="60">'
            f'<text x="10" y="30">{escape(title)}: no data</text></svg>'
        )
    x_ticks = _ticks(min(xs), max(xs))
    y_ticks = _ticks(min(ys), max(ys))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0 or 1) * plot_w

    def py(y: float) -> float:
        return top + plot_h - (y - y0) / (y1 - y0 or 1) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<text x="{left}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    for tick in x_ticks:
        parts.append(
            f'<line x1="{px(tick):.1f}" y1="{top}" x2="{px(tick):.1f}" y2="{top + plot_h}" '
            'stroke="#eee"/>'
            f'<text x="{px(tick):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{tick:g}</text>'
        )
    for tick in y_ticks:
        parts.append(
            f'<line x1="{left}" y1="{py(tick):.1f}" x2="{left + plot_w}" y2="{py(tick):.1f}" '
            'stroke="#eee"/>'
            f'<text x="{left - 6}" y="{py(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>'
        )
    parts.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>'
        f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
        f'<text transform="translate(16 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(y_label)}</text>"
    )
    for index, (name, (sx, sy)) in enumerate(series.items()):
        colour = PALETTE[index % len(PALETTE)]
        points = " ".join(
            f"{px(x):.1f},{py(y):.1f}" for x, y in zip(sx, sy, strict=True) if math.isfinite(y)
        )
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.8" points="{points}"/>'
        )
        legend_y = top + 8 + index * 18
        parts.append(
            f'<line x1="{left + plot_w + 12}" y1="{legend_y}" x2="{left + plot_w + 32}" '
            f'y2="{legend_y}" stroke="{colour}" stroke-width="3"/>'
            f'<text x="{left + plot_w + 38}" y="{legend_y + 4}">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
