"""``kubesage serve``'s garbage-collector settings (:mod:`kubesage.core.gc_pauses`)."""

from __future__ import annotations

import json
import subprocess
import sys

from kubesage.core import gc_pauses


def test_settle_freezes_what_start_up_built_and_sets_the_thresholds() -> None:
    # In a child process: freezing the test process's objects would outlive the test.
    script = (
        "import gc, json; from kubesage.core import gc_pauses; "
        "kept = [[i] for i in range(1000)]; gc_pauses.settle(); "
        "print(json.dumps([gc.get_threshold(), gc.get_freeze_count(), gc.get_count()[0]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    thresholds, frozen, young = json.loads(done.stdout)
    assert tuple(thresholds) == gc_pauses.THRESHOLDS
    assert frozen >= 1000  # the start-up objects (the 1,000 lists among them)
    assert young < 100  # collected just before: nothing young left to scan
