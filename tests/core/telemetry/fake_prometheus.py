"""A canned Prometheus HTTP API for tests of reply shapes a real server is hard to make
give: MIG series, error bodies, 200 replies that are not API responses.

``FakePrometheus.reply`` maps a request (its path and ``query`` parameter) to a status
and a body; :func:`vector` and :func:`matrix` build the API's success bodies.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Reply = tuple[int, Any]
"""HTTP status and body (JSON-encoded unless bytes, which go as plain text, as
Prometheus's own 404 page does)."""
Handler = Callable[[str, Mapping[str, str]], Reply]
"""(path, query parameters) → reply."""


def vector(series: list[tuple[Mapping[str, str], str]], at: float = 1_700_000_000.0) -> Reply:
    """A 200 instant-query reply of these (labels, sample value) series."""
    result = [{"metric": dict(labels), "value": [at, value]} for labels, value in series]
    return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


def matrix(series: list[tuple[Mapping[str, str], list[tuple[float, str]]]]) -> Reply:
    """A 200 range-query reply of these (labels, [(time, value), ...]) series."""
    result = [
        {"metric": dict(labels), "values": [[t, v] for t, v in points]} for labels, points in series
    ]
    return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}


def empty(path: str, params: Mapping[str, str]) -> Reply:
    return (
        (vector([]) if path.endswith("/query") else matrix([]))
        if path.startswith("/api")
        else (
            404,
            b"404 page not found",
        )
    )


@contextmanager
def fake_prometheus(handler: Handler) -> Iterator[str]:
    """Serve ``handler`` on a free local port; yields the base URL."""

    class Requests(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            parts = urlsplit(self.path)
            params = {k: v[0] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                params.update(
                    {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                )
            status, body = handler(parts.path, params)
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            kind = "text/plain; charset=utf-8" if isinstance(body, bytes) else "application/json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _answer  # noqa: N815 (http.server's name)
        do_POST = _answer  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Requests)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
