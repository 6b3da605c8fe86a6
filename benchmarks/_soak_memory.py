"""The soak server's memory: the diagnostic (what grew since the warm-up, and who holds
it), and :func:`place_by_loop`, which fills the control loop's score cache in the warm-up.

``benchmarks/soak.py`` asks its server process, over the command pipe, for
:func:`probe` once per interval. The answer always holds glibc's view of its heap
(``mallinfo2``, glibc 2.33 and later; None elsewhere):

- ``arena``: bytes the allocator got from the system for its heaps (``sbrk`` and the
  mmapped heaps of the other arenas); ``hblkhd``: bytes in blocks mmapped one by one
  (over the mmap threshold, given back when freed);
- ``uordblks``: bytes in use in those heaps; ``fordblks``: bytes free in them — what
  the allocator keeps without anybody using it, resident until ``malloc_trim`` hands
  its pages back (:mod:`kubesage.core.heap`).

RSS ≈ ``uordblks`` + resident ``fordblks`` + ``hblkhd`` + Python's own arenas
(pymalloc maps them itself) + code and libraries. Growth in ``fordblks`` alone is the
allocator holding on; growth in ``uordblks`` is memory in use.

With ``--trace-memory`` the server runs :mod:`tracemalloc` once imported (numpy
reports its buffers to it too); :data:`MARK` after the warm-up keeps a snapshot, and
each probe after it compares a new snapshot with that one: the top growth sites
(file:line of the allocation, size and count difference) and the top growing call
chains. Tracing slows the server (every allocation records a traceback) and taking a
snapshot stalls it for a moment: its latencies and RSS are not the soak's figures.
"""

from __future__ import annotations

import ctypes
import gc
import linecache
import time
import tracemalloc
from pathlib import Path
from typing import Any

from kubesage.core.heap import glibc_function

MARK = "mark"
"""Probe argument: keep the baseline snapshot (after the warm-up), then report."""
REPORT = "report"
"""Probe argument: report (and, when tracing, compare with the baseline)."""
TOP_SITES = 25
TOP_CHAINS = 5
FRAMES = 8
"""Frames recorded per allocation: enough to see from a numpy line up to the server."""
_MIB = 1024 * 1024
_IGNORED = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, linecache.__file__),
    tracemalloc.Filter(False, __file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _libc_mallinfo2() -> Any:
    function = glibc_function("mallinfo2")  # glibc >= 2.33
    if function is not None:
        function.restype = _Mallinfo2
        function.argtypes = []
    return function


_MALLINFO2 = _libc_mallinfo2()
_baseline: tracemalloc.Snapshot | None = None


def start_tracing() -> None:
    """Trace allocations from here on (call before the server builds its state)."""
    tracemalloc.start(FRAMES)


def malloc_mib() -> dict[str, float] | None:
    """glibc's ``mallinfo2`` fields that tell use from retention, in MiB (None off glibc)."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return {
        name: round(getattr(info, name) / _MIB, 1)
        for name in ("arena", "hblkhd", "uordblks", "fordblks")
    }


def probe(action: str) -> dict[str, Any]:
    """The server's memory now; with tracing, its growth since the :data:`MARK` probe."""
    global _baseline
    answer: dict[str, Any] = {"malloc_mib": malloc_mib()}
    if not tracemalloc.is_tracing():
        return answer
    gc.collect()  # what a cycle holds is garbage, not growth
    traced, peak = tracemalloc.get_traced_memory()
    answer["traced_mib"] = round(traced / _MIB, 1)
    answer["traced_peak_mib"] = round(peak / _MIB, 1)
    snapshot = tracemalloc.take_snapshot().filter_traces(_IGNORED)
    if action == MARK or _baseline is None:
        _baseline = snapshot
        return answer
    answer["growth_sites"] = [
        {
            "site": f"{_short(stat.traceback[0].filename)}:{stat.traceback[0].lineno}",
            "size_diff_kib": round(stat.size_diff / 1024, 1),
            "count_diff": stat.count_diff,
            "size_kib": round(stat.size / 1024, 1),
        }
        for stat in snapshot.compare_to(_baseline, "lineno")[:TOP_SITES]
    ]
    answer["growth_chains"] = [
        {
            "size_diff_kib": round(stat.size_diff / 1024, 1),
            "count_diff": stat.count_diff,
            "chain": [f"{_short(frame.filename)}:{frame.lineno}" for frame in stat.traceback],
        }
        for stat in snapshot.compare_to(_baseline, "traceback")[:TOP_CHAINS]
    ]
    return answer


def describe(answer: dict[str, Any], sites: int = 12) -> str:
    """A probe's answer as lines for stderr."""
    lines = [f"  malloc MiB {answer['malloc_mib']}"]
    if "traced_mib" in answer:
        lines.append(f"  traced {answer['traced_mib']} MiB (peak {answer['traced_peak_mib']})")
    for site in answer.get("growth_sites", [])[:sites]:
        lines.append(
            f"  {site['size_diff_kib']:+10.1f} KiB {site['count_diff']:+8d} blocks  {site['site']}"
        )
    return "\n".join(lines)


def _short(path: str) -> str:
    """A site without the machine's directories: relative to the repository, or from
    ``site-packages`` or the standard library on."""
    root = f"{Path(__file__).resolve().parents[1]}/"
    if path.startswith(root):
        return path[len(root) :]
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in path:
            return path[path.index(marker) + 1 :]
    return path


def place_by_loop(cluster: Any, requests: list[Any], timeout_s: float = 60.0) -> int:
    """One pending pod of each of ``requests`` (one per shape) for the control loop to
    place, then deleted; how many it placed within ``timeout_s``.

    The loop's placement reconciler scores with a policy instance of its own, whose
    per-shape score cache (:class:`~kubesage.core.policy.fgd.FgdPolicy`, node-sized
    arrays per request shape, at most ``CACHED_SHAPES``) fills only as pods of each
    shape turn pending — in the soak, pods on removed nodes, a few shapes a minute for
    the whole run. The soak fills it in the warm-up, as the extender's cache fills with
    the client's first pods (``benchmarks/extender.py`` warms one pod of every shape).
    """
    names = [f"warm-{number}" for number in range(len(requests))]
    uids = [
        cluster.submit("soak-warm", name, request).uid
        for name, request in zip(names, requests, strict=True)
    ]
    deadline = time.monotonic() + timeout_s
    waiting = len(names)
    while waiting and time.monotonic() < deadline:
        time.sleep(0.5)
        with cluster.locked():
            waiting = sum(uid in cluster.pending for uid in uids)
    for name in names:
        cluster.delete("soak-warm", name)
    return len(names) - waiting


def memory_document(probes: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``memory`` key: glibc's view each minute; traced growth with ``--trace-memory``."""
    document: dict[str, Any] = {"malloc_mib_by_minute": [p["malloc_mib"] for p in probes]}
    if "traced_mib" in probes[-1]:
        document["traced_mib_by_minute"] = [p["traced_mib"] for p in probes]
        document["growth_sites"] = probes[-1].get("growth_sites", [])
        document["growth_chains"] = probes[-1].get("growth_chains", [])
    return document
