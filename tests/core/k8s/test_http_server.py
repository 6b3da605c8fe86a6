"""The lean HTTP/1.1 server over real sockets: keep-alive, pipelining, limits, errors."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import orjson
import pytest

from kubesage.core.k8s.http_limits import HttpLimits
from kubesage.core.k8s.http_server import _IDLE, HttpProtocol, HttpServer
from kubesage.core.k8s.server import App, Endpoint, Reply, create_app
from kubesage.core.observability import metrics
from tests.core.k8s.test_extender import NAMES, args, gpu_pod, make_extender
from tests.fakes.apiserver import wait_until

LIMIT = 64 * 1024


@contextmanager
def running(app: App, limits: HttpLimits | None = None) -> Iterator[int]:
    """Serve ``app`` on 127.0.0.1 (a free port) in a thread; yield the port; stop it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = HttpServer(app, limits=limits)
    thread = threading.Thread(target=asyncio.run, args=(server.serve(sock),), daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        deadline = time.monotonic() + 10
        while thread.is_alive() and time.monotonic() < deadline:
            server.stop()  # a no-op until the server has started
            thread.join(timeout=0.1)
        sock.close()
    assert not thread.is_alive(), "the server did not stop"


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    extender, _ = make_extender()
    with running(create_app(extender, max_body_bytes=LIMIT, bind_waits_on_io=True)) as bound:
        yield bound


def connect(port: int) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection


def post(path: str, body: bytes, *extra: str) -> bytes:
    headers = "".join(f"{line}\r\n" for line in extra)
    return (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body


class Responses:
    """Reads HTTP/1.1 responses (Content-Length framed) off one socket, in order."""

    def __init__(self, connection: socket.socket):
        self.connection = connection
        self.buffer = b""

    def next(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._receive()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {
            name.strip().lower(): value.strip()
            for name, value in (line.split(":", 1) for line in lines[1:])
        }
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            self._receive()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def closed(self) -> bool:
        """True once the server has closed the connection (and nothing is left to read)."""
        self.connection.settimeout(5)
        try:
            chunk = self.connection.recv(65536)
        except ConnectionResetError:
            return True
        return chunk == b"" and not self.buffer

    def _receive(self) -> None:
        chunk = self.connection.recv(1 << 20)
        assert chunk, "the server closed the connection"
        self.buffer += chunk


def test_keep_alive_serves_a_whole_scheduling_cycle_on_one_connection(port: int) -> None:
    pod = gpu_pod("trainer-0", gpus="2")
    with connect(port) as connection:
        responses = Responses(connection)
        connection.sendall(post("/scheduler/filter", args(pod)))
        status, headers, body = responses.next()
        assert status == 200 and headers["content-type"] == "application/json"
        passing = orjson.loads(body)["NodeNames"]
        assert passing == ["h100-a", "h100-b", "h100-small"]
        connection.sendall(post("/scheduler/prioritize", args(pod, passing)))
        status, _, body = responses.next()
        scores = orjson.loads(body)
        assert status == 200 and [entry["Host"] for entry in scores] == passing
        assert max(entry["Score"] for entry in scores) == 10


def test_the_server_prescores_filters_nodes_for_the_prioritize_that_follows() -> None:
    extender, _ = make_extender()
    with running(create_app(extender, max_body_bytes=LIMIT)) as bound, connect(bound) as conn:
        responses = Responses(conn)
        pod = gpu_pod("ahead-0", gpus="1", cpu="1", memory="1Gi")
        conn.sendall(post("/scheduler/filter", args(pod)))
        passing = orjson.loads(responses.next()[2])["NodeNames"]
        conn.sendall(post("/scheduler/prioritize", args(pod, passing)))
        status, _, body = responses.next()
    assert status == 200
    assert extender.prescores_used == 1  # scored after filter's answer, before this request
    fresh, _ = make_extender()
    fresh.filter(args(pod))
    assert body == fresh.prioritize(args(pod, passing))[1]  # the same bytes as unscored ahead


def test_work_after_an_answer_that_fails_is_counted_and_the_connection_serves_on() -> None:
    def failing() -> None:
        raise RuntimeError("after-work broke")

    endpoints = {
        "/x": Endpoint("x", "POST", lambda body: Reply(200, b"{}", after=failing), threaded=False)
    }
    before = metrics.ERRORS.labels("http", "after")._value.get()
    with running(App(endpoints)) as bound, connect(bound) as connection:
        responses = Responses(connection)
        for _ in range(2):
            connection.sendall(post("/x", b"{}"))
            assert responses.next()[0] == 200
    assert metrics.ERRORS.labels("http", "after")._value.get() == before + 2


def test_pipelined_requests_are_answered_in_order_around_a_threaded_one(port: int) -> None:
    pod = gpu_pod("pipelined-0", gpus="1")
    binding = orjson.dumps(
        {"PodName": "pipelined-0", "PodNamespace": "ml", "PodUID": "uid-x", "Node": "nowhere"}
    )
    with connect(port) as connection:
        responses = Responses(connection)
        # Filter, a bind (runs in the thread pool here), a 404, a bad body, prioritize:
        # one write, five answers in request order.
        connection.sendall(
            post("/scheduler/filter", args(pod))
            + post("/scheduler/bind", binding)
            + post("/scheduler/nothing", b"{}")
            + post("/scheduler/prioritize", b"{oops")
            + post("/scheduler/prioritize", args(pod, NAMES))
        )
        answers = [responses.next() for _ in range(5)]
    assert [status for status, _, _ in answers] == [200, 200, 404, 400, 200]
    assert "NodeNames" in orjson.loads(answers[0][2])
    assert "Error" in orjson.loads(answers[1][2])
    assert [entry["Host"] for entry in orjson.loads(answers[4][2])] == NAMES


def test_declared_body_over_the_limit_is_413_before_it_is_read(port: int) -> None:
    before = metrics.REGISTRY.get_sample_value(
        "kubesage_errors_total", {"component": "filter", "kind": "too_large"}
    )
    with connect(port) as connection:
        responses = Responses(connection)
        head = f"POST /scheduler/filter HTTP/1.1\r\nHost: t\r\nContent-Length: {LIMIT + 1}\r\n\r\n"
        connection.sendall(head.encode())  # no body sent: the answer must not wait for it
        status, headers, body = responses.next()
        assert status == 413 and headers["connection"] == "close"
        assert f"of {LIMIT + 1} bytes is over the {LIMIT}-byte limit" in orjson.loads(body)["error"]
        connection.sendall(b"x" * 1000)  # discarded while the connection lingers
        assert responses.closed()
    after = metrics.REGISTRY.get_sample_value(
        "kubesage_errors_total", {"component": "filter", "kind": "too_large"}
    )
    assert after == (before or 0.0) + 1


def test_chunked_body_over_the_limit_is_413_and_the_client_reads_it(port: int) -> None:
    chunk = b"x" * 4096
    with connect(port) as connection:
        responses = Responses(connection)
        connection.sendall(
            b"POST /scheduler/filter HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for _ in range(LIMIT // len(chunk) + 2):
            connection.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        status, _, body = responses.next()
    assert status == 413 and "limit" in orjson.loads(body)["error"]


def test_a_body_at_the_limit_is_read(port: int) -> None:
    body = b" " * (LIMIT - 2) + b"{}"
    with connect(port) as connection:
        connection.sendall(post("/scheduler/filter", body))
        status, _, answer = Responses(connection).next()
    assert status == 400 and "Pod" in orjson.loads(answer)["error"]  # read, then refused


def test_malformed_http_is_400_and_closed(port: int) -> None:
    with connect(port) as connection:
        responses = Responses(connection)
        connection.sendall(b"NOT AN HTTP REQUEST\r\n\r\n")
        status, headers, body = responses.next()
        assert status == 400 and headers["connection"] == "close"
        assert "malformed HTTP request" in orjson.loads(body)["error"]
        assert responses.closed()


def test_connection_close_and_http_1_0_close_after_the_answer(port: int) -> None:
    for request in (
        b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        b"GET /healthz HTTP/1.0\r\n\r\n",
    ):
        with connect(port) as connection:
            responses = Responses(connection)
            connection.sendall(request)
            status, headers, _ = responses.next()
            assert status == 200 and headers["connection"] == "close"
            assert responses.closed()


def test_expect_continue_head_and_wrong_method(port: int) -> None:
    with connect(port) as connection:
        responses = Responses(connection)
        body = args(gpu_pod("p"))
        connection.sendall(
            (
                "POST /scheduler/filter HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
        )
        assert responses.next()[0] == 100
        connection.sendall(body)
        assert responses.next()[0] == 200
        # HEAD: the GET answer's headers (its Content-Length included), no body.
        connection.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        while b"\r\n\r\n" not in responses.buffer:
            responses._receive()
        head, responses.buffer = responses.buffer.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200") and b"content-length: " in head
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        assert orjson.loads(responses.next()[2])["status"] == "ok"
        connection.sendall(b"GET /scheduler/filter HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, _ = responses.next()
        assert status == 405 and headers["allow"] == "POST"


def test_idle_keep_alive_connections_are_closed() -> None:
    extender, _ = make_extender()
    with (
        running(create_app(extender), HttpLimits(keep_alive_s=0.2)) as bound,
        connect(bound) as connection,
    ):
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        responses = Responses(connection)
        assert responses.next()[0] == 200
        assert responses.closed()


def test_httpx_against_the_server_and_graceful_stop() -> None:
    extender, _ = make_extender()
    with (
        running(create_app(extender)) as bound,
        httpx.Client(base_url=f"http://127.0.0.1:{bound}") as client,
    ):
        assert client.get("/healthz").json()["status"] == "ok"
        exposition = client.get("/metrics")
        assert exposition.headers["content-type"].startswith("text/plain")
        response = client.post("/scheduler/filter", content=args(gpu_pod("p")))
        assert response.status_code == 200
    with pytest.raises(OSError):  # stopped: nothing listens any more
        socket.create_connection(("127.0.0.1", bound), timeout=2).close()


def test_a_request_still_arriving_when_the_server_stops_is_answered() -> None:
    """Half its body was sent when the server was told to stop: the rest is read and
    the request answered, with ``connection: close``; an idle connection just closes."""
    extender, _ = make_extender()
    app = create_app(extender)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    server = HttpServer(app)
    thread = threading.Thread(target=asyncio.run, args=(server.serve(sock),), daemon=True)
    thread.start()
    request = post("/scheduler/filter", args(gpu_pod("p")))
    half = len(request) // 2
    sending, idle = connect(sock.getsockname()[1]), connect(sock.getsockname()[1])
    try:
        sending.sendall(request[:half])

        # The first half read (its message has begun), then the stop seen by it: polled
        # on the server's own state, so a loaded machine cannot reorder the two.
        def begun() -> list[HttpProtocol]:  # tuple(): one step, however the loop runs
            return [c for c in tuple(server.connections) if c._phase != _IDLE]

        wait_until(lambda: len(server.connections) == 2 and begun(), 10, "the first half read")
        (receiving,) = begun()
        server.stop()
        wait_until(lambda: receiving._last_message, 10, "the stop to be seen")
        sending.sendall(request[half:])
        status, headers, _ = Responses(sending).next()
        assert (status, headers["connection"]) == (200, "close")
        assert idle.recv(1) == b""  # idle: closed at once
    finally:
        sending.close()
        idle.close()
        thread.join(10)
        sock.close()
    assert not thread.is_alive()
