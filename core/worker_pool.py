"""Tasks run in spawned worker processes, results in task order, and Ctrl-C handled once.

``simulate`` and the scenario sweep run their runs in a process pool. Ctrl-C in a
terminal reaches every process of the foreground group: each idle worker printed a
KeyboardInterrupt traceback, and leaving the pool waited for the runs in flight, minutes
at full size. Here the workers ignore SIGINT and leave it to this process, which cancels
the queued tasks, stops the workers at once and lets the interrupt go on (the CLI then
says it was stopped). Workers are spawned, not forked: the parent may hold threads
(Ray, torch) that a fork would copy.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def _leave_sigint_to_the_parent() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_in_workers(
    function: Callable[[T], R],
    tasks: Sequence[T],
    jobs: int,
    on_result: Callable[[R], None] | None = None,
) -> list[R]:
    """``function`` of every task on ``jobs`` worker processes; the results in the order of
    ``tasks`` (``on_result`` sees each as it comes). Any exception here or in a task
    (KeyboardInterrupt included) cancels what has not started and stops the workers."""
    pool = ProcessPoolExecutor(
        max_workers=max(1, min(jobs, len(tasks))),
        mp_context=get_context("spawn"),
        initializer=_leave_sigint_to_the_parent,
    )
    ordered: dict[int, R] = {}
    try:
        futures = {pool.submit(function, task): index for index, task in enumerate(tasks)}
        for future in as_completed(futures):
            result = future.result()
            ordered[futures[future]] = result
            if on_result is not None:
                on_result(result)
    except BaseException:
        # no public way to stop running workers before Python 3.14's terminate_workers
        workers = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
        raise
    pool.shutdown(wait=True)
    return [ordered[index] for index in range(len(tasks))]
