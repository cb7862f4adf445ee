"""Structured logs (``--log-encoding json|console``) with Flux's levels, keys and a redaction filter.

Levels: ``trace`` (5), ``debug``, ``info``, ``error``. Every record passes through a ``Redactor`` that
knows the current Secret values, as the last line of defence behind ``SecretValue`` and masking.

Keys: a line about an object carries the keys a Flux controller's line carries, so ``jq 'select(.name ==
"x")'`` and log pipelines built for Flux filter ours: controller-runtime's reconciler logger
(``controller``, ``controllerGroup``, ``controllerKind``, ``<Kind>: {name, namespace}``, ``namespace``,
``name``, ``reconcileID``; pkg/internal/controller and pkg/builder of controller-runtime), Flux's event
recorder's ``reconciler kind`` (fluxcd/pkg runtime/events), and ``kind``. ``object_fields`` builds them;
``log_context`` puts them on every line logged inside a reconcile (a context variable, as controller-runtime
puts them on the reconcile's ``ctx`` logger), so a line need not repeat them and none is missed.

Local mode writes Kubernetes Events to the log (the only place to see them). A line the controller already
logged about the same thing (a failed delivery, a drop, a dead letter) is not repeated by its Event:
``event_already_logged`` marks the emitting task, and the local cluster then logs the Event at debug.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from .core.redact import Redactor, redact_urls_in

TRACE = 5
LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR}
GROUP = "notification.toolkit.fluxcd.io"

_CONTEXT: contextvars.ContextVar[Mapping[str, object] | None] = contextvars.ContextVar(
    "log_context", default=None
)
_EVENT_LOGGED: contextvars.ContextVar[bool] = contextvars.ContextVar("event_already_logged", default=False)


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
        context = _CONTEXT.get()
        if context:  # the keys of the reconcile this line was logged in (explicit keys win)
            extra = {**context, **extra} if isinstance(extra, dict) else dict(context)
        if isinstance(extra, dict):  # fields(error=...) reaches the JSON line as its own key
            record.__dict__["fields"] = {key: self._redact(value) for key, value in extra.items()}
        return True

    def _redact(self, value: object) -> object:
        if isinstance(value, int | float | bool):
            return value
        if isinstance(value, Mapping):  # controller-runtime's {"name", "namespace"} object reference
            return {str(k): self.redactor(str(v)) for k, v in value.items()}
        return self.redactor(str(value))


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


def object_fields(kind: str, namespace: str, name: str, **more: object) -> dict[str, object]:
    """The keys of a Flux controller's log line about one object (see the module docstring); ``more``
    adds others (``error``, ``provider``...). For ``fields(**object_fields(...))`` or ``log_context``."""
    keys: dict[str, object] = {
        "controller": kind.lower(),
        "controllerGroup": GROUP,
        "controllerKind": kind,
        kind: {"name": name, "namespace": namespace},
        "namespace": namespace,
        "name": name,
        "kind": kind,
        "reconciler kind": kind,
    }
    keys.update(more)
    return keys


@contextlib.contextmanager
def log_context(kind: str, namespace: str, name: str) -> Iterator[str]:
    """Every line logged inside carries ``object_fields`` of the object and a new ``reconcileID`` (a
    UUID, as controller-runtime gives each reconcile); yields the id."""
    reconcile_id = str(uuid.uuid4())
    token = _CONTEXT.set(object_fields(kind, namespace, name, reconcileID=reconcile_id))
    try:
        yield reconcile_id
    finally:
        _CONTEXT.reset(token)


def mark_event_logged() -> None:
    """The current task's Events repeat a line already logged: the local cluster logs them at debug.
    Call it in the task that emits them (a context variable: it ends with the task)."""
    _EVENT_LOGGED.set(True)


def event_already_logged() -> bool:
    return _EVENT_LOGGED.get()


class ObjectLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger whose every line carries ``object_fields`` of one object (plus ``extra=fields(...)``)."""

    def __init__(self, logger: logging.Logger, kind: str, namespace: str, name: str, **more: object) -> None:
        super().__init__(logger, object_fields(kind, namespace, name, **more))

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra = kwargs.get("extra") or {}
        own = extra.get("fields")
        base = dict(self.extra or {})
        kwargs["extra"] = {**extra, "fields": {**base, **(own if isinstance(own, dict) else {})}}
        return msg, kwargs


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
                keep = isinstance(value, str | int | float | bool) or (
                    isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
                )
                payload.setdefault(str(key), value if keep else str(value))
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
