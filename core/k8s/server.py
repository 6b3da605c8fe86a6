"""The HTTP app ``kubesage serve`` runs: extender, webhook, health and metrics.

Routes (all JSON unless noted):

- ``POST /scheduler/filter``, ``/scheduler/prioritize``, ``/scheduler/bind``: the
  kube-scheduler extender verbs (``urlPrefix`` ends in ``/scheduler``);
- ``POST /mutate``: the mutating admission webhook (AdmissionReview v1);
- ``GET /healthz``: 200 when the cluster state is ready, 503 with the reason if not
  (with the control loop running, ``forecaster`` says which forecaster it uses — still
  200 in cold start, when that is the last value);
- ``GET /metrics``: Prometheus text format (:mod:`kubesage.core.observability.metrics`);
- ``GET /debug/loop``: the control loop's ticks, clock, forecaster, reconcilers and last
  audit records (404 when no loop runs).

:class:`App` is the part that does not depend on an HTTP server: an exact-path route
table, the body-size limit, the mapping of errors to statuses, and the metrics. The
lean HTTP/1.1 server of :mod:`kubesage.core.k8s.http_server` calls it directly — a
dict lookup and a handler call per request, no framework layer — and it is also a
plain ASGI 3 app, so any ASGI server (or Starlette's test client) can run it.

Filter and prioritize run on the event loop (pure CPU, sub-millisecond); bind and
mutate may wait on the API server, so they run in the thread pool.

Errors never escape as a crash: a body over ``max_body_bytes`` is 413, malformed
input is 400 with a message, a dependency that is down (the cluster state not
synced yet) is 503, and anything unexpected is a logged, counted 500.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson

from kubesage.core.errors import DependencyError, InputError
from kubesage.core.k8s.extender import Extender
from kubesage.core.observability import metrics
from kubesage.core.observability.logging import log_event

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 2**20
"""Largest request body read (a full 10,000-node NodeList fits; names-only is ~0.3 MB)."""
JSON = "application/json"

Handler = Callable[[bytes], tuple[int, bytes]]
MutateHandler = Callable[[bytes], tuple[int, dict[str, Any]]]
"""The webhook's ``AdmissionWebhook.handle``: (status, JSON body)."""
HealthCheck = Callable[[], tuple[bool, str]]
"""Whether the service can decide now, and a sentence saying what it decides on."""
LoopDebug = Callable[[], Mapping[str, Any]]
"""The control loop's state for ``/debug/loop`` (``ControlLoop.debug``)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BodyTooLargeError(InputError):
    """A request body over the configured limit."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete HTTP response: status, body, content type and any extra headers."""

    status: int
    body: bytes
    content_type: str = JSON
    headers: tuple[tuple[str, str], ...] = ()
    after: Callable[[], None] | None = None
    """Work to run once the answer is written (the extender scores what filter passed
    while kube-scheduler reads the answer); it may not fail the request: an exception
    is logged and counted."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One route: what answers it and how it runs."""

    name: str
    """Label in the latency, error and fallback metrics."""
    method: str
    answer: Callable[[bytes], Reply]
    """Body in, reply out; may raise (see :meth:`App.run`)."""
    threaded: bool
    """Runs in the thread pool (it may block on I/O) instead of on the event loop."""
    timed: bool = True
    """Observed in the latency histogram (the API endpoints, not health or metrics)."""


class App:
    """Routing, the body limit, error statuses and metrics; no HTTP server of its own."""

    def __init__(self, endpoints: dict[str, Endpoint], *, max_body_bytes: int = MAX_BODY_BYTES):
        self.endpoints = endpoints
        self.max_body_bytes = max_body_bytes
        # Each endpoint's latency series, looked up once rather than on every request.
        self._latency = {
            endpoint.name: metrics.LATENCY.labels(endpoint.name)
            for endpoint in endpoints.values()
            if endpoint.timed
        }

    def find(self, method: str, path: str) -> Endpoint | Reply:
        """The endpoint for ``method path``, or the 404/405 reply (HEAD counts as GET)."""
        endpoint = self.endpoints.get(path)
        if endpoint is None:
            return error_reply(404, f"no route {path}")
        if endpoint.method != method and not (method == "HEAD" and endpoint.method == "GET"):
            return Reply(
                405,
                _error_body(f"{path} answers {endpoint.method} only, not {method}"),
                headers=(("allow", endpoint.method),),
            )
        return endpoint

    def run(self, endpoint: Endpoint, body: bytes, started: float) -> Reply:
        """Answer one request; never raises (failures become 4xx/5xx replies).

        ``started`` is ``time.perf_counter()`` when the request's headers were read.
        """
        try:
            reply = endpoint.answer(body)
        except Exception as exc:  # turned into a 4xx/5xx, never a crash
            reply = Reply(*_error_response(endpoint.name, exc))
        if endpoint.timed:
            self._latency[endpoint.name].observe(time.perf_counter() - started)
        return reply

    def too_large(self, endpoint: Endpoint, declared: int | None, started: float) -> Reply:
        """The 413 for a body over the limit (``declared``: its Content-Length, if given)."""
        limit = self.max_body_bytes
        message = (
            f"request body of {declared} bytes is over the {limit}-byte limit"
            if declared is not None
            else f"request body is over the {limit}-byte limit"
        )
        reply = Reply(*_error_response(endpoint.name, BodyTooLargeError(message)))
        if endpoint.timed:
            self._latency[endpoint.name].observe(time.perf_counter() - started)
        return reply

    # -- ASGI ------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The same routes as a plain ASGI 3 app."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        found = self.find(scope["method"], scope["path"])
        if isinstance(found, Reply):
            reply = found
        else:
            body = await self._read_body(scope, receive)
            if body is None:
                reply = self.too_large(found, _declared_length(scope), started)
            elif found.threaded:
                loop = asyncio.get_running_loop()
                reply = await loop.run_in_executor(None, self.run, found, body, started)
            else:
                reply = self.run(found, body, started)
        headers = [
            (b"content-type", reply.content_type.encode("latin-1")),
            (b"content-length", str(len(reply.body)).encode("ascii")),
            *((name.encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers),
        ]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        body_out = b"" if scope["method"] == "HEAD" else reply.body
        await send({"type": "http.response.body", "body": body_out})
        if reply.after is not None:
            run_after(reply.after)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The request body, or None when it is over the limit."""
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def create_app(
    extender: Extender,
    *,
    mutate: MutateHandler | None = None,
    health: HealthCheck | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    bind_waits_on_io: bool = True,
    loop: LoopDebug | None = None,
    forecaster: Callable[[], str] | None = None,
) -> App:
    """The app; ``mutate`` is the webhook handler (``/mutate`` answers 404 without one),
    ``loop`` the control loop's debug state (``/debug/loop`` answers 404 without one),
    ``forecaster`` the loop's forecaster in words (``/healthz`` shows it; the debug
    state serialises the audit records, too much for every probe).

    ``bind_waits_on_io``: binding calls the API server, so it runs in the thread pool;
    the embedded cluster binds in memory and passes False to stay on the event loop
    (a thread hop costs more than the bind, and two threads contend for the GIL).
    """

    def wrap(handler: Handler, after: Callable[[], None] | None = None) -> Callable[[bytes], Reply]:
        def answer(body: bytes) -> Reply:
            status, content = handler(body)
            return Reply(status, content, after=after if status == 200 else None)

        return answer

    def mutate_reply(body: bytes) -> Reply:
        if mutate is None:
            return Reply(404, orjson.dumps({"error": "the admission webhook is not enabled"}))
        status, document = mutate(body)
        return Reply(status, orjson.dumps(document))

    def healthz(_: bytes) -> Reply:
        try:
            ready, detail = health() if health is not None else (True, "ready")
        except DependencyError as exc:
            ready, detail = False, str(exc)
        document = {"status": "ok" if ready else "unavailable", "detail": detail}
        if forecaster is not None:
            # A forecaster in cold start (the last value) is no reason to be unhealthy.
            document["forecaster"] = forecaster()
        return Reply(200 if ready else 503, orjson.dumps(document))

    def debug_loop(_: bytes) -> Reply:
        if loop is None:
            return error_reply(404, "the control loop is not running")
        return Reply(200, orjson.dumps(loop()))

    def metrics_reply(_: bytes) -> Reply:
        content, content_type = metrics.render()
        return Reply(200, content, content_type)

    endpoints = [
        Endpoint("filter", "POST", wrap(extender.filter, extender.prescore), threaded=False),
        Endpoint("prioritize", "POST", wrap(extender.prioritize), threaded=False),
        Endpoint("bind", "POST", wrap(extender.bind), threaded=bind_waits_on_io),
        Endpoint("mutate", "POST", mutate_reply, threaded=True),
        Endpoint("healthz", "GET", healthz, threaded=False, timed=False),
        Endpoint("metrics", "GET", metrics_reply, threaded=False, timed=False),
        Endpoint("debug_loop", "GET", debug_loop, threaded=False, timed=False),
    ]
    paths = {
        "filter": "/scheduler/filter",
        "prioritize": "/scheduler/prioritize",
        "bind": "/scheduler/bind",
        "mutate": "/mutate",
        "healthz": "/healthz",
        "metrics": "/metrics",
        "debug_loop": "/debug/loop",
    }
    return App({paths[e.name]: e for e in endpoints}, max_body_bytes=max_body_bytes)


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            text = bytes(value).strip()
            return int(text) if text.isdigit() else None
    return None


def _error_body(message: str) -> bytes:
    # "Error" is what kube-scheduler reads from an extender; "error" what people read.
    return orjson.dumps({"error": message, "Error": message})


def run_after(work: Callable[[], None]) -> None:
    """Run a reply's :attr:`Reply.after` work; an exception is logged and counted
    (``kubesage_errors_total{component="http",kind="after"}``), never raised."""
    try:
        work()
    except Exception:
        metrics.ERRORS.labels("http", "after").inc()
        log.exception("work after an answer failed")


def error_reply(status: int, message: str) -> Reply:
    return Reply(status, _error_body(message))


def _error_response(endpoint: str, exc: Exception) -> tuple[int, bytes]:
    """The status and body for a failed request; counted, and logged when unexpected."""
    if isinstance(exc, BodyTooLargeError):
        status, kind = 413, "too_large"
    elif isinstance(exc, InputError):
        status, kind = 400, "bad_request"
    elif isinstance(exc, DependencyError):
        status, kind = 503, "unavailable"
        metrics.FALLBACKS.labels(endpoint, "dependency_down").inc()
    else:
        status, kind = 500, "internal"
        log.exception("unexpected error in %s", endpoint, exc_info=exc)
    metrics.ERRORS.labels(endpoint, kind).inc()
    message = str(exc) if status != 500 else f"internal error: {type(exc).__name__}"
    if status != 500:
        log_event(
            log, logging.INFO, "request_failed", endpoint=endpoint, status=status, error=message
        )
    return status, _error_body(message)
