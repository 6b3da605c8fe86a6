"""Run another program in the foreground, as a shell runs a job: until it exits, with
its exit status, and with the signals a supervisor sends reaching it.

``subprocess.run`` is not enough for a wrapper such as ``kubesage spark submit``. A
SIGTERM (a CI runner, Airflow, a container stopping) ends the wrapper and leaves the
program running, orphaned. A Ctrl-C makes ``subprocess.run`` kill the program 0.25 s
later, before a JVM's shutdown hooks have deleted its executor pods. Here SIGTERM and
SIGHUP are passed on, and the wrapper waits. SIGINT is ignored while the program runs:
a terminal's Ctrl-C reaches the whole foreground process group, the program included,
and passing it on too would deliver it twice.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from kubesage.core.errors import DependencyError

PASSED_ON = (signal.SIGTERM, signal.SIGHUP)
"""Signals sent to the wrapper that are passed on to the program."""


def run_in_foreground(command: Sequence[str]) -> int:
    """Run ``command`` until it exits; its exit status, ``128 + N`` when signal ``N``
    ended it (as a shell reports it). DependencyError naming the program when it cannot
    be started. Signals are handled only from the main thread (Python's rule); elsewhere
    the program simply runs."""
    try:
        child = subprocess.Popen(list(command))
    except OSError as exc:
        raise DependencyError(f"cannot run {command[0]}: {exc}") from exc

    def pass_on(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for passed in PASSED_ON:
            previous[passed] = signal.signal(passed, pass_on)
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        status = child.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 128 - status if status < 0 else status
