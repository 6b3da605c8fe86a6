"""Soak: the extender served for minutes at 10,000 nodes, with garbage and node churn.

A server process runs what ``kubesage serve --embedded`` runs — the synthetic
openb-like cluster pre-loaded to 50 % GPU allocation, the extender, the webhook and
the control loop at its default tick, on the same HTTP server — plus a command pipe
through which this client changes its nodes. The client plays kube-scheduler from
loopback, one scheduling cycle at a time (filter, prioritize, bind, as
``benchmarks/extender.py`` does, with its client and pods), and meanwhile:

- **1 % malformed requests**, each on its own connection, interleaved with the valid
  ones: bad JSON, wrong types (``{"Pod": [..], "NodeNames": 7}``), a 200 KB header,
  and a body cut short (the client closes its side mid-body);
- **node churn** every ``--churn-s`` seconds, in turn: 1 % of the nodes added (empty),
  1 % cordoned (kube-scheduler's ``NodeUnschedulable`` filter then stops sending them
  to the extender; the state keeps them and their pods, as ``ClusterSync`` does) and the
  previous cordon lifted, 1 % removed (their pods pending, for the loop to place again);
- **pods ending**: the client keeps at most ``--live-pods`` of its pods bound and ends
  the oldest beyond that every second (gone from the cluster, bound or pending, through
  the command pipe), so the cluster stays at a steady allocation rather than filling;
  ``churn`` reports the cluster's bound and pending pods when pods last ended.

Figures, per interval of ``--interval-s`` (a minute by default; the first is warm-up):

- ``p99_ms_by_minute``: the p99 of a pod's filter + prioritize round trips (binds apart),
  valid requests only;
- ``rss_mib_start``: the server process's RSS (Linux ``/proc``) at the end of the first
  (warm-up) minute; ``rss_mib_end`` at the end; ``rss_mib_by_minute`` after each
  minute. Noise is the spread of RSS over the steady minutes: ``rss_noise_pct`` =
  (max − min) / min of the minutes after the first (allocator arenas and Python's free
  lists move by a few MiB without any leak);
- ``status_counts``: every answer by HTTP status, malformed requests included; a
  malformed request the server closed without an answer counts as ``"closed"`` (a cut
  body: the server waits for the rest, then sees the client's EOF);
- ``valid_requests_5xx``: 5xx answers to valid requests.

``checks``: ``rss_end_within_10pct_of_start``, ``no_5xx_on_valid``,
``p99_worst_within_3x_best`` (over the minutes after the first), each true or false.

JSON: ``{"minutes", "rss_mib_start", "rss_mib_end", "p99_ms_by_minute",
"status_counts", "valid_requests_5xx", "rss_mib_by_minute", "rss_noise_pct",
"pods_by_minute", "malformed", "churn", "nodes", "checks", "cpus",
"load_average_1m_by_minute", "memory"}`` (client and server share the machine's cores:
the load says how much else ran). ``memory``: ``malloc_mib_by_minute`` (glibc's
``mallinfo2`` of the server each minute: in use vs kept, :mod:`_soak_memory`) and
``loop_shapes_warmed`` (one pod of every shape placed by the control loop before the
first minute, filling its bounded score cache: :func:`_soak_memory.place_by_loop`).

``--trace-memory`` (a diagnostic, off by default): the server runs ``tracemalloc``
once its modules are imported (building the cluster then takes minutes); after each
minute it compares a snapshot with the one after the warm-up and prints the top growth
sites (file:line, size and block count difference) on stderr; ``memory`` then also has
``traced_mib_by_minute``, ``growth_sites`` and ``growth_chains`` (the top growing call
chains) of the last minute. Tracing slows the server about tenfold (its caches fill
later) and snapshots inflate its heap: a traced run's latencies and RSS are not the
soak's. The server trims the C heap as ``kubesage serve`` does (:mod:`kubesage.core.heap`).
``--tiny``: 0.1 minutes in intervals of 2 s, 200 nodes, churn every second.

    python benchmarks/soak.py [--minutes 10] [--nodes 10000] [--trace-memory] [--tiny]
                              [--format json]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter, deque
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import orjson
from _common import format_table, json_line, parse_args, positive_float, run_main
from _extender_client import KeepAlive, binding_args, feasible_nodes_to_find, v1_pod
from _soak_memory import (
    MARK,
    REPORT,
    describe,
    memory_document,
    place_by_loop,
    probe,
    start_tracing,
)
from extender import FILL

from kubesage.core.policy.fgd import shape_key
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload

MALFORMED_SHARE = 0.01
MALFORMED_KINDS = ("bad_json", "wrong_types", "huge_header", "cut_body")
HUGE_HEADER_BYTES = 200_000
CHURN_SHARE = 0.01
"""Share of the nodes added, cordoned or removed at each churn step."""
END_EVERY_S = 1.0
"""How often the client ends its pods beyond ``--live-pods``."""
TINY = {"minutes": 0.1, "interval_s": 2.0, "nodes": 200, "churn_s": 1.0, "live_pods": 100}


# -- the server process --------------------------------------------------------------------


def serve(nodes: int, commands: Connection, trace_memory: bool = False) -> None:
    """The server process: ``kubesage serve --embedded``'s service on an ephemeral port,
    and a thread that applies the client's churn commands to its embedded cluster."""
    import uvloop

    from kubesage.core import gc_pauses
    from kubesage.core.cli.loop import loop_inputs
    from kubesage.core.cli.serve import open_socket
    from kubesage.core.cli.serve_services import DEFAULT_POLICY, embedded_service
    from kubesage.core.heap import start_trimming
    from kubesage.core.k8s.embedded import EmbeddedCluster
    from kubesage.core.k8s.embedded_nodes import add_nodes, remove_nodes
    from kubesage.core.k8s.http_server import HttpServer
    from kubesage.core.observability.logging import configure_logging

    if trace_memory:  # after the imports: tracing them takes minutes, and they stay
        start_tracing()
    configure_logging("warning")  # one INFO line per bind and per 400 would be the bench
    settings, _ = loop_inputs(policy=DEFAULT_POLICY, embedded=True, kubeconfig=None, context=None)
    service = embedded_service(DEFAULT_POLICY, nodes=nodes, fill=FILL, loop=settings)
    cluster = service.extender.view
    assert isinstance(cluster, EmbeddedCluster)
    app = service.app()
    gc_pauses.settle()  # as `kubesage serve` does, and it trims the C heap (kubesage.core.heap)
    service.stoppers.append(start_trimming())
    server = HttpServer(app)
    sock = open_socket("127.0.0.1", 0)

    def obey() -> None:
        while True:
            try:
                verb, argument = commands.recv()
            except EOFError:  # the client is gone: so is the server
                server.stop()
                return
            try:
                if verb in ("memory", "warm"):  # answered with their figures
                    answer = (
                        probe(argument) if verb == "memory" else place_by_loop(cluster, argument)
                    )
                    commands.send(answer)
                    continue
                if verb == "add":
                    add_nodes(cluster, argument)
                elif verb == "remove":
                    remove_nodes(cluster, argument)
                elif verb == "end":  # pods that ended: gone, bound or pending (evicted)
                    with cluster.locked():
                        for namespace, name, uid in argument:
                            cluster.evict(namespace, name, uid)
                            cluster.pending.pop(uid, None)
                        commands.send((len(cluster.bound), len(cluster.pending)))
                    continue
            except Exception as exc:  # reported to the client, which stops
                commands.send(f"{verb} failed: {type(exc).__name__}: {exc}")
                continue
            with cluster.locked() as (_, names):
                commands.send(list(names))

    commands.send((sock.getsockname()[1], list(cluster.state.node_names)))
    threading.Thread(target=obey, name="soak-commands", daemon=True).start()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, server.stop)
        await server.serve(sock)

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(run())
    finally:
        service.stop()


def rss_mib(pid: int) -> float:
    """Resident set size of a process (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


# -- malformed requests --------------------------------------------------------------------


def malformed(port: int, kind: str, pod: dict[str, Any], names: list[str]) -> str:
    """Send one malformed request on a fresh connection; the answer's status (or why none)."""
    valid = orjson.dumps({"Pod": pod, "NodeNames": names})
    headers = f"POST /scheduler/filter HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    headers += "Content-Type: application/json\r\n"
    body = valid
    declared = None
    if kind == "bad_json":
        body = valid[: len(valid) // 2] + b"}}"
    elif kind == "wrong_types":
        body = orjson.dumps({"Pod": [1, 2], "NodeNames": 7})
    elif kind == "huge_header":
        headers += f"X-Padding: {'a' * HUGE_HEADER_BYTES}\r\n"
    elif kind == "cut_body":
        declared, body = len(valid), valid[: len(valid) // 3]
    head = headers + f"Content-Length: {declared or len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(head.encode() + body)
            if kind == "cut_body":
                sock.shutdown(socket.SHUT_WR)
        except OSError:  # answered and closed before all was sent (a header limit)
            pass
        received = b""
        try:
            while b"\r\n" not in received:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except TimeoutError:
            return "timeout"
        except OSError:
            pass
    if not received.startswith(b"HTTP/1."):
        return "closed"
    return received.split(b" ", 2)[1].decode()


# -- the client ----------------------------------------------------------------------------


class Soak:
    """kube-scheduler's part: one cycle per pod, garbage and churn between cycles."""

    def __init__(self, port: int, commands: Connection, node_names: list[str], seed: int = 7):
        self.port = port
        self.commands = commands
        self.nodes = node_names
        self.cordoned: set[str] = set()
        self.candidates = list(node_names)
        self.connection = KeepAlive(port)
        self.rng = np.random.default_rng(seed)
        self.workload = synthetic_workload(4_096, seed=seed)
        self.statuses: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter(dict.fromkeys(MALFORMED_KINDS, 0))
        self.valid_5xx = 0
        self.requests = 0
        self.pods = 0
        self.start_index = 0
        self.live: deque[tuple[str, str, str]] = deque()
        self.churn = {"added": 0, "cordoned": 0, "removed": 0, "steps": 0}
        """Churn steps, and the cluster's bound and pending pods when pods last ended."""
        self.added = 0

    def command(self, verb: str, argument: Any) -> None:
        self.commands.send((verb, argument))
        if not self.commands.poll(120):
            raise SystemExit(f"error: the server did not answer '{verb}' in 2 minutes")
        names = self.commands.recv()
        if isinstance(names, str):
            raise SystemExit(f"error: {names}")
        if isinstance(names, tuple):  # pods ended: the nodes are the same
            self.churn["bound_pods"], self.churn["pending_pods"] = names
            return
        self.nodes = names
        self.candidates = [name for name in self.nodes if name not in self.cordoned]

    def warm_loop(self) -> int:
        """One pod of every shape of the workload, placed by the server's control loop."""
        shapes = {shape_key(request): request for request in self.workload}
        self.commands.send(("warm", list(shapes.values())))
        if not self.commands.poll(300):
            raise SystemExit("error: the server did not answer 'warm' in 5 minutes")
        placed: int = self.commands.recv()
        self.connection.close()  # idle meanwhile for longer than the server's keep-alive
        self.connection = KeepAlive(self.port)
        return placed

    def memory(self, action: str) -> dict[str, Any]:
        """The server's memory probe (:mod:`_soak_memory`)."""
        self.commands.send(("memory", action))
        if not self.commands.poll(300):
            raise SystemExit("error: the server did not answer 'memory' in 5 minutes")
        answer: dict[str, Any] = self.commands.recv()
        if "traced_mib" in answer:  # a snapshot can outlast the keep-alive: reconnect
            self.connection.close()
            self.connection = KeepAlive(self.port)
        return answer

    def churn_step(self) -> None:
        """Add, cordon or remove 1 % of the nodes, in turn."""
        count = max(1, round(len(self.nodes) * CHURN_SHARE))
        step = self.churn["steps"] % 3
        self.churn["steps"] += 1
        if step == 0:
            specs = synthetic_cluster(count, seed=1_000 + self.churn["steps"])
            fresh = [
                spec.model_copy(update={"name": f"soak-node-{self.added + i}"})
                for i, spec in enumerate(specs)
            ]
            self.added += count
            self.churn["added"] += count
            self.command("add", fresh)
        elif step == 1:  # lift the last cordon, cordon others (the state is unchanged)
            self.cordoned = set(self.rng.choice(self.nodes, size=count, replace=False).tolist())
            self.churn["cordoned"] += count
            self.candidates = [name for name in self.nodes if name not in self.cordoned]
        else:
            pool = [name for name in self.nodes if name not in self.cordoned]
            gone = self.rng.choice(pool, size=count, replace=False).tolist()
            self.churn["removed"] += count
            self.command("remove", gone)

    def end_pods(self, keep: int) -> None:
        ending = []
        while len(self.live) > keep:
            ending.append(self.live.popleft())
        if ending:
            self.command("end", ending)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        status, content = self.connection.post(path, body)
        self.statuses[str(status)] += 1
        self.requests += 1
        if status >= 500:
            self.valid_5xx += 1
        return status, content

    def cycle(self) -> float:
        """One pod: filter, prioritize (timed), then bind; its filter + prioritize seconds."""
        request = self.workload[self.pods % len(self.workload)]
        pod = v1_pod(self.pods, request)
        pod["metadata"]["namespace"] = "soak"
        self.pods += 1
        window = min(feasible_nodes_to_find(len(self.candidates)), len(self.candidates))
        names = self.candidates[self.start_index : self.start_index + window]
        if len(names) < window:  # the window wraps around the node list
            names += self.candidates[: window - len(names)]
        self.start_index = (self.start_index + window) % len(self.candidates)
        if self.rng.random() < MALFORMED_SHARE * 3:  # ~3 requests a cycle: 1 % of them
            kind = MALFORMED_KINDS[int(self.rng.integers(len(MALFORMED_KINDS)))]
            self.malformed[kind] += 1
            self.statuses[malformed(self.port, kind, pod, names)] += 1
        started = time.perf_counter()
        status, content = self.post(
            "/scheduler/filter", orjson.dumps({"Pod": pod, "NodeNames": names})
        )
        best = None
        if status == 200 and (passing := orjson.loads(content)["NodeNames"]):
            body = orjson.dumps({"Pod": pod, "NodeNames": passing})
            status, content = self.post("/scheduler/prioritize", body)
            if status == 200:
                best = max(orjson.loads(content), key=lambda host: host["Score"])["Host"]
        elapsed = time.perf_counter() - started
        if best is not None:
            metadata = pod["metadata"]
            status, content = self.post("/scheduler/bind", orjson.dumps(binding_args(pod, best)))
            if status == 200 and not orjson.loads(content)["Error"]:
                self.live.append((metadata["namespace"], metadata["name"], metadata["uid"]))
        return elapsed


def run(args: argparse.Namespace) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    server = context.Process(
        target=serve, args=(args.nodes, theirs, args.trace_memory), name="soak-server"
    )
    server.start()
    try:
        if not ours.poll(900):
            raise SystemExit("error: the server did not come up in 15 minutes")
        port, names = ours.recv()
        print(f"serving {len(names)} nodes on port {port}", file=sys.stderr, flush=True)
        return measure(args, Soak(port, ours, names), server.pid or 0)
    finally:
        if server.pid is not None:
            os.kill(server.pid, signal.SIGTERM)
        server.join(30)
        if server.is_alive():
            server.kill()


def measure(args: argparse.Namespace, soak: Soak, pid: int) -> dict[str, Any]:
    intervals = max(2, math.ceil(args.minutes * 60 / args.interval_s))
    p99s: list[float] = []
    rss: list[float] = []
    pods: list[int] = []
    load: list[float] = []
    probes: list[dict[str, Any]] = []
    warmed = soak.warm_loop()  # the loop's scoring cache (_soak_memory.place_by_loop)
    next_churn = time.monotonic() + args.churn_s
    next_end = time.monotonic() + END_EVERY_S
    for interval in range(intervals):
        latencies: list[float] = []
        ends = time.monotonic() + args.interval_s
        while (now := time.monotonic()) < ends:
            latencies.append(soak.cycle())
            if now >= next_churn:
                next_churn = now + args.churn_s
                soak.churn_step()
            if now >= next_end:
                next_end = now + END_EVERY_S
                soak.end_pods(args.live_pods)
        soak.end_pods(args.live_pods)
        p99s.append(round(float(np.percentile(np.array(latencies) * 1000, 99)), 3))
        rss.append(round(rss_mib(pid), 1))
        pods.append(len(latencies))
        load.append(round(os.getloadavg()[0], 2))
        probes.append(soak.memory(MARK if interval == 0 else REPORT))  # after the RSS
        print(
            f"minute {interval + 1}/{intervals}: {len(latencies)} pods, p99 {p99s[-1]} ms, "
            f"RSS {rss[-1]} MiB, {len(soak.nodes)} nodes, {soak.churn.get('bound_pods')} pods "
            f"bound and {soak.churn.get('pending_pods')} pending, load {load[-1]}, "
            f"statuses {dict(soak.statuses)}",
            file=sys.stderr,
            flush=True,
        )
        print(describe(probes[-1]), file=sys.stderr, flush=True)
    soak.connection.close()
    steady_p99, steady_rss = p99s[1:], rss[1:]
    return {
        "minutes": args.minutes,
        "rss_mib_start": rss[0],
        "rss_mib_end": rss[-1],
        "p99_ms_by_minute": p99s,
        "status_counts": dict(sorted(soak.statuses.items())),
        "valid_requests_5xx": soak.valid_5xx,
        "rss_mib_by_minute": rss,
        "rss_noise_pct": round((max(steady_rss) - min(steady_rss)) / min(steady_rss) * 100, 2),
        "pods_by_minute": pods,
        "malformed": dict(sorted(soak.malformed.items())),
        "churn": {**soak.churn, "nodes_at_end": len(soak.nodes)},
        "nodes": args.nodes,
        "checks": {
            "rss_end_within_10pct_of_start": abs(rss[-1] - rss[0]) <= 0.1 * rss[0],
            "no_5xx_on_valid": soak.valid_5xx == 0,
            "p99_worst_within_3x_best": max(steady_p99) <= 3 * min(steady_p99),
        },
        "cpus": os.cpu_count(),
        "load_average_1m_by_minute": load,
        "memory": {"loop_shapes_warmed": warmed, **memory_document(probes)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="How long to soak.")
    parser.add_argument(
        "--interval-s", type=positive_float, default=60.0, help="Length of one measured 'minute'."
    )
    parser.add_argument("--nodes", type=int, default=10_000, help="Nodes of the cluster.")
    parser.add_argument("--churn-s", type=float, default=15.0, help="Seconds between churn steps.")
    parser.add_argument(
        "--live-pods", type=int, default=2_000, help="Most of the client's pods bound at once."
    )
    parser.add_argument(
        "--trace-memory",
        action="store_true",
        help="Run tracemalloc in the server; report what grew since the warm-up.",
    )
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    document = run(args)
    if args.format == "json":
        print(json_line(document))
        return 0
    print(
        f"soak: {document['minutes']:g} minutes at {args.nodes:,} nodes, 1 % malformed "
        f"requests, churn every {args.churn_s:g} s ({document['churn']})"
    )
    rows = [
        [f"minute {i + 1}" + (" (warm-up)" if i == 0 else ""), pods, p99, rss]
        for i, (pods, p99, rss) in enumerate(
            zip(
                document["pods_by_minute"],
                document["p99_ms_by_minute"],
                document["rss_mib_by_minute"],
                strict=True,
            )
        )
    ]
    print(format_table(["interval", "pods", "p99 ms", "RSS MiB"], rows))
    print(f"statuses: {document['status_counts']}; malformed sent: {document['malformed']}")
    print(f"RSS noise over the steady minutes: {document['rss_noise_pct']} %")
    print(f"5xx on valid requests: {document['valid_requests_5xx']}; checks: {document['checks']}")
    return 0


if __name__ == "__main__":
    run_main(main)
