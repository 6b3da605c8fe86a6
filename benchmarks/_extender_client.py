"""kube-scheduler's side of ``benchmarks/extender.py`` and ``benchmarks/soak.py``.

The v1 Pods it sends, the window of candidate names it passes (adaptive
``numFeasibleNodesToFind``), a keep-alive HTTP client that writes each request in one
piece as Go's client does, and one scheduling cycle per pod: filter, prioritize, bind.
"""

from __future__ import annotations

import socket
import time
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

from kubesage.core.annotations import GPU_MILLI_ANNOTATION
from kubesage.core.types import PodRequest

FLOOR_PATH = "/scheduler/floor"
"""Not a route: the server answers 404 after reading the request, deciding nothing."""
FLOOR_ROUND_TRIPS = 500


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
