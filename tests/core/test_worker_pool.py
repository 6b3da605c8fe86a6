"""Tasks on worker processes (``kubesage.core.worker_pool``): order, and Ctrl-C."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kubesage.core.worker_pool import run_in_workers

STOPPED_BY_CTRL_C = """
import time
from kubesage.core.worker_pool import run_in_workers
print("started", flush=True)
run_in_workers(time.sleep, [60, 60, 60], 2)
"""


def workers_ignoring_ctrl_c(pid: int) -> int | None:
    """How many worker processes of ``pid`` ignore SIGINT (not its resource tracker,
    which always does); None where ``/proc`` does not list children (a kernel without
    CONFIG_PROC_CHILDREN)."""
    count = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        listed = task / "children"
        if not listed.exists():
            return None
        for child in listed.read_text().split():
            try:
                status = Path(f"/proc/{child}/status").read_text()
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:  # gone meanwhile
                continue
            if b"spawn_main" not in command:
                continue
            ignored = next(line for line in status.splitlines() if line.startswith("SigIgn:"))
            count += bool(int(ignored.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return count


def test_results_come_back_in_task_order() -> None:
    seen: list[int] = []
    assert run_in_workers(math.factorial, [5, 3, 4], 2, seen.append) == [120, 6, 24]
    assert sorted(seen) == [6, 24, 120]


def test_ctrl_c_stops_the_workers_at_once_with_one_traceback_not_one_per_worker() -> None:
    """Ctrl-C reaches the whole process group: the workers leave it to the parent, which
    stops them at once instead of waiting for the runs in flight (60 s each here)."""
    process = subprocess.Popen(
        [sys.executable, "-c", STOPPED_BY_CTRL_C],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: the signal below reaches it alone
        # Ctrl-C's default action: a test run started in the background ignores SIGINT
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "started\n"
        # the workers are spawned and leave Ctrl-C to the parent (a loaded machine may
        # take seconds to import them); a Ctrl-C before that would kill them too
        deadline = time.monotonic() + 60
        while (ready := workers_ignoring_ctrl_c(process.pid)) != 2:
            if ready is None:  # cannot tell: give them time
                time.sleep(5)
                break
            assert time.monotonic() < deadline, "the workers did not start in 60 s"
            time.sleep(0.05)
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
        assert time.monotonic() - started < 20, "waited for the runs in flight"
        assert process.returncode != 0
        assert stderr.count("Traceback") == 1 and "KeyboardInterrupt" in stderr, stderr
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
