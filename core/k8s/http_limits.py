"""How much, and how slowly, one client may send the HTTP server: :class:`HttpLimits`.

``kubesage serve`` takes each as an option (:mod:`kubesage.core.cli.http_options`);
:mod:`kubesage.core.k8s.http_server` enforces them and counts every connection it
closes on its own in ``kubesage_http_connections_closed_total``, by one of
:data:`CLOSE_REASONS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesage.core.errors import InputError
from kubesage.core.observability import metrics

KEEP_ALIVE_S = 120.0
"""Idle keep-alive connections are closed after this long: longer than the 90 s Go's
HTTP clients keep an idle connection (kube-scheduler's extender client, the API server's
webhook client: ``IdleConnTimeout``), so the client closes first. A server that closes
first can do so as the client sends a request on that connection, and Go does not
retry a POST that may have been sent: the extender call or the admission fails."""
HEADER_TIMEOUT_S = 10.0
"""A request's headers must be complete this long after their first byte (slowloris)."""
STALL_TIMEOUT_S = 10.0
"""A request body with no bytes this long gets 408; a client that reads none of its
answers this long is dropped."""
MAX_URL_BYTES = 8 * 1024
"""Longest request URL (the request line's target), as nginx and gunicorn allow."""
MAX_HEADER_BYTES = 32 * 1024
"""Most bytes of header fields in one request (names, values, ``": "`` and CRLF)."""
MAX_HEADERS = 100
"""Most header fields in one request (gunicorn's and h11's default)."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one client may send, and how slowly, before it is answered and closed."""

    max_url_bytes: int = MAX_URL_BYTES
    """Longer request URLs get 414."""
    max_header_bytes: int = MAX_HEADER_BYTES
    """More bytes of header fields get 431."""
    max_headers: int = MAX_HEADERS
    """More header fields get 431."""
    header_timeout_s: float = HEADER_TIMEOUT_S
    """Headers not complete this long after the request's first byte get 408."""
    keep_alive_s: float = KEEP_ALIVE_S
    """An idle connection is closed after this long."""
    stall_timeout_s: float = STALL_TIMEOUT_S
    """A body stalled this long gets 408, and a client that reads none of its answers
    for this long is dropped."""

    def __post_init__(self) -> None:
        for name in ("max_url_bytes", "max_header_bytes", "max_headers"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("header_timeout_s", "keep_alive_s", "stall_timeout_s"):
            if not getattr(self, name) > 0:
                raise InputError(f"{name} must be positive, got {getattr(self, name)}")


CLOSE_REASONS = (
    "url_too_long",
    "header_too_large",
    "too_many_headers",
    "body_too_large",
    "header_timeout",
    "body_timeout",
    "idle_timeout",
    "write_timeout",
    "malformed",
)
"""The ``reason`` label values of ``kubesage_http_connections_closed_total``."""
for _reason in CLOSE_REASONS:  # every series exported from the start, at 0
    metrics.HTTP_CLOSED.labels(_reason)
