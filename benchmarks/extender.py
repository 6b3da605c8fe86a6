"""Scheduler-extender latency and throughput over real HTTP, at 5,000 and 10,000 nodes.

For each cluster size a ``kubesage serve --embedded`` process is started on the
synthetic openb-like cluster, pre-loaded to 50 % GPU allocation by its own policy
(FGD). A client then plays kube-scheduler's part for each pod, one scheduling cycle
at a time: POST ``/scheduler/filter`` with the pod (a full v1 Pod) and the candidate
``NodeNames`` (``nodeCacheCapable: true``), then POST ``/scheduler/prioritize`` with
the nodes that passed. Each pod is then bound (``/scheduler/bind``, timed apart:
kube-scheduler binds asynchronously), so the cluster changes as it would.

What each figure means:

- ``p50_ms``, ``p99_ms``, ``max_ms``: a pod's end-to-end latency as the client sees
  it — both round trips, the client's JSON work included (orjson; one keep-alive
  connection, each request in one write with TCP_NODELAY as Go's client does, the
  answer read straight off the socket).
- ``pods_per_s``: measured pods over the wall time of their filter + prioritize
  cycles (binds excluded), one cycle at a time as kube-scheduler's loop runs.
- ``server_filter_mean_ms``, ``server_prioritize_mean_ms``: the server's own time
  per request from its latency histogram (read from ``/metrics`` before and after):
  request headers read to answer ready, so without the client, the kernel's
  loopback and the time the client's bytes take to arrive.
- ``bind_p50_ms``: the bind round trip (not in the figures above).
- ``client_json_mean_ms``: the client's own JSON work per pod (encoding both requests,
  decoding both answers), inside the pod's latency.
- ``round_trip_floor_p50_ms``: one round trip carrying a filter request's bytes to a
  path the server answers 404 without deciding anything (measured after the pods, 500
  times): what HTTP over loopback costs on this machine, both processes waking
  included. A pod makes two such trips, so ``2 × floor + client JSON`` is the part of
  its latency no server-side work can remove.
- ``loop_ticks``, ``loop_tick_mean_ms``: the control loop runs in the server as it is
  deployed (``kubesage serve`` always runs it), here every second rather than the
  default 5 s so that several ticks fall inside the few seconds the pods are measured
  over: how many ticks it made meanwhile, and their mean duration. Its reconcilers see
  the pods the extender binds (and may migrate them); its ticks share the cores.

Client and server share the machine's cores, so on a small machine the client's
own work is part of every figure except the server's.

Warm-up: one pod of every request shape the measured pods have, then 300 more, so
the figures are the steady state. The first request of a shape the policy has
never scored computes FGD for each candidate it names; the cost of that over a whole
cluster is measured apart, in-process (``fgd_cold_score_ms``).

What each request carries, stated because it decides the cost:

- ``default``: as many names as kube-scheduler passes by default. It stops
  filtering after ``numFeasibleNodesToFind`` feasible nodes (adaptive
  ``percentageOfNodesToScore``: 50 % − nodes/125, at least 5 % and 100 nodes), and
  only those reach the extender: 500 names at 5,000 and at 10,000 nodes. The
  window rotates over the cluster from pod to pod, as kube-scheduler's start index does.
- ``all``: every node name in every request (``percentageOfNodesToScore: 100``
  with every node feasible), the worst case.

Reference: kube-scheduler's scheduler_perf ``SchedulingBasic`` at 5,000 nodes
reaches about 680 pods/s (the whole scheduler, no extender). Targets: p99 ≤ 10 ms
and ≥ 1,000 pods/s at 10,000 nodes.

JSON: ``{"nodes": {"<size>": {"<mode>": {the figures above, "names_per_request",
"pods", "unschedulable"}}}, "fgd_cold_score_ms": {"<size>": {"<shape>"}},
"reference", "targets_10000_nodes", "cpus", "load_average_1m_at_end", "fill", "server",
"policy"}`` (``--server granian``: the same App served by granian,
benchmarks/_extender_granian.py). ``--policy``: the server's scheduling policy (serve's
default, ``fgd``, unless given; e.g. ``ppo`` measures the learned policy in the
extender's path).
``--tiny``: 200 nodes, 20 warm-up and 50 measured pods. ``--profile``: also each stage
of filter and prioritize timed in-process, a table on stderr (:mod:`_extender_profile`).

    python benchmarks/extender.py [--nodes 5000 --nodes 10000] [--pods 2000] [--warmup 300]
                                  [--policy fgd] [--tiny] [--format json] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from _common import REPO, format_table, json_line, parse_args, positive_int, run_main
from _extender_client import Cycle, feasible_nodes_to_find, shape, v1_pod
from _extender_granian import granian_server
from _extender_profile import print_stage_profile

from kubesage.core.cli.serve_services import DEFAULT_POLICY
from kubesage.core.policy import PolicyContext
from kubesage.core.policy.fgd import FgdPolicy
from kubesage.core.policy.registry import policy_names
from kubesage.core.state import ClusterState
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from kubesage.core.types import PodRequest

SCHEDULER_PERF_PODS_PER_S_5000 = 680.0
TARGET_P99_MS = 10.0
TARGET_PODS_PER_S = 1_000.0
FILL = 0.5
WARMUP_PODS = 300
TINY = {"pods": 50, "warmup": 20}
TINY_NODES = 200
"""The cluster size at ``--tiny`` (``--nodes`` appends, so it is not a tiny default)."""
COLD_SHAPES = {
    "cpu-only": PodRequest(name="cold-cpu", cpu_milli=8_000, memory_mib=30_517),
    "half-gpu": PodRequest(
        name="cold-share", cpu_milli=4_000, memory_mib=15_258, num_gpu=1, gpu_milli=500
    ),
    "one-gpu": PodRequest(
        name="cold-one", cpu_milli=11_300, memory_mib=49_152, num_gpu=1, gpu_milli=1000
    ),
    "eight-gpu": PodRequest(
        name="cold-eight", cpu_milli=64_000, memory_mib=262_144, num_gpu=8, gpu_milli=1000
    ),
}
"""Request shapes whose first, uncached FGD score over a whole cluster is timed."""


LOOP_TICK_S = 1.0
"""The server's control-loop tick here (see ``loop_ticks`` in the module docstring)."""


@contextmanager
def extender_server(nodes: int, policy: str = DEFAULT_POLICY) -> Iterator[int]:
    """``kubesage serve --embedded --policy POLICY`` on a free port; yields the port
    once it answers."""
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "kubesage.core.cli", "serve", "--embedded",
                "--host", "127.0.0.1", "--port", "0", "--nodes", str(nodes),
                "--fill", str(FILL), "--log-level", "info", "--tick-s", str(LOOP_TICK_S),
                "--policy", policy,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            yield _wait_for_port(process, log)
        finally:
            process.terminate()
            process.wait(timeout=30)


def _wait_for_port(process: subprocess.Popen[bytes], log: Any, timeout_s: float = 600) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise SystemExit(f"error: kubesage serve exited:\n{log.read()[-2000:]}")
        log.seek(0)
        for line in log.read().splitlines():
            if line.startswith("{") and '"event":"serving"' in line:
                port = int(json.loads(line)["port"])
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                try:
                    connection.request("GET", "/healthz")
                    if connection.getresponse().status == 200:
                        return port
                except OSError:
                    pass
                finally:
                    connection.close()
        time.sleep(0.2)
    raise SystemExit("error: kubesage serve did not come up in time")


def metrics_text(port: int) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    return text


def loop_seconds(text: str) -> tuple[float, float]:
    """``(sum of seconds, count)`` of the control loop's ticks so far."""
    figures = {"_sum": 0.0, "_count": 0.0}
    for line in text.splitlines():
        for suffix in figures:
            if line.startswith(f"kubesage_loop_tick_seconds{suffix} "):
                figures[suffix] = float(line.rsplit(" ", 1)[1])
    return figures["_sum"], figures["_count"]


def server_seconds(text: str) -> dict[str, tuple[float, float]]:
    """``endpoint -> (sum of seconds, count)`` from the server's latency histogram."""
    totals: dict[str, list[float]] = {}
    for line in text.splitlines():
        for suffix, slot in (("_sum", 0), ("_count", 1)):
            prefix = f'kubesage_request_duration_seconds{suffix}{{handler="'
            if line.startswith(prefix):
                endpoint = line[len(prefix) :].split('"', 1)[0]
                totals.setdefault(endpoint, [0.0, 0.0])[slot] = float(line.rsplit(" ", 1)[1])
    return {endpoint: (sum_s, count) for endpoint, (sum_s, count) in totals.items()}


def measure(
    port: int,
    node_names: list[str],
    window: int,
    warmup: list[dict[str, Any]],
    pods: list[dict[str, Any]],
) -> dict[str, float]:
    """Warm up, then time every pod; the figures."""
    cycle = Cycle(port, node_names, window)
    for pod in warmup:
        cycle.schedule(pod)
    cycle.json_s = 0.0  # the measured pods' JSON only
    # The client's own objects so far live to the end: keep its cyclic GC off them.
    gc.collect()
    gc.freeze()
    text = metrics_text(port)
    before, loop_before = server_seconds(text), loop_seconds(text)
    latencies: list[float] = []
    bind_latencies: list[float] = []
    unschedulable = 0
    started = time.perf_counter()
    for pod in pods:
        elapsed, bind_elapsed, scheduled = cycle.schedule(pod)
        latencies.append(elapsed)
        bind_latencies.append(bind_elapsed)
        unschedulable += not scheduled
    wall_s = time.perf_counter() - started - sum(bind_latencies)
    json_ms = cycle.json_s / max(len(pods), 1) * 1000
    floor_ms = cycle.round_trip_floor_ms(pods[-1])
    cycle.connection.close()
    text = metrics_text(port)
    after, loop_after = server_seconds(text), loop_seconds(text)
    ticks = loop_after[1] - loop_before[1]
    server_ms = {
        endpoint: round(
            (after[endpoint][0] - before.get(endpoint, (0.0, 0.0))[0])
            / max(after[endpoint][1] - before.get(endpoint, (0.0, 0.0))[1], 1)
            * 1000,
            3,
        )
        for endpoint in ("filter", "prioritize")
        if endpoint in after
    }
    milliseconds = np.array(latencies) * 1000
    return {
        "names_per_request": window,
        "pods": len(pods),
        "unschedulable": unschedulable,
        "p50_ms": round(float(np.percentile(milliseconds, 50)), 3),
        "p99_ms": round(float(np.percentile(milliseconds, 99)), 3),
        "max_ms": round(float(milliseconds.max()), 3),
        "pods_per_s": round(len(pods) / wall_s, 1),
        "server_filter_mean_ms": server_ms.get("filter", 0.0),
        "server_prioritize_mean_ms": server_ms.get("prioritize", 0.0),
        "bind_p50_ms": round(float(np.percentile(np.array(bind_latencies) * 1000, 50)), 3),
        "loop_ticks": int(ticks),
        "loop_tick_mean_ms": round((loop_after[0] - loop_before[0]) / max(ticks, 1) * 1000, 1),
        "client_json_mean_ms": round(json_ms, 3),
        "round_trip_floor_p50_ms": round(floor_ms, 3),
    }


def cold_score_ms(num_nodes: int) -> dict[str, float]:
    """FGD's first score of a request shape over a whole cluster (no cached scores):
    what the first pod of a shape never seen before pays on top of the figures above."""
    state = ClusterState(synthetic_cluster(num_nodes, seed=0))
    policy = FgdPolicy(PolicyContext(seed=0, workload=tuple(synthetic_workload(8_152, seed=0))))
    nodes = np.arange(num_nodes, dtype=np.int64)
    timings = {}
    for label, request in COLD_SHAPES.items():
        started = time.perf_counter()
        policy.score(state, request, nodes)
        timings[label] = round((time.perf_counter() - started) * 1000, 1)
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, action="append", help="Cluster sizes (repeatable).")
    parser.add_argument("--pods", type=positive_int, default=2_000, help="Measured pods per run.")
    parser.add_argument(
        "--warmup", type=int, default=WARMUP_PODS, help="Warm-up pods before the measured ones."
    )
    parser.add_argument("--mode", choices=["default", "all"], action="append")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    parser.add_argument(
        "--server",
        choices=["kubesage", "granian"],
        default="kubesage",
        help="Serve the App with kubesage's HTTP server or with granian (_extender_granian.py).",
    )
    parser.add_argument(
        "--policy",
        choices=policy_names(),
        default=DEFAULT_POLICY,
        help="The server's scheduling policy (kubesage server only; the default is serve's).",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="Also time each stage of filter and prioritize in-process (table on stderr).",
    )
    args = parse_args(parser, TINY)
    if args.server == "granian" and args.policy != DEFAULT_POLICY:
        parser.error(f"--policy {args.policy} applies to --server kubesage only")
    sizes = args.nodes or ([TINY_NODES] if args.tiny else [5_000, 10_000])
    modes = args.mode or ["default", "all"]
    warmup_pods = args.warmup
    workload = synthetic_workload(warmup_pods + args.pods, seed=7)
    results: dict[str, dict[str, dict[str, float]]] = {}
    cold: dict[str, dict[str, float]] = {}
    for size in sizes:
        node_names = [node.name for node in synthetic_cluster(size, seed=0)]
        results[str(size)] = {}
        cold[str(size)] = cold_score_ms(size)
        print(f"{size} nodes, cold FGD score ms: {cold[str(size)]}", file=sys.stderr, flush=True)
        server = (
            extender_server(size, args.policy)
            if args.server == "kubesage"
            else granian_server(size, fill=FILL, tick_s=LOOP_TICK_S)
        )
        with server as port:
            for mode_number, mode in enumerate(modes):
                window = feasible_nodes_to_find(size) if mode == "default" else size
                # Fresh pods (new names and UIDs) per mode: the server keeps bound pods.
                offset = mode_number * (2 * warmup_pods + args.pods)
                pods = [v1_pod(offset + i, request) for i, request in enumerate(workload)]
                measured = pods[warmup_pods:]
                # One pod of every shape the measured pods have, then the warm-up pods.
                firsts = {shape(pod): pod for pod in reversed(measured)}
                warmup = [
                    {**pod, "metadata": {**pod["metadata"], "name": f"warm-{offset}-{number}",
                                         "uid": f"warm-{offset}-{number}"}}
                    for number, pod in enumerate(firsts.values())
                ] + pods[:warmup_pods]  # fmt: skip
                figures = measure(port, node_names, window, warmup, measured)
                if args.profile:
                    print_stage_profile(size, FILL, window, warmup + measured, args.policy)
                results[str(size)][mode] = figures
                print(f"{size} nodes, {mode}: {figures}", file=sys.stderr, flush=True)
    if args.format == "json":
        document = {
            "nodes": results,
            "fgd_cold_score_ms": cold,
            "reference": {"scheduler_perf_pods_per_s_5000_nodes": SCHEDULER_PERF_PODS_PER_S_5000},
            "targets_10000_nodes": {"p99_ms": TARGET_P99_MS, "pods_per_s": TARGET_PODS_PER_S},
            "cpus": os.cpu_count(),
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
            "fill": FILL,
            "server": args.server,
            "policy": args.policy,
        }
        print(json_line(document))
        return 0
    rows = []
    for size, by_mode in results.items():
        for mode, figures in by_mode.items():
            rows.append(
                [
                    f"{int(size):,} nodes, {mode}",
                    figures["names_per_request"],
                    figures["p50_ms"],
                    figures["p99_ms"],
                    figures["pods_per_s"],
                    figures["server_filter_mean_ms"],
                    figures["server_prioritize_mean_ms"],
                    f"{figures['loop_ticks']} × {figures['loop_tick_mean_ms']:g} ms",
                    SCHEDULER_PERF_PODS_PER_S_5000,
                ]
            )
    print(
        "kubesage extender over HTTP: filter + prioritize per pod, one cycle at a time "
        f"({args.pods:,} pods after {warmup_pods} warm-up, cluster {FILL:.0%} GPU-allocated; "
        f"the control loop running in the server; policy {args.policy})"
    )
    print(
        format_table(
            [
                "run",
                "names/request",
                "p50 ms (end to end)",
                "p99 ms (end to end)",
                "pods/s",
                "server filter ms (mean)",
                "server prioritize ms (mean)",
                "loop ticks × mean",
                "scheduler_perf pods/s @5k",
            ],
            rows,
        )
    )
    for size, timings in cold.items():
        print(f"first FGD score of a new pod shape over all {int(size):,} nodes, ms: {timings}")
    print(
        f"targets at 10,000 nodes: p99 <= {TARGET_P99_MS:g} ms, >= {TARGET_PODS_PER_S:,.0f} pods/s"
    )
    return 0


if __name__ == "__main__":
    run_main(main)
