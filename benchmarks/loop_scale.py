"""The control loop's tick, and the garbage collector's pauses, as bound pods grow.

``kubesage serve`` runs the control loop in a thread beside the extender: every tick
collects every pod and hands the reconcilers a view of them, so its work grows with
the pods the cluster runs. While the loop's thread works, and above all while the
cyclic garbage collector runs (it stops every thread), the extender's requests wait.

For each count of bound pods, a fresh process builds the embedded cluster as
``kubesage serve --embedded`` does (10,000 nodes pre-loaded by FGD, start-up objects
frozen), binds that many more pods through the extender's bind path (as
kube-scheduler's binds would), builds the loop and runs its ticks back to back. It
does so twice, with the collector's thresholds of :mod:`kubesage.core.gc_pauses`
(``kubesage``) and with CPython's default (``python-default``, 700/10/10) — the
baseline.

Figures per count and setting:

- ``tick_p50_ms``: median tick (the first, which builds every pod's record, left out);
- ``gc_ms_per_tick``: time in the cyclic collector per tick (all generations);
- ``gc_max_pause_ms``: the longest single collection — how long an extender request
  can be held up by one;
- ``full_collections``: full (generation 2) collections over the ticks.

JSON: ``{"nodes", "ticks", "bound_pods": {"<n>": {"<setting>": {the figures above}}}}``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from _common import REPO, format_table, json_line, parse_args, positive_int, run_main

SETTINGS = {"kubesage": None, "python-default": (700, 10, 10)}
"""Collector thresholds per setting (None: kubesage.core.gc_pauses' own)."""
TINY = {"nodes": 200, "ticks": 3}
TINY_BOUND = [200]
"""The tiny run's bound pods (not a default of the append option: a given --bound would
be added to it)."""


def measure(
    nodes: int, bound: int, ticks: int, thresholds: tuple[int, int, int] | None
) -> dict[str, Any]:
    """In this process: the cluster, ``bound`` pods bound, then ``ticks`` ticks."""
    import numpy as np

    from kubesage.core import gc_pauses
    from kubesage.core.cli.loop import embedded_loop
    from kubesage.core.k8s.binding import BindTarget
    from kubesage.core.k8s.embedded import EmbeddedCluster
    from kubesage.core.loop.settings import LoopSettings
    from kubesage.core.policy import PolicyContext, make_policy

    cluster = EmbeddedCluster.synthetic(nodes)
    policy = make_policy("fgd", PolicyContext(seed=0, workload=tuple(cluster.workload)))
    cluster.fill(policy, 0.3)
    loop = embedded_loop(cluster, "fgd", LoopSettings(tick_s=1.0))
    gc_pauses.settle(thresholds or gc_pauses.THRESHOLDS)
    bind = cluster.binder(policy)
    rng = np.random.default_rng(0)
    for number in range(bound):
        request = cluster.workload[int(rng.integers(len(cluster.workload)))]
        with cluster.locked() as (state, _):
            placement = policy.decide(state, request).placement
        if placement is None:
            raise SystemExit(f"error: pod {number} found no room; use fewer --bound pods")
        target = BindTarget("bench", f"pod-{number}", f"uid-{number}", placement.node, request)
        bind(target)
    pauses: list[tuple[int, float]] = []
    started = 0.0

    def timed(phase: str, info: dict[str, Any]) -> None:
        nonlocal started
        if phase == "start":
            started = time.perf_counter()
        else:
            pauses.append((int(info["generation"]), time.perf_counter() - started))

    loop.tick()  # builds every pod's record: not the steady state
    gc.callbacks.append(timed)
    durations = []
    for _ in range(ticks):
        tick_started = time.perf_counter()
        loop.tick()
        durations.append(time.perf_counter() - tick_started)
    gc.callbacks.remove(timed)
    return {
        "tick_p50_ms": round(statistics.median(durations) * 1000, 1),
        "gc_ms_per_tick": round(sum(pause for _, pause in pauses) / ticks * 1000, 1),
        "gc_max_pause_ms": round(max((pause for _, pause in pauses), default=0.0) * 1000, 1),
        "full_collections": sum(1 for generation, _ in pauses if generation == 2),
    }


def in_child(nodes: int, bound: int, ticks: int, setting: str) -> dict[str, Any]:
    """:func:`measure` in a fresh process (the collector's state is per process)."""
    command = [
        sys.executable, __file__, "--child", setting,
        "--nodes", str(nodes), "--bound", str(bound), "--ticks", str(ticks),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: {setting} at {bound} pods failed:\n{done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bound",
        type=positive_int,
        action="append",
        help="Bound pods (repeatable; default 2k–40k).",
    )
    parser.add_argument("--nodes", type=positive_int, default=10_000, help="Nodes of the cluster.")
    parser.add_argument("--ticks", type=positive_int, default=8, help="Ticks measured per run.")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    parser.add_argument("--child", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    args = parse_args(parser, TINY)
    counts = args.bound or (TINY_BOUND if args.tiny else [2_000, 10_000, 20_000, 40_000])
    if args.child is not None:
        print(json_line(measure(args.nodes, counts[0], args.ticks, SETTINGS[args.child])))
        return 0
    results: dict[str, dict[str, Any]] = {}
    for bound in counts:
        results[str(bound)] = {}
        for setting in SETTINGS:
            figures = in_child(args.nodes, bound, args.ticks, setting)
            results[str(bound)][setting] = figures
            print(f"{bound} pods, {setting}: {figures}", file=sys.stderr, flush=True)
    if args.format == "json":
        print(json_line({"nodes": args.nodes, "ticks": args.ticks, "bound_pods": results}))
        return 0
    rows = [
        [f"{int(bound):,}", setting, *figures.values()]
        for bound, by_setting in results.items()
        for setting, figures in by_setting.items()
    ]
    print(
        f"control-loop tick on {args.nodes:,} nodes, {args.ticks} ticks after the first "
        "(kubesage: its GC thresholds; python-default: 700/10/10)"
    )
    print(
        format_table(
            ["bound pods", "GC setting", "tick p50 ms", "GC ms/tick", "longest GC ms", "full GCs"],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    run_main(main)
