"""Structured log lines: one JSON object per line (or ``key=value`` text).

Events (storms, alarms, captures, reloads, faults) go through :func:`emit`
so each is one machine-readable line with an ``event`` field.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LOGGER = logging.getLogger("netio.daemon")


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
        }
        fields = getattr(record, "netio", None)
        if isinstance(fields, dict):
            doc.update(fields)
        else:
            doc["msg"] = record.getMessage()
        return json.dumps(doc, default=str, sort_keys=False)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "netio", None)
        head = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        if isinstance(fields, dict):
            body = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in fields.items())
        else:
            body = record.getMessage()
        return f"{head} {record.levelname.lower()} {body}"


def setup(fmt: str = "json", stream: Any = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


def emit(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    LOGGER.log(level, event, extra={"netio": {"event": event, **fields}})
