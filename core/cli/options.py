"""Option types shared by the CLI commands."""

from __future__ import annotations

from enum import StrEnum


class OutputFormat(StrEnum):
    """``table`` for people, ``json`` (exactly one object on stdout) for scripts."""

    table = "table"
    json = "json"
