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
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from operator import itemgetter
from typing import Any

import numpy as np
import orjson
from _common import REPO, format_table, parse_args
from _extender_granian import granian_server
from _extender_profile import print_stage_profile

from kubesage.core.cli.serve import DEFAULT_POLICY
from kubesage.core.k8s.translate import GPU_MILLI_ANNOTATION
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


def feasible_nodes_to_find(num_nodes: int, percentage: int = 0) -> int:
    """kube-scheduler's ``numFeasibleNodesToFind`` (percentageOfNodesToScore 0 = adaptive)."""
    if num_nodes < 100:
        return num_nodes
    adaptive = percentage or max(50 - num_nodes // 125, 5)
    return max(num_nodes * adaptive // 100, 100)


def binding_args(pod: dict[str, Any], node: str) -> dict[str, str]:
    """kube-scheduler's ExtenderBindingArgs binding ``pod`` to ``node``."""
    metadata = pod["metadata"]
    return {
        "PodName": metadata["name"],
        "PodNamespace": metadata["namespace"],
        "PodUID": metadata["uid"],
        "Node": node,
    }


def v1_pod(index: int, request: PodRequest) -> dict[str, Any]:
    """A pending v1 Pod as kube-scheduler sends it, asking what ``request`` asks."""
    requests = {"cpu": f"{request.cpu_milli}m", "memory": f"{request.memory_mib}Mi"}
    annotations = {}
    if request.num_gpu:
        requests["nvidia.com/gpu"] = str(request.num_gpu)
        if request.is_gpu_sharing:
            annotations[GPU_MILLI_ANNOTATION] = str(request.gpu_milli)
    name = f"bench-{index:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"00000000-0000-4000-8000-{index:012d}",
            "resourceVersion": str(100_000 + index),
            "labels": {"app": "bench"},
            "annotations": annotations,
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                    "resources": {"requests": requests, "limits": dict(requests)},
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
            ],
        },
        "status": {"phase": "Pending", "qosClass": "Guaranteed"},
    }


FLOOR_PATH = "/scheduler/floor"
"""Not a route: the server answers 404 after reading the request, deciding nothing."""
FLOOR_ROUND_TRIPS = 500
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


def _post(connection: KeepAlive, path: str, body: bytes) -> Any:
    status, content = connection.post(path, body)
    if status != 200:
        raise SystemExit(f"error: {path} answered {status}: {content[:300]!r}")
    return orjson.loads(content)


class KeepAlive:
    """A minimal HTTP/1.1 keep-alive client: each request leaves in one write, and the
    answer is read straight off the socket (status line, Content-Length, body).

    http.client writes the headers and the body separately, and on a busy machine the
    client can be descheduled in between while the server waits for the body; Go's
    client (kube-scheduler's) buffers them into one write for bodies like these. Its
    response parser (email.parser over the headers) also costs more client CPU than
    the server spends on a 500-name request, on the same two cores.
    """

    def __init__(self, port: int):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + body)
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._receive()
        header, self.buffer = self.buffer[:end].decode("latin-1"), self.buffer[end + 4 :]
        lines = header.split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = next(
            int(line.split(":", 1)[1])
            for line in lines[1:]
            if line[:15].lower() == "content-length:"
        )
        while len(self.buffer) < length:
            self._receive()
        content, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, content

    def _receive(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("error: the server closed the connection")
        self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


def shape(pod: dict[str, Any]) -> str:
    """What FGD caches scores by: the requests and the GPU-share annotation."""
    container = pod["spec"]["containers"][0]["resources"]["requests"]
    return orjson.dumps([container, pod["metadata"]["annotations"]]).decode()


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
            prefix = f'kubesage_request_duration_seconds{suffix}{{endpoint="'
            if line.startswith(prefix):
                endpoint = line[len(prefix) :].split('"', 1)[0]
                totals.setdefault(endpoint, [0.0, 0.0])[slot] = float(line.rsplit(" ", 1)[1])
    return {endpoint: (sum_s, count) for endpoint, (sum_s, count) in totals.items()}


class Cycle:
    """One kube-scheduler scheduling cycle per pod, over one keep-alive connection."""

    def __init__(self, port: int, node_names: list[str], window: int):
        self.connection = KeepAlive(port)
        self.node_names = node_names
        self.window = window
        self.start_index = 0
        self.json_s = 0.0
        """The client's own JSON work (encoding requests, decoding answers) in the
        filter + prioritize round trips so far."""

    def schedule(self, pod: dict[str, Any]) -> tuple[float, float, bool]:
        """``(filter+prioritize seconds, bind seconds, scheduled)`` for one pod."""
        end = self.start_index + self.window
        names = self.node_names[self.start_index : end]
        if end > len(self.node_names):  # the window wraps around the node list
            names += self.node_names[: end - len(self.node_names)]
        self.start_index = (self.start_index + self.window) % len(self.node_names)
        started = time.perf_counter()
        filtered = self._post("/scheduler/filter", {"Pod": pod, "NodeNames": names})
        passing = filtered["NodeNames"]
        best = None
        if passing:
            scores = self._post("/scheduler/prioritize", {"Pod": pod, "NodeNames": passing})
            best = max(scores, key=itemgetter("Score"))["Host"]
        elapsed = time.perf_counter() - started
        bind_started = time.perf_counter()
        if best is not None:
            binding = binding_args(pod, best)
            result = _post(self.connection, "/scheduler/bind", orjson.dumps(binding))
            if result["Error"]:
                raise SystemExit(f"error: bind failed: {result['Error']}")
        return elapsed, time.perf_counter() - bind_started, best is not None

    def _post(self, path: str, document: dict[str, Any]) -> Any:
        """POST ``document``; the decoded answer. JSON time is added to ``json_s``."""
        started = time.perf_counter()
        body = orjson.dumps(document)
        encoded = time.perf_counter()
        status, content = self.connection.post(path, body)
        answered = time.perf_counter()
        if status != 200:
            raise SystemExit(f"error: {path} answered {status}: {content[:300]!r}")
        answer = orjson.loads(content)
        self.json_s += (encoded - started) + (time.perf_counter() - answered)
        return answer

    def round_trip_floor_ms(self, pod: dict[str, Any], count: int = FLOOR_ROUND_TRIPS) -> float:
        """p50 of a round trip that carries a filter request's bytes to a path the server
        answers 404 at once: HTTP, loopback and both processes waking, no decision."""
        body = orjson.dumps({"Pod": pod, "NodeNames": self.node_names[: self.window]})
        times = []
        for _ in range(count):
            started = time.perf_counter()
            status, _ = self.connection.post(FLOOR_PATH, body)
            times.append(time.perf_counter() - started)
            if status != 404:
                raise SystemExit(f"error: {FLOOR_PATH} answered {status}, expected 404")
        return float(np.percentile(np.array(times) * 1000, 50))


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
    parser.add_argument("--pods", type=int, default=2_000, help="Measured pods per run.")
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
                # Fresh pods (new UIDs) per mode: the server keeps bound pods.
                offset = mode_number * (2 * warmup_pods + args.pods)
                pods = [v1_pod(offset + i, request) for i, request in enumerate(workload)]
                measured = pods[warmup_pods:]
                # One pod of every shape the measured pods have, then the warm-up pods.
                firsts = {shape(pod): pod for pod in reversed(measured)}
                warmup = [
                    {**pod, "metadata": {**pod["metadata"], "name": f"warm-{number}",
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
        print(json.dumps(document))
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
    raise SystemExit(main())
