"""Turn kubesage's typed errors into a one-line message and exit code 2."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from kubesage.core.errors import InputError, KubesageError

P = ParamSpec("P")
R = TypeVar("R")

stderr = Console(stderr=True, soft_wrap=True)


def user_errors(function: Callable[P, R]) -> Callable[P, R]:
    """Print a KubesageError as ``error: …`` on stderr and exit 2 instead of a traceback."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except KubesageError as exc:
            # The message is plain text: a path or key like "exp[red].yaml" is not markup.
            stderr.print(Text.assemble(("error:", "bold red"), " ", str(exc)), highlight=False)
            raise typer.Exit(code=2) from None

    return wrapper


def refuse_unused_options(given: Mapping[str, bool], applies: str, instead: str) -> None:
    """InputError naming every option in ``given`` that was given (True) although it only
    applies ``applies`` (e.g. "with --scenario"), then what this run does take: a flag
    the run would ignore is refused, never silently dropped."""
    names = [name for name, is_given in given.items() if is_given]
    if names:
        verb = "applies" if len(names) == 1 else "apply"
        raise InputError(f"{', '.join(names)} only {verb} {applies}; {instead}")
