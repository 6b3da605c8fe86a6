"""Errors of the Flink adapter: Flink's failures translated at the REST boundary, and
checkpoint profiles that cannot be planned.

::

    DependencyError (kubesage.core.errors)
    └── FlinkError                  anything the Flink adapter could not get from Flink
        ├── FlinkUnavailable        connection refused/timed out or 5xx, after bounded retries
        ├── FlinkNotFound           404: unknown job, vertex or trigger request
        ├── FlinkResponseError      a reply we cannot use: bad JSON, missing or mistyped field,
        │                           or a 4xx other than 404 (names the endpoint and the field)
        ├── FlinkRescaleError       a rescale Flink refused or that did not reach RUNNING
        └── FlinkSubmitError        ``flink run`` failed (kubesage.adapters.flink.submit)
    InputError (kubesage.core.errors)
    └── StaggerInputError           a checkpoint profile or plan input that cannot be planned

Callers of the control loop catch ``FlinkError``, log and count it, and try again on the
next tick: a flaky JobManager never kills the loop.
"""

from __future__ import annotations

from kubesage.core.errors import DependencyError, InputError


class FlinkError(DependencyError):
    """Root of the Flink adapter's errors; ``endpoint`` is the REST path involved, if any."""

    def __init__(self, message: str, *, endpoint: str | None = None) -> None:
        super().__init__(f"{endpoint}: {message}" if endpoint else message)
        self.endpoint = endpoint


class FlinkUnavailable(FlinkError):  # noqa: N818 (the agreed interface name)
    """The JobManager did not answer, or answered 5xx, on every attempt."""


class FlinkNotFound(FlinkError):  # noqa: N818 (the agreed interface name)
    """Flink answered 404: the job, vertex or trigger request does not exist (any more)."""


class FlinkResponseError(FlinkError):
    """A reply that is not what the endpoint documents; ``field`` names the offending field."""

    def __init__(self, message: str, *, endpoint: str, field: str | None = None) -> None:
        detail = f"field '{field}': {message}" if field else message
        super().__init__(detail, endpoint=endpoint)
        self.field = field


class FlinkRescaleError(FlinkError):
    """A rescale that Flink refused or that did not finish; the job keeps its old parallelism."""


class StaggerInputError(InputError):
    """A checkpoint profile that cannot be planned (names the job and the field)."""
