"""Structured logs (``--log-encoding json|console``) with Flux's levels and a redaction filter.

Levels: ``trace`` (5), ``debug``, ``info``, ``error``. Every record passes through a ``Redactor`` that
knows the current Secret values, as the last line of defence behind ``SecretValue`` and masking.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from .core.redact import Redactor, redact_urls_in

TRACE = 5
LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR}


class RedactingFilter(logging.Filter):
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
        return True


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "level": record.levelname.lower() if record.levelno != TRACE else "trace",
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_text:
            payload["error"] = record.exc_text
        return json.dumps(payload, ensure_ascii=False)


def configure(level: str, encoding: str, redactor: Redactor) -> None:
    logging.addLevelName(TRACE, "TRACE")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter(redactor))
    if encoding == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS.get(level, logging.INFO))
    # aiohttp's access log would print webhook paths: keep it at debug only.
    logging.getLogger("aiohttp.access").setLevel(
        logging.DEBUG if level in ("debug", "trace") else logging.WARNING
    )


def safe(text: str) -> str:
    """For messages built from library exceptions: drop URLs (webhook URLs embed credentials)."""
    return redact_urls_in(text)
