"""The HTTP server against hostile and broken clients, over real sockets.

Each limit and timeout is answered with its status, closes the connection and counts
in ``kubesage_http_connections_closed_total``; and a property test throws malformed
raw HTTP at a running server (bad methods and versions, chunked and Content-Length
conflicts, truncated bodies, pipelined garbage, huge URLs and headers, many headers,
NUL bytes, non-UTF-8 and deeply nested JSON, bad chunk sizes): every time it answers
with well-formed responses or closes, logs no error, and then still serves a valid
extender request.
"""

from __future__ import annotations

import contextlib
import logging
import re
import select
import socket
import time
from collections.abc import Iterator

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kubesage.core.errors import InputError
from kubesage.core.k8s.http_limits import CLOSE_REASONS, HttpLimits
from kubesage.core.k8s.server import create_app
from kubesage.core.observability import metrics
from tests.core.k8s.test_extender import args, gpu_pod, make_extender
from tests.core.k8s.test_http_server import Responses, connect, post, running
from tests.core.k8s.test_serve_cli import serving

SMALL = HttpLimits(
    max_url_bytes=256,
    max_header_bytes=1024,
    max_headers=8,
    header_timeout_s=0.5,
    keep_alive_s=0.5,
    stall_timeout_s=0.4,
)
"""Small limits and short timeouts, so each is reached quickly."""
FILTER = args(gpu_pod("valid-0", gpus="1"))
STATUS_LINE = re.compile(rb"HTTP/1\.1 (\d{3}) [A-Za-z -]*")
ANSWERS = {100, 200, 400, 404, 405, 408, 413, 414, 431}
"""Every status a malformed request may get (never a 5xx)."""


def closed(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "kubesage_http_connections_closed_total", {"reason": reason}
    )
    return value or 0.0


@pytest.fixture(scope="module")
def small() -> Iterator[int]:
    extender, _ = make_extender()
    with running(create_app(extender, max_body_bytes=4096), SMALL) as bound:
        yield bound


@pytest.fixture(scope="module")
def default() -> Iterator[int]:
    extender, _ = make_extender()
    with running(create_app(extender)) as bound:
        yield bound


def refused(port: int, data: bytes, *, pause_s: float = 0.0) -> tuple[int, str]:
    """Send ``data`` (in 4 KiB pieces ``pause_s`` apart when given); the status and error
    of the one answer, after which the server closes the connection."""
    with connect(port) as connection:
        responses = Responses(connection)
        step = 4096 if pause_s else len(data)
        try:
            for start in range(0, len(data), step):
                connection.sendall(data[start : start + step])
                time.sleep(pause_s)
        except OSError:
            pass  # the server answered and closed before all was sent
        status, headers, body = responses.next()
        assert headers["connection"] == "close"
        assert responses.closed()
    return status, orjson.loads(body)["error"]


def get(target: str, *headers: str) -> bytes:
    fields = "".join(f"{field}\r\n" for field in headers)
    return f"GET {target} HTTP/1.1\r\n{fields}\r\n".encode()


# -- each limit: its status, the connection closed, the counter ------------------------


def test_the_defaults_refuse_a_200_kb_header_with_431(default: int) -> None:
    before = closed("header_too_large")
    status, error = refused(default, get("/healthz", "Host: t", "X-Big: " + "a" * 200_000))
    # One send, but the kernel may hand it over in several reads: a complete field over
    # the limit is refused when httptools reports it, a field still arriving when the
    # bytes read in this head pass the limit. Either is the same refusal.
    assert status == 431
    assert error in (
        "the header fields are over the 32768-byte limit",
        "the request head is over its size limit",
    )
    assert closed("header_too_large") == before + 1


def test_a_header_that_never_ends_is_431_without_buffering_it(default: int) -> None:
    before = closed("header_too_large")
    # Sent in pieces: httptools would buffer the unfinished value without a callback.
    status, error = refused(default, get("/healthz", "X-Big: " + "a" * 400_000), pause_s=0.005)
    assert (status, error) == (431, "the request head is over its size limit")
    assert closed("header_too_large") == before + 1


def test_url_limit_is_414_and_a_url_at_the_limit_is_routed(small: int) -> None:
    before = closed("url_too_long")
    status, error = refused(small, get("/" + "u" * 256, "Host: t"))
    assert (status, error) == (414, "the request URL is over the 256-byte limit")
    assert closed("url_too_long") == before + 1
    with connect(small) as connection:
        connection.sendall(get("/" + "u" * 255, "Host: t"))
        assert Responses(connection).next()[0] == 404


def test_header_count_limit_is_431_and_the_limit_itself_is_served(small: int) -> None:
    before = closed("too_many_headers")
    status, error = refused(small, get("/healthz", *(f"X-{i}: v" for i in range(9))))
    assert (status, error) == (431, "more than 8 header fields")
    assert closed("too_many_headers") == before + 1
    with connect(small) as connection:
        connection.sendall(get("/healthz", *(f"X-{i}: v" for i in range(8))))
        assert Responses(connection).next()[0] == 200


def test_header_bytes_limit_counts_names_values_and_separators(small: int) -> None:
    # One field of exactly 1,024 bytes ("X-Pad: " + value + CRLF) passes; one more is 431.
    at_limit = "X-Pad: " + "p" * (1024 - len("X-Pad") - 4)
    with connect(small) as connection:
        connection.sendall(get("/healthz", at_limit))
        assert Responses(connection).next()[0] == 200
    before = closed("header_too_large")
    status, error = refused(small, get("/healthz", at_limit + "p"))
    assert (status, error) == (431, "the header fields are over the 1024-byte limit")
    assert closed("header_too_large") == before + 1


def test_a_limit_hit_by_a_pipelined_request_is_answered_after_those_before_it(
    small: int,
) -> None:
    with connect(small) as connection:
        responses = Responses(connection)
        connection.sendall(post("/scheduler/filter", FILTER) + get("/" + "u" * 300))
        assert responses.next()[0] == 200
        status, headers, _ = responses.next()
        assert status == 414 and headers["connection"] == "close"
        assert responses.closed()


def test_slow_headers_get_408_even_while_bytes_keep_arriving(small: int) -> None:
    before = closed("header_timeout")
    started = time.monotonic()
    with connect(small) as connection:
        responses = Responses(connection)
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        # A byte every 0.1 s until the answer: bytes that keep coming do not hold off
        # the header timer (0.5 s after the first byte).
        while not select.select([connection], [], [], 0.1)[0]:
            assert time.monotonic() - started < 5.0, "no answer to slow headers"
            connection.sendall(b"s")
        status, headers, body = responses.next()
        assert status == 408 and headers["connection"] == "close"
        assert orjson.loads(body)["error"] == "the request headers took over 0.5 s"
        assert responses.closed()
    assert closed("header_timeout") == before + 1


def test_a_stalled_body_gets_408(small: int) -> None:
    before = closed("body_timeout")
    head = b"POST /scheduler/filter HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n"
    with connect(small) as connection:
        responses = Responses(connection)
        connection.sendall(head + b'{"Pod": ')
        status, _, body = responses.next()
        assert status == 408
        assert orjson.loads(body)["error"] == "no request body bytes for 0.4 s"
        assert responses.closed()
    assert closed("body_timeout") == before + 1


def test_an_idle_connection_is_closed_unanswered_and_counted(small: int) -> None:
    before = closed("idle_timeout")
    with connect(small) as connection:
        connection.sendall(get("/healthz", "Host: t"))
        responses = Responses(connection)
        assert responses.next()[0] == 200
        assert responses.closed()  # after keep_alive_s, with no bytes
    assert closed("idle_timeout") == before + 1


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout() -> None:
    """Idle connections between requests are kept long (a client reusing them closes
    first), but a new one owes its first request as soon as headers are due."""
    extender, _ = make_extender()
    limits = HttpLimits(header_timeout_s=0.3, keep_alive_s=60.0)
    before = closed("idle_timeout")
    with running(create_app(extender), limits) as port, connect(port) as connection:
        assert Responses(connection).closed()  # within its 5 s read, not after 60 s
    assert closed("idle_timeout") == before + 1


def test_a_client_that_reads_no_answers_is_dropped(small: int) -> None:
    before = closed("write_timeout")
    with connect(small) as connection:
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        # Far more answer bytes than the kernel's buffers hold, none of them read (the
        # server may drop the connection while this still sends).
        with contextlib.suppress(OSError):
            connection.sendall(get("/metrics", "Host: t") * 1000)
        deadline = time.monotonic() + 10
        while closed("write_timeout") == before and time.monotonic() < deadline:
            time.sleep(0.05)
    assert closed("write_timeout") == before + 1


def test_malformed_http_and_a_body_over_the_limit_are_counted(small: int) -> None:
    before = closed("malformed"), closed("body_too_large")
    assert refused(small, b"BREW /pot HTTP/1.1\r\n\r\n")[0] == 400
    assert refused(small, post("/scheduler/filter", b"x" * 5000))[0] == 413
    assert (closed("malformed"), closed("body_too_large")) == (before[0] + 1, before[1] + 1)


def test_bodies_no_decoder_should_take_are_400_and_the_connection_serves_on(
    default: int,
) -> None:
    with connect(default) as connection:
        responses = Responses(connection)
        for body in (b"[" * 100_000, b'{"Pod": {"metadata": {"name": "\xff\xfe"}}}', b"\x00"):
            connection.sendall(post("/scheduler/filter", body))
            status, headers, answer = responses.next()
            assert status == 400 and "connection" not in headers, answer
            assert orjson.loads(answer)["error"]
        connection.sendall(post("/scheduler/filter", FILTER))
        assert responses.next()[0] == 200


def test_a_half_closed_client_still_gets_its_answers(small: int) -> None:
    with connect(small) as connection:
        connection.sendall(post("/scheduler/filter", FILTER) + get("/healthz", "Host: t"))
        connection.shutdown(socket.SHUT_WR)
        responses = Responses(connection)
        assert [responses.next()[0], responses.next()[0]] == [200, 200]
        assert responses.closed()


def test_every_reason_is_exported_from_the_start() -> None:
    exposition = metrics.render()[0].decode()
    for reason in CLOSE_REASONS:
        assert f'kubesage_http_connections_closed_total{{reason="{reason}"}}' in exposition


def test_limits_must_be_positive() -> None:
    with pytest.raises(InputError, match="max_headers must be at least 1, got 0"):
        HttpLimits(max_headers=0)
    with pytest.raises(InputError, match="header_timeout_s must be positive"):
        HttpLimits(header_timeout_s=0.0)


def test_kubesage_serve_takes_the_limits_as_options() -> None:
    options = ("--embedded", "--nodes", "20", "--max-headers", "3", "--max-url-bytes", "64")
    with serving(*options) as url:
        port = int(url.rsplit(":", 1)[1])
        assert refused(port, get("/healthz", "A: 1", "B: 2", "C: 3", "D: 4"))[0] == 431
        assert refused(port, get("/" + "u" * 65))[0] == 414
        with connect(port) as connection:
            connection.sendall(get("/healthz", "A: 1", "B: 2", "C: 3"))
            assert Responses(connection).next()[0] == 200


# -- the property test: malformed raw HTTP never crashes the server -------------------


def mostly(valid: list[bytes], broken: list[bytes]) -> st.SearchStrategy[bytes]:
    """A valid part three times in four, so that later parts of a request get parsed."""
    return st.sampled_from(valid * 3) | st.sampled_from(broken)


methods = mostly(
    [b"GET", b"POST", b"POST"],
    [
        *(b"PUT", b"DELETE", b"OPTIONS", b"BREW", b"get", b"P0ST", b"G\x00T", b"", b"\xff\xfe"),
        *(b"POST POST", b"X" * 80, b"CONNECT", b"PRI"),
    ],
)
targets = mostly(
    [
        *(b"/scheduler/filter", b"/scheduler/prioritize", b"/scheduler/bind", b"/mutate"),
        *(b"/healthz", b"/metrics", b"/debug/loop"),
    ],
    [
        *(b"/", b"*", b"/%zz", b"/a b", b"/\x00", b"http://h/healthz", b"/healthz?x=\xff", b""),
        *(b"/" + b"u" * 9000, b"/" + b"u" * 100_000),
    ],
)
versions = mostly([b"HTTP/1.1", b"HTTP/1.0"], [b"HTTP/2.0", b"HTTP/1.x", b"", b"http/1.1"])
headers = mostly(
    [b"Host: t", b"Connection: keep-alive", b"Content-Type: application/json"],
    [
        b"Connection: close",
        b"Expect: 100-continue",
        b"Transfer-Encoding: chunked",
        b"Transfer-Encoding: gzip, chunked",
        b"Transfer-Encoding: identity",
        b"Content-Length: -1",
        b"Content-Length: 1e3",
        b"Content-Length: 99999999999999999999999",
        b"Content-Length: 5, 6",
        b"Content-Length: 3",
        b"X-Nul: a\x00b",
        b"X\x00: v",
        b"Bad Name: v",
        b"X-Latin: \xe9\xff",
        b"Upgrade: websocket",
        b" Leading: space",
        b"X-Fold: a\r\n folded",
        b"no colon",
        b"X-Big: " + b"b" * 200_000,
        b"X-Almost: " + b"b" * 30_000,
    ],
) | st.binary(max_size=40).map(lambda raw: b"X-Raw: " + raw)
bodies = st.sampled_from(
    [
        FILTER,
        b"",
        b"{}",
        b"[" * 100_000,
        b'{"Pod": ' * 50_000,
        b'{"Pod": {"metadata": {"name": "\xff\xfe"}}, "NodeNames": ["\xc3\x28"]}',
        b"\xc3\x28\xa0\xa1",
        b"\x00" * 64,
        FILTER.replace(b'"', b"'"),
    ]
) | st.binary(max_size=200)
framings = mostly(
    [b"length"], [b"short", b"long", b"chunked", b"bad-chunk", b"both", b"two-lengths", b"none"]
)
BAD_CHUNKS = [b"zz\r\n", b"-1\r\n", b"fffffffffffffffffffff\r\n", b"5\r\nab", b"3;x\r\nabc\r\n"]


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """One request, each part of it possibly broken."""
    line = b"%s %s %s" % (draw(methods), draw(targets), draw(versions))
    fields = draw(st.lists(headers, max_size=5))
    many = draw(st.sampled_from([0, 0, 0, 99, 101, 1000]))
    fields += [b"X-Many-%d: v" % number for number in range(many)]
    body = draw(bodies)
    framing = draw(framings)
    if framing in (b"length", b"short", b"long", b"both"):
        declared = len(body) + {b"length": 0, b"short": 7, b"long": -1, b"both": 0}[framing]
        fields.append(b"Content-Length: %d" % max(declared, 0))
    if framing == b"two-lengths":
        fields += [b"Content-Length: %d" % len(body), b"Content-Length: %d" % (len(body) + 1)]
    if framing in (b"chunked", b"bad-chunk", b"both"):
        fields.append(b"Transfer-Encoding: chunked")
        chunks = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
        if framing == b"bad-chunk":
            chunks += draw(st.sampled_from(BAD_CHUNKS))
        body = chunks + b"0\r\n\r\n"
    return line + b"\r\n" + b"".join(field + b"\r\n" for field in fields) + b"\r\n" + body


pipelines = st.tuples(
    st.lists(requests(), min_size=1, max_size=3),
    st.sampled_from([b""] * 3) | st.binary(max_size=50),
).map(lambda parts: b"".join(parts[0]) + parts[1])
streams = pipelines | pipelines | pipelines | st.binary(max_size=500)
"""Mostly requests (pipelined, then maybe garbage), sometimes only garbage."""


class ErrorLog(logging.Handler):
    """Collects every record at ERROR or above (asyncio's "Exception in callback" too)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def errors() -> Iterator[ErrorLog]:
    handler = ErrorLog()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def exchange(port: int, data: bytes, cuts: list[int]) -> bytes:
    """Send ``data`` in pieces, half-close, read until the server closes; all it sent."""
    received = b""
    with connect(port) as connection:
        connection.settimeout(10)  # neither an answer nor a close in 10 s fails the test
        try:
            for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
                connection.sendall(data[start:end])
            connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and closed first
        try:
            while chunk := connection.recv(1 << 20):
                received += chunk
        except ConnectionResetError:
            pass  # closed with input unread: the kernel resets instead of a FIN
    return received


def answers(stream: bytes) -> list[int]:
    """The statuses of the responses in ``stream``; fails unless each is well formed."""
    statuses = []
    while stream:
        head, separator, stream = stream.partition(b"\r\n\r\n")
        assert separator, f"a response cut short: {head[:200]!r}"
        status_line, *lines = head.split(b"\r\n")
        match = STATUS_LINE.fullmatch(status_line)
        assert match, f"not a status line: {status_line!r}"
        status = int(match[1])
        assert status in ANSWERS, head
        fields = dict(line.lower().split(b": ", 1) for line in lines)
        length = int(fields.get(b"content-length", b"0"))
        body, stream = stream[:length], stream[length:]
        assert len(body) == length, f"a body cut short: {head!r}"
        if status >= 400:
            assert orjson.loads(body)["error"]
        if status in (408, 413, 414, 431):
            assert fields[b"connection"] == b"close"
        if fields.get(b"connection") == b"close":
            assert not stream, "bytes after the last response"
        statuses.append(status)
    return statuses


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=streams, cuts=st.lists(st.integers(min_value=1, max_value=2000), max_size=3))
def test_malformed_raw_http_is_answered_or_closed_and_the_server_keeps_serving(
    default: int, errors: ErrorLog, data: bytes, cuts: list[int]
) -> None:
    statuses = answers(exchange(default, data, sorted({cut for cut in cuts if cut < len(data)})))
    for status in sorted(set(statuses)) or ["nothing"]:
        event(f"answered {status}")  # what the run covered (--hypothesis-show-statistics)
    assert not errors.records, [record.getMessage() for record in errors.records]
    with connect(default) as connection:
        connection.sendall(post("/scheduler/filter", FILTER))
        status, _, body = Responses(connection).next()
    assert status == 200 and orjson.loads(body)["NodeNames"]
