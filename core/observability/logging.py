"""Structured logs: one JSON object per line, with the event's fields as keys.

``configure_logging`` installs :class:`JsonFormatter` on the root logger, so every
``logging`` call in kubesage (and in libraries) comes out as JSON that a log
pipeline can index. Fields passed through ``extra=`` (or :func:`log_event`) become
top-level keys, e.g.
``{"ts": "...", "level": "info", "logger": "kubesage.core.k8s.extender",
"event": "bind", "pod": "ml/trainer-0", "node": "gpu-17"}``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import IO, Any

import orjson

_STANDARD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
) | {"message", "asctime", "taskName", "color_message"}  # uvicorn's ANSI-coloured copy


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line (time in UTC, ISO 8601 with milliseconds)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure_logging(level: str = "INFO", stream: IO[str] | None = None) -> None:
    """Send every log record to ``stream`` (stderr) as JSON at ``level`` and above."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())


def log_event(logger: logging.Logger, level: int, event: str, **fields: Any) -> None:
    """Log ``event`` with ``fields`` as structured keys (``event`` is also the message)."""
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={"event": event, **fields})
