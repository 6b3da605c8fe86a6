"""What the ``kubesage flink`` commands share: their common options, a client on a
JobManager that answers, a stop event on a timer or Ctrl-C, the job list, notes."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from kubesage.adapters.flink.client import FlinkClient, check_rest_url
from kubesage.adapters.flink.errors import FlinkError, FlinkUnavailable
from kubesage.core.cli.errors import stderr
from kubesage.core.errors import InputError

JobManager = Annotated[
    str, typer.Option("--jobmanager", help="Flink REST URL, e.g. http://127.0.0.1:8081.")
]
RegistryPath = Annotated[
    Path | None,
    typer.Option("--registry", help="Job registry file (default: user cache dir)."),
]
FlinkHome = Annotated[
    Path | None, typer.Option("--flink-home", help="Flink distribution (has bin/flink).")
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Decide and print what it would do; change nothing.")
]
Jobs = Annotated[
    list[str] | None,
    typer.Option("--job", help="Only these jobs (repeatable; default: every running job)."),
]
DurationS = Annotated[
    float | None,
    typer.Option("--duration-s", min=0.0, help="Stop after this many seconds (default: Ctrl-C)."),
]


@contextmanager
def connect(url: str) -> Iterator[FlinkClient]:
    """A client on ``url`` that has answered once; a clear error when ``url`` is not an
    http(s) URL or nothing answers."""
    with FlinkClient(check_rest_url(url)) as client:
        try:
            client.overview()
        except FlinkUnavailable as exc:
            raise FlinkUnavailable(
                f"no Flink JobManager answers at {url} ({exc}); check --jobmanager and that "
                "the cluster is up"
            ) from exc
        except FlinkError as exc:
            raise FlinkError(f"{url} does not look like a Flink REST endpoint: {exc}") from exc
        yield client


@contextmanager
def stop_after(duration_s: float | None) -> Iterator[threading.Event]:
    """An event set after ``duration_s`` (never if None) or on Ctrl-C."""
    stop = threading.Event()
    timer = threading.Timer(duration_s, stop.set) if duration_s is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield stop
    except KeyboardInterrupt:
        stop.set()
    finally:
        if timer is not None:
            timer.cancel()


def running_job_ids(client: FlinkClient) -> list[str]:
    return sorted(j.job_id for j in client.jobs() if j.state == "RUNNING")


def say(note: str) -> None:
    """A note for the user, on stderr."""
    stderr.print(note, highlight=False)


def positive_ms(seconds: float | None, option: str) -> int | None:
    """``seconds`` in whole ms (None stays None); an InputError naming ``option`` unless
    it is at least 1 ms (0 is not "not given")."""
    if seconds is None:
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        raise InputError(f"{option} must be positive, got {seconds:g}")
    milliseconds = round(seconds * 1000)
    if milliseconds < 1:
        raise InputError(f"{option} must be at least 0.001 (1 ms), got {seconds:g}")
    return milliseconds
