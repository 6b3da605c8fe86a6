"""Keeping the cyclic garbage collector's pauses short in ``kubesage serve``.

CPython frees most objects by reference counting; its cyclic collector only looks for
reference cycles, and while it runs every thread of the process waits (it holds the
GIL). In ``kubesage serve`` that includes the extender's event loop, so a collection's
length is added to the latency of whatever request is in flight.

Two things make the collections long on a large cluster:

- **Everything built at start-up** (the cluster state, the policy's caches, the
  imported modules) would be scanned by every full collection. :func:`settle` collects
  once and then freezes it (``gc.freeze()``): frozen objects are never scanned again.
- **The default thresholds** (700 new container objects start a young collection, ten
  of those a middle one, ten of those a full one) suit a short script. A server
  allocates without pause (every request, every control-loop tick), so young
  collections come every few hundred objects, and what they find alive (the pods bound
  since start-up, a tick's records) is promoted until a full collection scans it all.
  :data:`THRESHOLDS` start a young collection every 10,000 allocations instead.

The control loop itself allocates little per tick for pods that did not change (its
collectors keep each pod's record, :mod:`kubesage.core.cli.loop_sources`); that did most
of the work. ``python benchmarks/loop_scale.py`` measures both: on 10,000 nodes with
40,000 bound pods, before that change and with CPython's thresholds, 316 ms of every
tick went to collections (25 full ones in 8 ticks, the longest 120 ms); with it, 7 ms
(none full, the longest 6 ms); with :data:`THRESHOLDS` too, none in 8 ticks.

Memory: at most :data:`THRESHOLDS`\\[0] container objects of cyclic garbage wait for a
young collection instead of 700 — a few MiB at worst.
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 10, 10)
"""``gc.set_threshold`` for a long-running server (CPython's default: 700, 10, 10)."""


def settle(thresholds: tuple[int, int, int] = THRESHOLDS) -> None:
    """Once start-up is done: collect, freeze what survives, and set ``thresholds``."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
