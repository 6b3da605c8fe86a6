"""A lean HTTP/1.1 server for :class:`~kubesage.core.k8s.server.App`: asyncio + httptools.

kube-scheduler calls the extender twice per pod, over keep-alive connections; at
1,000 pods/s the server's own overhead per request matters as much as the decision.
This server is an ``asyncio.Protocol`` fed by httptools' parser (the one uvicorn
uses), on uvloop: per request it keeps the URL, two headers and the body, looks the
path up in the app's route dict and writes the reply's bytes — no ASGI messages,
no framework request or response objects.

HTTP behaviour:

- keep-alive (HTTP/1.1 default; ``Connection: close`` and HTTP/1.0 close after the
  answer), idle connections closed after ``keep_alive_s``;
- pipelining-safe: requests are answered one at a time, in order, even when one of
  them runs in the thread pool; reading pauses while too many are queued or while
  the transport's write buffer is full;
- bounded bodies: a Content-Length over the app's limit is answered 413 before the
  body is read, a chunked body at the moment it crosses the limit; the rest of the
  body is discarded and the connection closed after a short linger, so the client
  reads the 413 rather than a reset;
- bounded request heads (:class:`~kubesage.core.k8s.http_limits.HttpLimits`): a URL
  over ``max_url_bytes`` is 414, header fields over ``max_header_bytes`` in all or
  more than ``max_headers`` of them 431 — decided while the head streams in, so a
  client cannot make the server buffer more than the limits and one read;
- timeouts for slow or stalled clients: headers not complete ``header_timeout_s``
  after their first byte, or a body with no bytes for ``stall_timeout_s``, get a 408;
  an idle keep-alive connection is closed (unanswered) after ``keep_alive_s`` (a new
  one that sends nothing, after ``header_timeout_s``), and one
  whose client reads nothing of the answers for ``stall_timeout_s`` is dropped;
- malformed HTTP gets a 400 with a message, then the connection is closed;
- every connection the server closes on its own (a limit, a timeout, malformed HTTP)
  is counted by reason in ``kubesage_http_connections_closed_total``;
- ``Expect: 100-continue`` is honoured; HEAD answers GET routes without a body;
- a reply's ``after`` work runs on the event loop right after its bytes are written
  (:attr:`~kubesage.core.k8s.server.Reply.after`);
- TLS when given an ``ssl.SSLContext``; graceful stop (in-flight requests finish,
  up to ``graceful_s``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections import deque
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from typing import cast

import httptools

from kubesage.core.k8s.http_limits import HttpLimits
from kubesage.core.k8s.server import App, Endpoint, Reply, error_reply, run_after
from kubesage.core.observability import metrics

log = logging.getLogger(__name__)

LINGER_S = 2.0
"""After an answer that closes (400, 408, 413, 414, 431) the connection stays open this
long, discarding input, so that the client reads the answer rather than a reset."""
MAX_QUEUED = 32
"""Pipelined requests queued per connection before reading pauses."""
GRACEFUL_S = 5.0

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

# Where the connection is in the current request: between requests, reading its
# head (request line and headers), reading its body.
_IDLE, _HEAD, _BODY = 0, 1, 2


class _RefusedError(Exception):
    """Raised from a parser callback to stop parsing a request already answered."""


@dataclass(slots=True)
class _Queued:
    endpoint: Endpoint | None
    reply: Reply | None
    """A reply decided without running the endpoint (404, 405, 413, 400)."""
    body: bytes
    started: float
    keep_alive: bool
    head: bool
    linger: bool = False


class HttpServer:
    """Serves one :class:`App` on listening sockets until :meth:`stop`."""

    def __init__(
        self,
        app: App,
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: HttpLimits | None = None,
        graceful_s: float = GRACEFUL_S,
    ):
        self.app = app
        self.ssl_context = ssl_context
        self.limits = limits or HttpLimits()
        self.graceful_s = graceful_s
        self.connections: set[HttpProtocol] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    async def serve(self, sock: socket.socket) -> None:
        """Accept on ``sock`` (already listening) until :meth:`stop`; then drain."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await self._loop.create_server(
            lambda: HttpProtocol(self), sock=sock, ssl=self.ssl_context
        )
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for connection in list(self.connections):
                connection.shutdown()
            deadline = time.monotonic() + self.graceful_s
            while self.connections and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            for connection in list(self.connections):
                connection.abort()

    def stop(self) -> None:
        """Stop accepting and finish the requests in flight; safe from any thread."""
        if self._loop is None or self._stopping is None:
            return
        stopping = self._stopping
        self._loop.call_soon_threadsafe(stopping.set)


class HttpProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection."""

    def __init__(self, server: HttpServer):
        self._server = server
        self._app = server.app
        self._limits = server.limits
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._queue: deque[_Queued] = deque()
        self._busy = False
        """A threaded endpoint is running; later requests wait for it."""
        self._closing = False
        """No more requests are read; the connection closes once the queue is answered."""
        self._last_message = False
        """The server is stopping: the message being read is the last; its answer closes."""
        self._lingering = False
        self._read_paused = False
        self._write_paused = False
        self._timer: asyncio.TimerHandle | None = None
        # The message being parsed.
        self._url = b""
        self._chunks: list[bytes] = []
        self._size = 0
        self._declared: int | None = None
        self._expect_continue = False
        self._found: Endpoint | Reply | None = None
        self._started = 0.0
        self._answered = False
        """This message was already answered (413 while its body streamed in)."""
        self._phase = _IDLE
        self._begun = 0
        """Messages begun on this connection (tells whether one began within a read)."""
        self._header_bytes = 0
        self._header_count = 0
        self._head_read = 0
        """Bytes of reads that were all inside the current head (see data_received)."""
        self._head_deadline = 0.0

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without deriving from it.
        self._transport = cast(asyncio.Transport, transport)
        self._server.connections.add(self)
        # A new connection's first request is due as soon as a request's headers are:
        # keep_alive_s (long, for clients that reuse connections) is for between requests.
        self._arm(self._limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._transport = None
        self._queue.clear()
        self._disarm()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return  # answered what it will answer; discard the rest
        if not self._write_paused:  # sending does not excuse not reading
            self._disarm()
        in_head, begun = self._phase == _HEAD, self._begun
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._closing = True  # answer what was read; this server speaks HTTP/1.1 only
        except httptools.HttpParserError as exc:
            if not self._closing:  # else a callback refused the request and answered it
                self._protocol_error(f"malformed HTTP request: {exc}")
        if not self._closing and in_head and self._phase == _HEAD and begun == self._begun:
            # httptools buffers a header until it is complete, calling nothing: a read
            # that began and ended inside this head is all head bytes, so count them
            # here too (the read in which the head began is at most one read).
            self._head_read += len(data)
            if self._head_read > self._limits.max_url_bytes + self._limits.max_header_bytes:
                self._refuse(431, "header_too_large", "the request head is over its size limit")
        self._pump()

    def eof_received(self) -> bool:
        # The client sent all it will (a half-close): answer what was read, then close.
        self._closing = True
        return bool(self._queue or self._busy)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._arm(self._limits.stall_timeout_s)  # a client that never reads: see _expire

    def resume_writing(self) -> None:
        self._write_paused = False
        self._disarm()
        self._pump()

    # -- httptools callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._phase = _HEAD
        self._begun += 1
        self._header_bytes = self._header_count = self._head_read = 0
        self._head_deadline = self._loop.time() + self._limits.header_timeout_s
        self._url = b""
        self._chunks = []
        self._size = 0
        self._declared = None
        self._expect_continue = False
        self._found = None
        self._answered = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._limits.max_url_bytes:
            limit = self._limits.max_url_bytes
            self._refuse(414, "url_too_long", f"the request URL is over the {limit}-byte limit")
            raise _RefusedError

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._header_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if self._header_count > self._limits.max_headers:
            limit = self._limits.max_headers
            self._refuse(431, "too_many_headers", f"more than {limit} header fields")
            raise _RefusedError
        if self._header_bytes > self._limits.max_header_bytes:
            limit = self._limits.max_header_bytes
            message = f"the header fields are over the {limit}-byte limit"
            self._refuse(431, "header_too_large", message)
            raise _RefusedError
        lowered = name.lower()
        if lowered == b"content-length":
            self._declared = int(value) if value.strip().isdigit() else None
        elif lowered == b"expect" and value.strip().lower() == b"100-continue":
            self._expect_continue = True

    def on_headers_complete(self) -> None:
        self._phase = _BODY
        self._started = time.perf_counter()
        method = self._parser.get_method().decode("latin-1")
        path = self._url.partition(b"?")[0].decode("latin-1")
        found = self._found = self._app.find(method, path)
        if isinstance(found, Reply):
            return
        if self._declared is not None and self._declared > self._app.max_body_bytes:
            self._reject(self._app.too_large(found, self._declared, self._started))
        elif self._expect_continue and self._transport is not None:
            self._transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self._answered or isinstance(self._found, Reply):
            return
        self._size += len(body)
        if self._size > self._app.max_body_bytes:
            assert self._found is not None
            self._reject(self._app.too_large(self._found, None, self._started))
            return
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        self._phase = _IDLE
        if self._answered or self._closing:
            return
        keep_alive = bool(self._parser.should_keep_alive()) and not self._last_message
        head = self._parser.get_method() == b"HEAD"
        found = self._found
        if isinstance(found, Reply) or found is None:
            queued = _Queued(
                None, found or error_reply(400, "no request"), b"", 0.0, keep_alive, head
            )
        else:
            body = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
            queued = _Queued(found, None, body, self._started, keep_alive, head)
        self._chunks = []
        self._queue.append(queued)
        if not keep_alive:
            self._closing = True
        elif len(self._queue) >= MAX_QUEUED and not self._read_paused and self._transport:
            self._read_paused = True
            self._transport.pause_reading()

    # -- answering -------------------------------------------------------------------

    def _reject(self, reply: Reply) -> None:
        """Answer the current message now, discard the rest, close after a linger."""
        metrics.HTTP_CLOSED.labels("body_too_large").inc()
        self._answered = True
        self._chunks = []
        self._closing = True
        self._queue.append(_Queued(None, reply, b"", 0.0, False, False, linger=True))

    def _protocol_error(self, message: str) -> None:
        metrics.ERRORS.labels("http", "bad_request").inc()
        self._refuse(400, "malformed", message)

    def _refuse(self, status: int, reason: str, message: str) -> None:
        """Answer ``status`` after the requests already read, read nothing more, close."""
        metrics.HTTP_CLOSED.labels(reason).inc()
        self._closing = True
        self._queue.append(
            _Queued(None, error_reply(status, message), b"", 0.0, False, False, linger=True)
        )

    def _pump(self) -> None:
        """Answer queued requests in order until one runs in a thread or writing pauses."""
        while self._queue and not self._busy and not self._write_paused:
            if self._transport is None:
                return
            queued = self._queue.popleft()
            if queued.reply is not None:
                self._send(queued.reply, queued)
            else:
                assert queued.endpoint is not None
                if queued.endpoint.threaded:
                    self._busy = True
                    future = self._loop.run_in_executor(
                        None, self._app.run, queued.endpoint, queued.body, queued.started
                    )
                    future.add_done_callback(partial(self._threaded_done, queued))
                    return
                self._send(self._app.run(queued.endpoint, queued.body, queued.started), queued)
        if self._transport is None:
            return
        if self._write_paused or self._queue or self._busy:
            return  # (while writing is paused, the timer pause_writing armed runs)
        if self._read_paused:
            self._read_paused = False
            self._transport.resume_reading()
        if self._lingering:
            return
        if self._closing:
            self._transport.close()
        elif self._phase == _HEAD:
            self._arm(max(self._head_deadline - self._loop.time(), 0.0))
        elif self._phase == _BODY:
            self._arm(self._limits.stall_timeout_s)
        else:
            self._arm(self._limits.keep_alive_s)

    def _threaded_done(self, queued: _Queued, future: asyncio.Future[Reply]) -> None:
        self._busy = False
        if self._transport is None:
            return
        if future.cancelled() or future.exception() is not None:
            name = queued.endpoint.name if queued.endpoint else "http"
            metrics.ERRORS.labels(name, "internal").inc()
            reply = error_reply(500, "internal error: the request was not run")
        else:
            reply = future.result()
        self._send(reply, queued)
        self._pump()

    def _send(self, reply: Reply, queued: _Queued) -> None:
        transport = self._transport
        if transport is None:
            return
        head = _status_line(reply.status) + b"content-type: %s\r\ncontent-length: %d\r\n" % (
            reply.content_type.encode("latin-1"),
            len(reply.body),
        )
        for name, value in reply.headers:
            head += b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1"))
        if not queued.keep_alive:
            head += b"connection: close\r\n"
        head += b"\r\n"
        if queued.head or not reply.body:
            transport.write(head)
        else:
            transport.writelines((head, reply.body))
        if reply.after is not None:
            # Next loop iteration: the answer's bytes are on their way first.
            self._loop.call_soon(run_after, reply.after)
        if queued.linger:
            self._queue.clear()
            self._lingering = True
            self._arm(LINGER_S)
        elif not queued.keep_alive:
            self._queue.clear()
            self._closing = True

    # -- lifecycle -------------------------------------------------------------------

    def shutdown(self) -> None:
        """Read no more requests; close once those already read are answered. A request
        whose head or body is still arriving is read to its end and answered first."""
        if self._phase != _IDLE and not self._closing:
            self._last_message = True
            return
        self._closing = True
        if self._transport is not None and not self._queue and not self._busy:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self._loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self._transport is None:
            return
        if self._write_paused:  # the client read nothing of the answers for that long
            if not self._lingering:
                metrics.HTTP_CLOSED.labels("write_timeout").inc()
            self._transport.abort()  # close() would wait for it to read
        elif self._busy:
            return
        elif self._lingering or self._closing:
            self._transport.close()
        elif self._phase == _IDLE:
            metrics.HTTP_CLOSED.labels("idle_timeout").inc()
            self._transport.close()
        else:  # nothing is owed before it (the timer runs only then): a 408 can be read
            if self._phase == _HEAD:
                reason = "header_timeout"
                message = f"the request headers took over {self._limits.header_timeout_s:g} s"
            else:
                reason = "body_timeout"
                message = f"no request body bytes for {self._limits.stall_timeout_s:g} s"
            self._refuse(408, reason, message)
            self._pump()


_STATUS_LINES: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")
    return line
