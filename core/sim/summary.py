"""Aggregate runs over seeds: per-policy means, spreads and mean curves."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from kubesage.core.sim.runner import RunResult


@dataclass(frozen=True)
class PolicySummary:
    """One policy over all its seeds."""

    policy: str
    seeds: int
    alloc_at_100: float | None
    alloc_at_130: float | None
    alloc_at_130_stdev: float | None
    frag_ratio_at_90: float | None
    failed_pods: float
    alloc_peak: float
    alloc_time_mean: float
    curves: dict[str, tuple[list[float], list[float]]]


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _stdev(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.stdev(present) if len(present) > 1 else None


def _mean_curve(
    curves: Sequence[tuple[list[float], list[float]]],
) -> tuple[list[float], list[float]]:
    """Average y over runs at each x that every run has (x grids of discrete curves match)."""
    by_x: dict[float, list[float]] = defaultdict(list)
    for xs, ys in curves:
        for x, y in zip(xs, ys, strict=True):
            by_x[x].append(y)
    complete = sorted(x for x, ys in by_x.items() if len(ys) == len(curves))
    return complete, [statistics.fmean(by_x[x]) for x in complete]


def summarise(results: Sequence[RunResult]) -> list[PolicySummary]:
    """One summary per policy, in the order policies first appear in ``results``."""
    grouped: dict[str, list[RunResult]] = {}
    for result in results:
        grouped.setdefault(result.policy, []).append(result)
    summaries = []
    for policy, runs in grouped.items():
        curve_names = runs[0].curves.keys()
        curves = {}
        for name in curve_names:
            if name.endswith("_by_arrived"):
                curves[name] = _mean_curve([run.curves[name] for run in runs])
            else:  # time series differ per seed in replay; show the first seed's
                curves[name] = runs[0].curves[name]
        summaries.append(
            PolicySummary(
                policy=policy,
                seeds=len(runs),
                alloc_at_100=_mean([r.alloc_at_100 for r in runs]),
                alloc_at_130=_mean([r.alloc_at_130 for r in runs]),
                alloc_at_130_stdev=_stdev([r.alloc_at_130 for r in runs]),
                frag_ratio_at_90=_mean([r.frag_ratio_at_90 for r in runs]),
                failed_pods=statistics.fmean(r.failed_pods for r in runs),
                alloc_peak=statistics.fmean(r.alloc_peak for r in runs),
                alloc_time_mean=statistics.fmean(r.alloc_time_mean for r in runs),
                curves=curves,
            )
        )
    return summaries


def missing_points(results: Sequence[RunResult]) -> list[str]:
    """A sentence per run whose figures need a caveat: a run of the FGD protocol without a
    value at 100 or 130 % arrived (the means leave it out, so say which run and where its
    arrivals end), and a learned policy's run whose decisions fell back to FGD (its
    figures are, in that part, FGD's)."""
    notes = []
    for run in results:
        if run.fallbacks:
            why = f" ({run.fallback_reason})" if run.fallback_reason else ""
            notes.append(
                f"{run.policy}, seed {run.seed}: {run.fallbacks} decision(s) fell back to "
                f"FGD{why}, so its figures are FGD's for those"
            )
        if run.mode != "fgd":
            continue
        points = [
            point
            for point, value in ((100, run.alloc_at_100), (130, run.alloc_at_130))
            if value is None
        ]
        short = [point for point in points if run.arrived_end < point - 1]
        stepped = [point for point in points if point not in short]
        if short:
            at = " and ".join(f"{point} %" for point in short)
            notes.append(
                f"{run.policy}, seed {run.seed}: its arrivals end at {run.arrived_end:.1f} % of "
                f"GPU capacity, so it has no value at {at} arrived (within ±1 point) and the "
                "means leave it out"
            )
        if stepped:  # arrivals went past the point, none within ±1 of it (a small cluster)
            at = " and ".join(f"{point} %" for point in stepped)
            notes.append(
                f"{run.policy}, seed {run.seed}: no arrival brought the arrived workload within "
                f"±1 point of {at} (each pod is a large step of a small cluster's capacity), so "
                "it has no value there and the means leave it out"
            )
    return notes


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def summary_table(results: Sequence[RunResult]) -> tuple[str, list[str], list[list[str]]]:
    """Title, headers and formatted rows for the CLI and the HTML report.

    The fgd protocol is summarised at fixed arrived workloads; a time replay has no
    such axis, so it shows the peak and time-weighted mean allocation instead.
    """
    summaries = summarise(results)
    if results and results[0].mode == "replay":
        title = (
            "Time replay: GPU allocation % of capacity (peak, time-weighted mean); means over seeds"
        )
        headers = ["policy", "seeds", "alloc peak", "alloc mean", "failed"]
        rows = [
            [
                s.policy,
                str(s.seeds),
                _fmt(s.alloc_peak),
                _fmt(s.alloc_time_mean),
                f"{s.failed_pods:.0f}",
            ]
            for s in summaries
        ]
        return title, headers, rows
    title = (
        "GPU allocation % at 100/130 % arrived workload, fragmentation % at 90 %; means over seeds"
    )
    headers = ["policy", "seeds", "alloc@100", "alloc@130", "sd@130", "frag@90", "failed"]
    rows = [
        [
            s.policy,
            str(s.seeds),
            _fmt(s.alloc_at_100),
            _fmt(s.alloc_at_130),
            _fmt(s.alloc_at_130_stdev),
            _fmt(s.frag_ratio_at_90, 1),
            f"{s.failed_pods:.0f}",
        ]
        for s in summaries
    ]
    return title, headers, rows


def json_document(results: Sequence[RunResult]) -> dict[str, object]:
    """The CLI's ``--format json`` object: every run, and per-policy means over seeds."""
    summary: dict[str, dict[str, float | None]] = {}
    replay = any(result.mode != "fgd" for result in results)
    for item in summarise(results):
        summary[item.policy] = {
            "alloc_at_100": None if item.alloc_at_100 is None else round(item.alloc_at_100, 3),
            "alloc_at_130": None if item.alloc_at_130 is None else round(item.alloc_at_130, 3),
        }
        if replay:  # and the peak and time-mean allocation its table shows
            summary[item.policy]["alloc_peak"] = round(item.alloc_peak, 3)
            summary[item.policy]["alloc_time_mean"] = round(item.alloc_time_mean, 3)
    document: dict[str, object] = {
        "runs": [r.summary_row() for r in results],
        "summary": summary,
    }
    if notes := missing_points(results):
        document["notes"] = notes
    return document
