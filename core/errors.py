"""The kubesage error tree.

Every error the project raises on purpose derives from :class:`KubesageError`, so a
caller can catch the whole family at a boundary (the CLI turns them into a one-line
message and exit code 2). Third-party failures are translated at the boundary with
``raise X(...) from exc``.

::

    KubesageError
    ├── InputError                bad input from a user or a file; fix the input
    │   ├── ConfigError           a YAML config: unknown key, bad value (names file and field path)
    │   ├── TraceFormatError      a trace file: names file, line and field
    │   ├── RequestError          a scheduling request that can never be valid
    │   ├── ModelError            a model file: missing, unreadable, other schema, non-finite
    │   └── UnknownPolicyError    a policy name that is not registered (lists the known ones)
    ├── CapacityError             an allocate/release that would break ClusterState's invariants
    └── DependencyError           something outside us failed; callers degrade to a fallback
        └── FetchError            download or checksum failure in ``kubesage data fetch``

Boundaries add their own leaves under these (for example ``DurationError`` and the
Kubernetes layer's ``TranslateError`` under InputError, ``BindError`` and the Flink
adapter's ``FlinkError`` under DependencyError); ``tests/core/test_errors.py`` checks
that this drawing matches the classes here and that every error class in the package
derives from KubesageError.
"""

from __future__ import annotations

from pathlib import Path


class KubesageError(Exception):
    """Root of every error kubesage raises on purpose."""


class InputError(KubesageError):
    """Bad input: the caller must change what it passed."""


class ConfigError(InputError):
    """A configuration file or value is invalid.

    ``path`` is the file (if any) and ``field`` the dotted path inside it.
    """

    def __init__(self, message: str, *, path: Path | str | None = None, field: str | None = None):
        where = []
        if path is not None:
            where.append(str(path))
        if field:
            where.append(f"field '{field}'")
        prefix = f"{': '.join(where)}: " if where else ""
        super().__init__(prefix + message)
        self.path = path
        self.field = field
        self.message = message
        """What is wrong, without where."""


class TraceFormatError(InputError):
    """A malformed row or header in a trace file; names the file, line and field."""

    def __init__(self, message: str, *, path: Path | str, line: int, field: str | None = None):
        field_part = f", field '{field}'" if field else ""
        super().__init__(f"{path}:{line}{field_part}: {message}")
        self.path = path
        self.line = line
        self.field = field


class RequestError(InputError):
    """A scheduling request that no cluster could satisfy as written."""


class CapacityError(KubesageError):
    """An allocation or release that does not match the cluster state."""


class DependencyError(KubesageError):
    """An external dependency failed; the caller is expected to degrade, log and count."""


class ModelError(InputError):
    """A learned model file that is missing, unreadable, of another schema or non-finite."""


class FetchError(DependencyError):
    """A download failed or its content did not match the expected checksum."""


class UnknownPolicyError(InputError):
    """A policy name that is not registered."""

    def __init__(self, name: str, known: list[str]):
        super().__init__(f"unknown policy '{name}'; known policies: {', '.join(sorted(known))}")
        self.name = name
        self.known = known
