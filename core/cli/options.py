"""Option types shared by the CLI commands."""

from __future__ import annotations

from enum import StrEnum


class OutputFormat(StrEnum):
    """``table`` for people, ``json`` (exactly one object on stdout) for scripts."""

    table = "table"
    json = "json"


class Mode(StrEnum):
    """Simulation mode: ``fgd`` (the paper's arrivals-only protocol) or ``replay`` (trace times)."""

    fgd = "fgd"
    replay = "replay"
