"""What a user's ``flink run`` arguments say: which are Flink's and which the program's,
the program, the parallelism they set, and the local files they name.

``flink run [OPTIONS] <jar> <program arguments>`` parses its options with commons-cli,
stopping at the first token that is not one of its options: the jar, or an option it does
not know (a Python job's ``-py job.py --input x`` hands ``--input x`` to the program).
Everything from there on is the program's, so a program's own ``-p`` or ``-c`` is never
read as Flink's. When ``-py``, ``-pym`` or ``-j`` names the program, no positional
argument is a jar: all of them are the program's (``-py job.py topic-a``). ``-a`` takes
every value up to Flink's next option as the program's arguments (the first is the jar
unless the program is named otherwise), and positional ones are then not read. The
option table is Flink's ``run`` action (1.17 to 2.x).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubesage.core.errors import InputError

WITH_VALUE = frozenset(
    {
        "-c", "--class", "-C", "--classpath", "-D", "-e", "--executor", "-j", "--jarfile",
        "-m", "--jobmanager", "-p", "--parallelism", "-py", "--python", "-pyarch",
        "--pyArchives", "-pyclientexec", "--pyClientExecutable", "-pyexec", "--pyExecutable",
        "-pyfs", "--pyFiles", "-pym", "--pyModule", "-pypath", "--pyPythonPath", "-pyreq",
        "--pyRequirements", "-rm", "--restoreMode", "-cm", "--claimMode", "-s",
        "--fromSavepoint", "-t", "--target", "-z", "--zookeeperNamespace",
    }
)  # fmt: skip
"""``flink run`` options that take a value (``-p 4``, ``-p4``, ``--parallelism=4``)."""
FLAGS = frozenset(
    {
        "-d", "--detached", "-n", "--allowNonRestoredState", "-sae",
        "--shutdownOnAttachedExit", "-v", "--verbose", "-yd", "--yarndetached",
    }
)  # fmt: skip
"""``flink run`` options without a value."""
FILE_OPTIONS = {
    "-py": False, "--python": False, "-j": False, "--jarfile": False, "-pyreq": False,
    "--pyRequirements": False, "-pyfs": True, "--pyFiles": True, "-pyarch": True,
    "--pyArchives": True,
}  # fmt: skip
"""Options whose value names local files (True: a comma-separated list); a value may
carry ``#name`` after the path (``-pyarch venv.zip#venv``)."""
_DEFAULT_PARALLELISM = "parallelism.default="
_PROGRAM_NAMED = frozenset({"-py", "--python", "-pym", "--pyModule", "-j", "--jarfile"})
"""Options that name the program: then no positional argument is a jar."""


_ARGUMENTS = frozenset({"-a", "--arguments"})
"""Flink's option whose values (as many as follow) are the program's arguments, the
first the jar when no other option names the program; positional arguments are then
not read."""


@dataclass(frozen=True)
class RunArguments:
    """``flink run``'s own options, each ``(option, value or None)`` in order, then the
    jar (if any) and the program's arguments."""

    options: tuple[tuple[str, str | None], ...]
    jar: str | None
    program_args: tuple[str, ...]
    flink_end: int = 0
    """Where Flink's options end in the arguments: the jar or the program's first."""
    jar_at: int | None = None
    """The jar's index in the arguments (None: no jar, or named by ``-j``)."""

    def value(self, *names: str) -> str | None:
        """The first value given to any of ``names``."""
        return next((value for option, value in self.options if option in names), None)


def _is_flink_option(arg: str) -> bool:
    name, equals, _ = arg.partition("=")
    return (
        arg in FLAGS
        or arg in WITH_VALUE
        or arg in _ARGUMENTS
        or (bool(equals) and name in WITH_VALUE)
        or (arg.startswith("-D") and len(arg) > 2)
        or (arg.startswith("-p") and arg[2:].isdecimal())
    )


def split_run_arguments(args: Sequence[str]) -> RunArguments:
    """Split ``args`` as ``flink run`` does (module docstring)."""
    options: list[tuple[str, str | None]] = []
    passed: list[tuple[int, str]] = []  # -a's values, with their indices
    index = 0
    end = len(args)
    while index < len(args):
        arg = args[index]
        following = args[index + 1] if index + 1 < len(args) else None
        name, equals, attached = arg.partition("=")
        if arg in _ARGUMENTS:  # every value up to the next of Flink's own options
            index += 1
            while index < len(args) and not _is_flink_option(args[index]):
                passed.append((index, args[index]))
                index += 1
            continue
        if arg in FLAGS:
            options.append((arg, None))
        elif arg in WITH_VALUE:
            if following is None:
                raise InputError(f"flink run option {arg} needs a value")
            options.append((arg, following))
            index += 1
        elif equals and name in WITH_VALUE and name != "-D":
            options.append((name, attached))
        elif arg.startswith("-D") and len(arg) > 2:
            options.append(("-D", arg[2:]))
        elif arg.startswith("-p") and arg[2:].isdecimal():  # commons-cli's attached form
            options.append(("-p", arg[2:]))
        else:  # the jar, or an option Flink does not know: the program's from here
            end = index
            break
        index += 1
    named = any(option in _PROGRAM_NAMED for option, _ in options)
    if passed:  # the program's arguments are -a's; positional ones are not read
        values = tuple(value for _, value in passed)
        if named:
            return RunArguments(tuple(options), None, values, end)
        return RunArguments(tuple(options), values[0], values[1:], end, passed[0][0])
    rest = tuple(args[end:])
    if not rest or rest[0].startswith("-") or named:
        # an option Flink does not know, or the program is -py/-pym/-j's: all the program's
        return RunArguments(tuple(options), None, rest, end)
    return RunArguments(tuple(options), rest[0], rest[1:], end, end)


def parallelism_set(args: Sequence[str]) -> int | None:
    """The parallelism Flink's own options set: ``-p``/``--parallelism``, or
    ``-Dparallelism.default`` (the configuration it falls back to); the first wins."""
    for option, value in split_run_arguments(args).options:
        if option in ("-p", "--parallelism"):
            given = value or ""
        elif option == "-D" and (value or "").startswith(_DEFAULT_PARALLELISM):
            given = (value or "").removeprefix(_DEFAULT_PARALLELISM)
        else:
            continue
        try:
            return int(given)
        except ValueError:
            raise InputError(f"{option} {given}: the parallelism is not an integer") from None
    return None


def program_name(args: Sequence[str]) -> str | None:
    """The program's name: the ``-py`` file, the ``-pym`` module, the ``-c`` class, or the
    jar; None when the arguments name none."""
    split = split_run_arguments(args)
    for names in (("-py", "--python"), ("-pym", "--pyModule"), ("-c", "--class")):
        value = split.value(*names)
        if value:
            return Path(value).name
    jar = split.jar or split.value("-j", "--jarfile")
    return Path(jar).name if jar else None


def local_files(args: Sequence[str]) -> list[str]:
    """The local paths Flink's options and the jar name (no URL, no ``#name``)."""
    return _local_files(split_run_arguments(args))


def _local_files(split: RunArguments) -> list[str]:
    paths = [split.jar] if split.jar else []
    for option, value in split.options:
        if option in FILE_OPTIONS and value:
            entries = value.split(",") if FILE_OPTIONS[option] else [value]
            paths += [entry.split("#", 1)[0] for entry in entries]
    return [path for path in paths if path and "://" not in path]


def with_absolute_files(args: Sequence[str], folder: Path) -> list[str]:
    """``args`` with every relative local path of :func:`local_files` made absolute
    against ``folder`` (where ``flink run`` ran), so the arguments can be run again from
    anywhere; the program's own arguments are left as they are."""
    split = split_run_arguments(args)
    relative = {path for path in _local_files(split) if not Path(path).is_absolute()}
    if not relative:
        return list(args)

    def absolute(text: str) -> str:
        parts = []
        for entry in text.split(","):
            path, hash_, name = entry.partition("#")
            path = str(folder / path) if path in relative else path
            parts.append(path + hash_ + name)
        return ",".join(parts)

    out = list(args)
    for index in range(split.flink_end):
        previous = out[index - 1] if index else ""
        if previous in FILE_OPTIONS:
            out[index] = absolute(out[index])
        else:
            name, equals, value = out[index].partition("=")
            if equals and name in FILE_OPTIONS:
                out[index] = f"{name}={absolute(value)}"
    if split.jar is not None and split.jar_at is not None and split.jar in relative:
        out[split.jar_at] = str(folder / split.jar)
    return out
