"""Structured logs (``--log-encoding json|console``) with Flux's levels and a redaction filter.

Levels: ``trace`` (5), ``debug``, ``info``, ``error``. Every record passes through a ``Redactor`` that
knows the current Secret values, as the last line of defence behind ``SecretValue`` and masking.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from datetime import UTC, datetime
from typing import TextIO

from .core.redact import Redactor, redact_urls_in

TRACE = 5
LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR}


class RedactingFilter(logging.Filter):
    """Masks known Secret values in the message, the traceback and the structured ``fields`` of a record.

    The ``Redactor`` masks whole values only (``flux-system`` stays readable when a Secret holds ``flux``)
    and costs O(length of the line), whatever the number of Secrets (``core.redact``).
    """

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        record.msg = self.redactor(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = self.redactor(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        extra = record.__dict__.get("fields")
        if isinstance(extra, dict):  # fields(error=...) reaches the JSON line as its own key
            record.__dict__["fields"] = {
                key: value if isinstance(value, int | float | bool) else self.redactor(str(value))
                for key, value in extra.items()
            }
        return True


class FluxLevels(logging.Filter):
    """Flux's controllers log at ``error``, ``info``, ``debug``, ``trace``: there is no ``warning`` that
    ``--log-level=error`` would hide, so a Python warning is printed (and filtered) as an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING:
            record.levelname = "ERROR"
        elif record.levelno == TRACE:
            record.levelname = "TRACE"
        return True


def fields(**values: object) -> dict[str, dict[str, object]]:
    """``extra=`` for a log call with Flux's structured keys: ``log.error("...", extra=fields(name=...,
    namespace=..., **{"reconciler kind": "Alert"}, error=...))``. Empty values are left out."""
    return {"fields": {k: v for k, v in values.items() if v not in (None, "")}}


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, object] = {
            "level": record.levelname.lower(),
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = record.__dict__.get("fields")
        if isinstance(extra, dict):
            for key, value in extra.items():
                payload.setdefault(
                    str(key), value if isinstance(value, str | int | float | bool) else str(value)
                )
        if record.exc_text:
            payload["error"] = record.exc_text
        return json.dumps(payload, ensure_ascii=False)


def configure(level: str, encoding: str, redactor: Redactor, stream: TextIO | None = None) -> None:
    logging.addLevelName(TRACE, "TRACE")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(RedactingFilter(redactor))
    handler.addFilter(FluxLevels())
    if encoding == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    # "error" lets warnings through: they are printed as errors (FluxLevels), never hidden.
    root.setLevel(logging.WARNING if level == "error" else LEVELS.get(level, logging.INFO))
    # aiohttp's access log would print webhook paths: keep it at debug only.
    logging.getLogger("aiohttp.access").setLevel(
        logging.DEBUG if level in ("debug", "trace") else logging.WARNING
    )


def safe(text: str) -> str:
    """For messages built from library exceptions: drop URLs (webhook URLs embed credentials)."""
    return redact_urls_in(text)


class StderrCapture:
    """Every write to file descriptor 2 becomes a log record, so ``--log-encoding=json`` holds on every path.

    C extensions (RE2's ``re2.cc:242] Error parsing ...``, abseil's preamble, the CEL bindings) and stray
    ``print(file=sys.stderr)`` write to fd 2 directly. ``start()`` points fd 2 at a pipe and a daemon thread
    turns each line into an ``error`` record of the ``stderr`` logger (redacted like any other record); the
    log handler itself writes to a duplicate of the original fd 2. Used by the process entry point only.
    """

    MAX_LINE = 8192

    def __init__(self) -> None:
        self.stream: TextIO | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> TextIO:
        original = os.dup(2)
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self.stream = os.fdopen(original, "w", buffering=1, encoding="utf-8", errors="replace")
        sys.stderr = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
        self._thread = threading.Thread(
            target=self._pump, args=(read_fd,), name="stderr-capture", daemon=True
        )
        self._thread.start()
        return self.stream

    @classmethod
    def _pump(cls, read_fd: int) -> None:
        target = logging.getLogger("stderr")
        with os.fdopen(read_fd, "rb") as pipe:
            for raw in pipe:
                line = raw[: cls.MAX_LINE].decode("utf-8", errors="replace").rstrip()
                if line:
                    target.error("%s", line)
