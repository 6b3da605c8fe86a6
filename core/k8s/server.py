"""The HTTP app ``kubesage serve`` runs: extender, webhook, health and metrics.

Routes (all JSON unless noted):

- ``POST /scheduler/filter``, ``/scheduler/prioritize``, ``/scheduler/bind``: the
  kube-scheduler extender verbs (``urlPrefix`` ends in ``/scheduler``);
- ``POST /mutate``: the mutating admission webhook (AdmissionReview v1);
- ``GET /healthz``: 200 when the cluster state is ready, 503 with the reason if not;
- ``GET /metrics``: Prometheus text format (:mod:`kubesage.core.k8s.metrics`).

A Starlette app with no per-route validation layer: the handlers take the raw body
and answer bytes (orjson), which keeps the extender's hot path short. Filter and
prioritize run on the event loop (pure CPU, sub-millisecond); bind and mutate may
wait on the API server, so they run in the thread pool.

Errors never escape as a crash: a body over ``max_body_bytes`` is 413, malformed
input is 400 with a message, a dependency that is down (the cluster state not
synced yet) is 503, and anything unexpected is a logged, counted 500.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kubesage.core.errors import DependencyError, InputError
from kubesage.core.k8s import metrics
from kubesage.core.k8s.extender import Extender
from kubesage.core.k8s.logging import log_event

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 2**20
"""Largest request body read (a full 10,000-node NodeList fits; names-only is ~0.3 MB)."""
JSON = "application/json"

Handler = Callable[[bytes], tuple[int, bytes]]
MutateHandler = Callable[[bytes], tuple[int, dict[str, Any]]]
"""The webhook's ``AdmissionWebhook.handle``: (status, JSON body)."""
HealthCheck = Callable[[], tuple[bool, str]]
"""Whether the service can decide now, and a sentence saying what it decides on."""


class BodyTooLargeError(InputError):
    """A request body over the configured limit."""


def create_app(
    extender: Extender,
    *,
    mutate: MutateHandler | None = None,
    health: HealthCheck | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    bind_waits_on_io: bool = True,
) -> Starlette:
    """The app; ``mutate`` is the webhook handler (``/mutate`` answers 404 without one).

    ``bind_waits_on_io``: binding calls the API server, so it runs in the thread pool;
    the embedded cluster binds in memory and passes False to stay on the event loop
    (a thread hop costs more than the bind, and two threads contend for the GIL).
    """

    def endpoint(
        name: str, handler: Handler, *, threaded: bool
    ) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            started = time.perf_counter()
            try:
                body = await _read_body(request, max_body_bytes)
                if threaded:
                    status, content = await run_in_threadpool(handler, body)
                else:
                    status, content = handler(body)
            except Exception as exc:  # turned into a 4xx/5xx below, never a crash
                status, content = _error_response(name, exc)
            metrics.LATENCY.labels(name).observe(time.perf_counter() - started)
            return Response(content, status_code=status, media_type=JSON)

        return run

    def mutate_bytes(body: bytes) -> tuple[int, bytes]:
        if mutate is None:
            return 404, orjson.dumps({"error": "the admission webhook is not enabled"})
        status, document = mutate(body)
        return status, orjson.dumps(document)

    async def healthz(request: Request) -> Response:
        try:
            ready, detail = health() if health is not None else (True, "ready")
        except DependencyError as exc:
            ready, detail = False, str(exc)
        return Response(
            orjson.dumps({"status": "ok" if ready else "unavailable", "detail": detail}),
            status_code=200 if ready else 503,
            media_type=JSON,
        )

    async def metrics_endpoint(request: Request) -> Response:
        content, content_type = metrics.render()
        return Response(content, media_type=content_type)

    routes = [
        Route(
            "/scheduler/filter",
            endpoint("filter", extender.filter, threaded=False),
            methods=["POST"],
        ),
        Route(
            "/scheduler/prioritize",
            endpoint("prioritize", extender.prioritize, threaded=False),
            methods=["POST"],
        ),
        Route(
            "/scheduler/bind",
            endpoint("bind", extender.bind, threaded=bind_waits_on_io),
            methods=["POST"],
        ),
        Route("/mutate", endpoint("mutate", mutate_bytes, threaded=True), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
    ]
    return Starlette(routes=routes)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError(f"request body of {declared} bytes is over the {limit}-byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(f"request body is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


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
        log.exception("unexpected error in %s", endpoint)
    metrics.ERRORS.labels(endpoint, kind).inc()
    message = str(exc) if status != 500 else f"internal error: {type(exc).__name__}"
    if status != 500:
        log_event(
            log, logging.INFO, "request_failed", endpoint=endpoint, status=status, error=message
        )
    # "Error" is what kube-scheduler reads from an extender; "error" what people read.
    return status, orjson.dumps({"error": message, "Error": message})
