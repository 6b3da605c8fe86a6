"""Reading a Kubernetes watch stream by hand (the informer and the namespace cache).

Both read ``?watch=true`` responses with ``_preload_content=False`` so that a stop can
shut the socket down under a blocked reader; these helpers are that shared part.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException


def json_lines(response: Any) -> Iterator[str]:
    """Non-empty JSON lines of a watch stream, however the chunks split them."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line.decode("utf-8", errors="replace")
    if buffer.strip():
        yield buffer.decode("utf-8", errors="replace")


def shutdown(response: Any) -> None:
    """Unblock a thread reading ``response`` (urllib3 ≥ 2.3 can shut the socket down).

    urllib3 raises ValueError or RuntimeError from ``shutdown`` when the stream has
    already ended and its connection was released: nothing is left to unblock then.
    """
    if response is None:
        return
    if hasattr(response, "shutdown"):
        with suppress(OSError, ValueError, RuntimeError, urllib3.exceptions.HTTPError):
            response.shutdown()
    with suppress(OSError, urllib3.exceptions.HTTPError):
        response.close()


def describe(exc: BaseException) -> str:
    """A short description of an API failure for logs and stale reasons."""
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
