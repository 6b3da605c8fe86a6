"""Which of kubesage's ``spark-submit`` settings a user's own arguments replace.

``kubesage spark submit`` passes its placement as ``--conf key=value`` before the user's
arguments. spark-submit keeps the last value of a key, and its own options
(``--executor-memory``, ``--num-executors``, …) are keys too, so the user's win. That is
meant (an explicit choice is respected) but must not be silent: a user's pod template
replaces the one that carries the placement's affinity. A ``--properties-file`` loses to
any ``--conf``, so there it is the user's value that is silently replaced. Both are named.
Scanning stops at the application (the jar or script): what follows is its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from kubesage.core.errors import InputError

SHORTHANDS: Mapping[str, str] = {
    "--executor-memory": "spark.executor.memory",
    "--executor-cores": "spark.executor.cores",
    "--num-executors": "spark.executor.instances",
    "--driver-memory": "spark.driver.memory",
    "--driver-cores": "spark.driver.cores",
    "--total-executor-cores": "spark.cores.max",
}
"""spark-submit options that set a configuration key."""
FLAGS = frozenset(
    {
        "--verbose", "-v", "--supervise", "--help", "-h", "--version", "--usage-error",
        "--load-spark-defaults",
    }
)  # fmt: skip
"""spark-submit options without a value."""
_PROPERTY = re.compile(r"(?P<key>[^=:\s]+)\s*[=:\s]\s*(?P<value>.*)")
"""A properties line: the key ends at the first ``=``, ``:`` or blank."""


def _settings(args: Sequence[str]) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """The keys the user's options set (key -> (value, how)), and the properties files."""
    found: dict[str, tuple[str, str]] = {}
    files: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if not arg.startswith("-"):
            break  # the application: what follows is its own
        name, equals, attached = arg.partition("=")
        if arg in FLAGS:
            index += 1
            continue
        if equals and name.startswith("--"):
            value: str | None = attached
            step = 1
        else:
            name, value, step = arg, (args[index + 1] if index + 1 < len(args) else None), 2
        if value is not None:
            if name in ("--conf", "-c") and "=" in value:
                key, _, setting = value.partition("=")
                found[key.strip()] = (setting, f"--conf {key.strip()}")
            elif name in SHORTHANDS:
                found[SHORTHANDS[name]] = (value, name)
            elif name == "--properties-file":
                files.append(value)
        index += step
    return found, files


def _properties(path: str) -> dict[str, str]:
    """A spark-defaults/properties file's settings (``key value``, ``key=value``)."""
    try:
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise InputError(f"--properties-file {path}: {exc.strerror or exc}") from exc
    settings = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = _PROPERTY.match(line)
        if match is not None:
            settings[match["key"]] = match["value"].strip()
    return settings


def overridden(ours: Mapping[str, str], theirs: Sequence[str]) -> list[str]:
    """One sentence per key both set to different values: which value spark-submit uses
    and which it drops (``ours``: kubesage's conf, passed as ``--conf`` pairs;
    ``theirs``: the user's arguments)."""
    given, files = _settings(theirs)
    notes = []
    for key, ours_value in ours.items():
        if key in given and given[key][0] != ours_value:
            value, how = given[key]
            notes.append(
                f"your {how}={value} replaces kubesage's {key}={ours_value}: the placement "
                "does not apply there"
            )
    for path in files:
        for key, value in _properties(path).items():
            if key in ours and key not in given and ours[key] != value:
                notes.append(
                    f"your --properties-file {path} sets {key} {value}; kubesage's --conf "
                    f"{key}={ours[key]} replaces it (pass yours as --conf to keep it)"
                )
    return notes
