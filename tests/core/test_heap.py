"""kubesage.core.heap: the free pages glibc keeps go back to the system; elsewhere, nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from kubesage.core import heap

glibc_only = pytest.mark.skipif(not heap.can_trim(), reason="no malloc_trim (not glibc)")

# Free blocks below a long-lived one: what glibc cannot give back by shrinking the heap's
# top, as in the server (its dynamic mmap threshold, raised here by hand, puts large
# arrays in the heap). Run in a process of its own: mallopt changes the whole process.
FRAGMENTED = textwrap.dedent(
    """
    import ctypes, re
    from kubesage.core import heap

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallopt(-3, 64 << 20)  # M_MMAP_THRESHOLD: 1 MiB blocks in the heap
    libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: never shrink the top by itself

    def rss_mib():
        status = open("/proc/self/status").read()
        return int(re.search(r"VmRSS:\\s+(\\d+)", status).group(1)) / 1024

    blocks = []
    for _ in range(100):
        block = libc.malloc(1 << 20)
        ctypes.memset(block, 1, 1 << 20)
        blocks.append(block)
    pinned = libc.malloc(64)  # above them all: the top cannot shrink
    for block in blocks:
        libc.free(block)
    before = rss_mib()
    trimmed = heap.trim()
    print(trimmed, before - rss_mib())
    """
)


@glibc_only
def test_trim_gives_the_free_pages_of_the_heap_back() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FRAGMENTED], capture_output=True, text=True, check=True
    )
    trimmed, freed_mib = result.stdout.split()
    assert trimmed == "True"
    assert float(freed_mib) > 80  # of the 100 MiB freed


@glibc_only
def test_start_trimming_runs_a_thread_until_stopped() -> None:
    stop = heap.start_trimming(every_s=0.01)
    assert any(thread.name == "heap-trim" for thread in threading.enumerate())
    stop()
    assert not any(thread.name == "heap-trim" for thread in threading.enumerate())


def test_without_malloc_trim_nothing_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_MALLOC_TRIM", None)
    assert not heap.can_trim()
    assert heap.trim() is False
    stop = heap.start_trimming(every_s=0.01)
    assert not any(thread.name == "heap-trim" for thread in threading.enumerate())
    stop()
