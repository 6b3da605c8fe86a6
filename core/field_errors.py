"""One wording for invalid input: pydantic and YAML errors as field paths.

Every boundary that decodes user input (config files, the SchedulingPolicy CRD,
API payloads, trace rows, Flink replies, the job registry) reports a problem the
same way: the dotted field path inside the document and one short message, with
``unknown key`` for a key the model does not have. Callers wrap the result in the
error class of their boundary (:class:`~kubesage.core.errors.ConfigError` for
configuration, an ``InputError`` subclass elsewhere).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kubesage.core.errors import ConfigError

UNKNOWN_KEY = "unknown key"
"""The message for a key the schema does not have (pydantic's ``extra_forbidden``)."""

MAX_LISTED = 3
"""Problems spelled out by :func:`describe`; the rest are counted."""


@dataclass(frozen=True)
class FieldProblem:
    """One invalid field."""

    field: str
    """Dotted path inside the document (``spec.cluster.nodes``); empty for the root."""
    message: str
    """What is wrong, in pydantic's words without its ``Value error,`` prefix."""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def field_path(loc: Sequence[Any], prefix: str = "") -> str:
    """``("spec", "nodes", 0)`` → ``spec.nodes.0``, under ``prefix`` when given."""
    parts = [prefix] if prefix else []
    parts.extend(str(part) for part in loc)
    return ".".join(parts)


def field_problems(exc: ValidationError, prefix: str = "") -> list[FieldProblem]:
    """Every problem pydantic found, in its order."""
    problems = []
    for error in exc.errors(include_url=False):
        message = UNKNOWN_KEY if error["type"] == "extra_forbidden" else str(error["msg"])
        problems.append(
            FieldProblem(field_path(error["loc"], prefix), message.removeprefix("Value error, "))
        )
    return problems


def first_problem(exc: ValidationError, prefix: str = "") -> FieldProblem:
    """The first problem (pydantic reports at least one)."""
    return field_problems(exc, prefix)[0]


def describe(exc: ValidationError, prefix: str = "") -> str:
    """The first few problems on one line: ``a.b: msg; c: msg (and 4 more)``."""
    problems = field_problems(exc, prefix)
    text = "; ".join(str(problem) for problem in problems[:MAX_LISTED])
    more = len(problems) - MAX_LISTED
    return text + (f" (and {more} more)" if more > 0 else "")


def config_error(exc: ValidationError, *, path: Path | str | None, prefix: str = "") -> ConfigError:
    """A ConfigError naming the file and the first invalid field."""
    problem = first_problem(exc, prefix)
    return ConfigError(problem.message, path=path, field=problem.field or None)


def yaml_error(exc: yaml.YAMLError, *, path: Path | str | None) -> ConfigError:
    """A ConfigError for text that is not YAML, with the line and column when known."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return ConfigError(f"not valid YAML{where}: {problem}", path=path)
