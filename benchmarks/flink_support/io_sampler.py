"""Checkpoint bytes as the file system counts them, sampled while a run goes on.

Flink's checkpoint history says how many bytes a checkpoint wrote, not when; the
file system sees the bytes land. A thread samples, every ``period_s``:

- **the checkpoint directory** (``execution.checkpointing.dir``, a local path here):
  the bytes by which files under it appeared or grew since the last sample. This is
  the figure the benchmark reports: it holds checkpoint data only (state files,
  channel state, ``_metadata``), whichever process wrote it (TaskManager or
  JobManager), and it does not depend on the file system's write accounting.
  A file written and deleted between two samples is missed; Flink keeps a checkpoint's
  files until the next one completes, far longer than a sample.
- **``/proc/<pid>/io`` ``write_bytes``** of the TaskManagers (where readable): what the
  kernel charged them for the storage layer. A cross-check only: it also counts the
  TaskManager's logs and spills, misses the JobManager's ``_metadata``, and reads 0 on
  tmpfs, which does not account writes.

Rates are taken over windows of ``window_ms`` (1 s by default), far longer than the
sampling period: a sample on a busy machine comes late, and a rate over one short gap
would swing with that delay. Per second is also how storage throughput is metered.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_WINDOW_MS = 1_000
"""Rate window: twenty samples at the default period."""


@dataclass
class IoTimeline:
    """Cumulative bytes written since sampling began, at each sample (epoch ms)."""

    times_ms: list[int] = field(default_factory=list)
    dir_bytes: list[int] = field(default_factory=list)
    """Bytes by which files under the checkpoint directory appeared or grew."""
    proc_bytes: list[int] | None = field(default_factory=list)
    """Sum of the sampled processes' ``write_bytes``; None where ``/proc`` is unreadable."""

    def peak_rate(self, series: Sequence[int], window_ms: int = DEFAULT_WINDOW_MS) -> float:
        """Highest bytes/s of ``series`` over any span of at least ``window_ms`` between
        samples; 0 with fewer than two samples."""
        best = 0.0
        for index, (now, total) in enumerate(zip(self.times_ms, series, strict=False)):
            earlier = bisect.bisect_right(self.times_ms, now - window_ms, 0, index) - 1
            if earlier >= 0 and now > self.times_ms[earlier]:
                rate = (total - series[earlier]) * 1000 / (now - self.times_ms[earlier])
                best = max(best, rate)
        return best

    @property
    def dir_total(self) -> int:
        return self.dir_bytes[-1] if self.dir_bytes else 0

    @property
    def proc_total(self) -> int | None:
        if self.proc_bytes is None:
            return None
        return self.proc_bytes[-1] if self.proc_bytes else 0


def directory_sizes(root: Path) -> dict[str, int]:
    """Size of every file under ``root`` (files that vanish while walked are skipped)."""
    sizes: dict[str, int] = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            try:
                sizes[path] = os.stat(path).st_size
            except FileNotFoundError:
                continue
    return sizes


def process_write_bytes(pids: Sequence[int]) -> int | None:
    """Sum of ``write_bytes`` in ``/proc/<pid>/io``; None when any is unreadable."""
    total = 0
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/io").read_text().splitlines()
        except OSError:
            return None
        fields = dict(line.split(": ", 1) for line in lines if ": " in line)
        total += int(fields.get("write_bytes", 0))
    return total


class _Sampler:
    def __init__(self, root: Path, pids: Sequence[int]) -> None:
        self.root = root
        self.pids = list(pids)
        self.timeline = IoTimeline(proc_bytes=[] if self.pids else None)
        self._sizes = directory_sizes(root)
        self._dir_total = 0
        self._proc_base = process_write_bytes(self.pids) if self.pids else None

    def sample(self) -> None:
        sizes = directory_sizes(self.root)
        # Growth only: deleted (subsumed) checkpoints are not negative writes.
        self._dir_total += sum(
            max(0, size - self._sizes.get(path, 0)) for path, size in sizes.items()
        )
        self._sizes = sizes
        timeline = self.timeline
        timeline.times_ms.append(int(time.time() * 1000))
        timeline.dir_bytes.append(self._dir_total)
        if timeline.proc_bytes is not None:
            proc = process_write_bytes(self.pids)
            if proc is None or self._proc_base is None:
                timeline.proc_bytes = None
            else:
                timeline.proc_bytes.append(proc - self._proc_base)


@contextmanager
def sample_io(
    checkpoint_dir: Path, pids: Sequence[int] = (), *, period_s: float = 0.05
) -> Iterator[IoTimeline]:
    """Sample the checkpoint directory (and ``pids``' write counters) for a ``with`` block.

    The timeline yielded is filled in while the block runs and complete after it.
    """
    sampler = _Sampler(checkpoint_dir, pids)
    stop = threading.Event()

    def loop() -> None:
        sampler.sample()
        while not stop.wait(period_s):
            sampler.sample()

    thread = threading.Thread(target=loop, name="checkpoint-io-sampler", daemon=True)
    thread.start()
    try:
        yield sampler.timeline
    finally:
        stop.set()
        thread.join()
        sampler.sample()
