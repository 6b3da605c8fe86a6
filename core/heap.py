"""Giving the C heap's free memory back to the system, for a process that runs for days.

``kubesage serve`` frees large numpy arrays all the time: every control-loop tick copies
the cluster state (arrays of nodes × GPUs), a node-set change rebuilds it, scoring makes
per-request temporaries. glibc's ``malloc`` keeps what is freed inside its heaps for
reuse, and after a large block is freed it raises its mmap threshold (up to 32 MiB on
64-bit), so later arrays of that size land in the heaps too instead of being mapped and
unmapped on their own. The heaps then only grow: long-lived small objects allocated
between the arrays pin the heap's top, and the free space below it stays resident.
The soak test (``benchmarks/soak.py``) measured it: the memory in use
(``mallinfo2().uordblks``) stayed flat after the warm-up while the free memory the
allocator kept (``fordblks``) — and the RSS with it — grew by steps of 10–15 MiB.

:func:`trim` calls glibc's ``malloc_trim(0)``, which hands every free page of every
arena back to the kernel (``madvise(MADV_DONTNEED)``; the address space stays, a page
is faulted in again when reused). :func:`start_trimming` does it from a daemon thread
every :data:`TRIM_EVERY_S`, a few milliseconds each time while the other threads'
``malloc`` waits on the arena locks; ``kubesage serve`` starts it. Elsewhere than glibc
(musl, as in Alpine images; macOS) there is no ``malloc_trim``: :func:`trim` does
nothing, returns False, and the process lives with that allocator's own policy (musl
maps large blocks one by one and unmaps them when freed). On glibc without this
module, ``MALLOC_MMAP_THRESHOLD_=131072`` in the environment (a fixed threshold turns
the dynamic one off) is the alternative: it kept about 70 MiB less resident in the
soak, but still rose by ~10 % over the run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Callable
from typing import Any

from kubesage.core.periodic import every

log = logging.getLogger(__name__)

TRIM_EVERY_S = 10.0
"""How often :func:`start_trimming` trims: about two control-loop ticks at the default."""


def glibc_function(name: str) -> Any | None:
    """The C library's function ``name`` (ctypes, types still to declare), or None where
    there is none: not Linux, or not glibc (musl has no ``malloc_trim``, no ``mallinfo2``)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return getattr(libc, name)
    except (OSError, AttributeError):
        return None


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    function = glibc_function("malloc_trim")
    if function is None:
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim: Callable[[int], int] = function
    return trim


_MALLOC_TRIM = _malloc_trim()


def can_trim() -> bool:
    """Whether this process's C library has ``malloc_trim`` (glibc)."""
    return _MALLOC_TRIM is not None


def trim() -> bool:
    """Hand the C heap's free pages back to the system; False where it cannot (not glibc)."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def start_trimming(every_s: float = TRIM_EVERY_S) -> Callable[[], None]:
    """Trim every ``every_s`` seconds from a daemon thread (nothing where :func:`can_trim`
    is False); return the function that stops it."""
    if not can_trim():
        log.debug("no malloc_trim in this C library: the heap is not trimmed")
        return lambda: None
    return every(every_s, trim, name="heap-trim")
