"""Work repeated every few seconds on a daemon thread, until the returned function stops it.

One rule for the background chores a long-running ``kubesage serve`` starts (the
embedded cluster's synthetic workload, trimming the C heap): the first run comes one
period after the start, a run that raises is logged and the next one comes as planned,
a run in progress finishes before the thread ends, and the stopper waits up to
:data:`JOIN_S` for it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

JOIN_S = 5.0
"""How long a stopper waits for a run in progress to finish."""


def every(period_s: float, work: Callable[[], object], *, name: str) -> Callable[[], None]:
    """Run ``work`` every ``period_s`` seconds on a daemon thread called ``name``;
    return the function that stops it (and waits for a run in progress)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(period_s):
            try:
                work()
            except Exception:  # one failed run must not end the chore for good
                log.exception("%s failed; it runs again in %g s", name, period_s)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def stopper() -> None:
        stop.set()
        thread.join(JOIN_S)

    return stopper
