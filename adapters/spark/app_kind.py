"""Which kind of Spark application is submitted, and the memory overhead Spark gives it.

On Kubernetes, Spark sizes an executor's memory overhead (off-heap, Python workers,
native buffers) as a factor of its memory, at least 384 MiB: 0.10 for a JVM
application and 0.40 for a non-JVM one — PySpark or SparkR, whose workers live
outside the JVM (``spark.kubernetes.memoryOverheadFactor``'s documented default,
Spark 3.x/4.x). Spark decides by the application's main resource (a ``.py`` or ``.R``
file), so :func:`app_kind_of` reads it from the spark-submit arguments the same way:
the first argument that is neither an option nor an option's value.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum


class AppKind(StrEnum):
    jvm = "jvm"
    python = "python"
    r = "r"


OVERHEAD_FACTOR = {AppKind.jvm: 0.10, AppKind.python: 0.40, AppKind.r: 0.40}
MIN_OVERHEAD_MIB = 384

SUBMIT_FLAGS = frozenset({"--verbose", "-v", "--supervise", "--help", "-h", "--version"})
"""spark-submit's options that take no value (every other option takes the next
argument, unless written ``--name=value``)."""


def app_kind_of(submit_args: Sequence[str]) -> AppKind:
    """The kind of application ``submit_args`` (spark-submit's own arguments) submit:
    by its main resource's suffix (``.py`` python, ``.R``/``.r`` r, anything else —
    a jar, a class — jvm)."""
    position = 0
    while position < len(submit_args):
        arg = submit_args[position]
        if arg.startswith("-"):
            takes_value = arg not in SUBMIT_FLAGS and "=" not in arg
            position += 2 if takes_value else 1
            continue
        if arg.endswith(".py"):
            return AppKind.python
        if arg.endswith((".R", ".r")):
            return AppKind.r
        return AppKind.jvm
    return AppKind.jvm


def executor_overhead_mib(memory_mib: int, kind: AppKind = AppKind.jvm) -> int:
    """``spark.executor.memoryOverhead`` for ``memory_mib`` of executor memory, as Spark
    sizes it for ``kind`` by default (its factor of the memory, truncated as Spark's
    ``(factor * memory).toLong``, at least 384 MiB)."""
    return max(MIN_OVERHEAD_MIB, int(OVERHEAD_FACTOR[kind] * memory_mib))
