"""Run another program in the foreground, as a shell runs a job: until it exits, with
its exit status, and with the signals a supervisor sends reaching it.

``subprocess.run`` is not enough for a wrapper such as ``kubesage spark submit``. A
SIGTERM (a CI runner, Airflow, a container stopping) ends the wrapper and leaves the
program running, orphaned. A Ctrl-C makes ``subprocess.run`` kill the program 0.25 s
later, before a JVM's shutdown hooks have deleted its executor pods. Here SIGTERM,
SIGHUP and SIGINT are passed on, and the wrapper waits. One exception: when this process
group is a terminal's foreground group, the terminal's Ctrl-C already reaches the
program, so SIGINT is not passed on again (it would arrive twice). The handlers are in
place before the program starts, and a signal that arrives before it exists is passed
on as soon as it does. A signal this process was started ignoring (``nohup``, a
script's ``cmd &``) stays ignored and is not passed on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from kubesage.core.errors import DependencyError

PASSED_ON = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
"""Signals sent to the wrapper that are passed on to the program."""


def _terminal_sends_sigint() -> bool:
    """Whether this process group is the foreground group of its controlling terminal
    (a Ctrl-C there reaches every process of the group, the program included), whatever
    stdin is redirected from."""
    try:
        terminal = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:  # no controlling terminal
        return False
    try:
        return os.tcgetpgrp(terminal) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(terminal)


def run_in_foreground(command: Sequence[str]) -> int:
    """Run ``command`` until it exits; its exit status, ``128 + N`` when signal ``N``
    ended it (as a shell reports it). DependencyError naming the program when it cannot
    be started. Signals are handled only from the main thread (Python's rule); elsewhere
    the program simply runs."""
    child: subprocess.Popen[bytes] | None = None
    early: list[int] = []
    terminal = _terminal_sends_sigint()

    def pass_on(signum: int, frame: FrameType | None) -> None:
        if child is None:
            early.append(signum)  # before the program exists: passed on once it does
            return
        if signum == signal.SIGINT and terminal:
            return  # the terminal sent it to the program as well
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    # Python-level handlers, not SIG_IGN: the program starts with the default action
    # (an ignored signal would stay ignored across exec). A signal this process was
    # started ignoring (nohup, a script's `cmd &`) stays ignored, for the program too.
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for passed in PASSED_ON:
            if signal.getsignal(passed) is not signal.SIG_IGN:
                previous[passed] = signal.signal(passed, pass_on)
    try:
        try:
            child = subprocess.Popen(list(command))
        except OSError as exc:
            raise DependencyError(f"cannot run {command[0]}: {exc}") from exc
        for signum in early:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)
        status = child.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 128 - status if status < 0 else status
