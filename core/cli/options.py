"""Option types shared by the CLI commands."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kubesage.core.errors import InputError


class OutputFormat(StrEnum):
    """``table`` for people, ``json`` (exactly one object on stdout) for scripts."""

    table = "table"
    json = "json"


class Mode(StrEnum):
    """Simulation mode: ``fgd`` (the paper's arrivals-only protocol) or ``replay`` (trace times)."""

    fgd = "fgd"
    replay = "replay"


NodesCsv = Annotated[Path | None, typer.Option("--nodes", help="openb node list CSV.")]
PodsCsv = Annotated[Path | None, typer.Option("--pods", help="openb pod list CSV.")]
Jobs = Annotated[int | None, typer.Option("--jobs", min=1, help="Parallel runs (default: CPUs).")]
Format = Annotated[OutputFormat, typer.Option("--format", help="Output format.")]
MetricMapOption = Annotated[
    Path | None,
    typer.Option("--metric-map", help="Metric map YAML (default: configs/metric-map.yaml)."),
]


def prometheus_url(url: str) -> str:
    """``--prometheus`` as given, without a trailing slash; InputError unless it is an
    http(s) URL with a host."""
    if not re.match(r"^https?://[^/\s]+", url):
        raise InputError(f"--prometheus '{url}' must be an http:// or https:// URL")
    return url.rstrip("/")
