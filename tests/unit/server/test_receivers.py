"""``ProtocolErrorLog`` and ``HookPathFilter`` (server/receivers.py, issue 23 item 17): what aiohttp's parser
refuses is a client mistake (counted, debug only, path redacted); anything else aiohttp reports stays an
error with its traceback.
"""

from __future__ import annotations

import logging

import pytest
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from prometheus_client import CollectorRegistry

from notification_controller.server.receivers import HookPathFilter, ProtocolErrorLog, ReceiverMetrics

HOOK = "/hook/" + "ab12cd34" * 8


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logger() -> logging.Logger:
    log = logging.getLogger("test.receiver.protocol")
    log.handlers[:] = []
    log.propagate = False
    return log


def malformed_count(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value(
        "notification_receiver_requests_total", {"type": "unknown", "outcome": "malformed"}
    )
    return value or 0.0


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
def test_parser_errors_are_counted_and_debug_only(logger: logging.Logger, level: int) -> None:
    registry = CollectorRegistry()
    handler = Records()
    logger.addHandler(handler)
    logger.setLevel(level)
    log = ProtocolErrorLog(ReceiverMetrics(registry), logger)
    for exc in (
        BadHttpMessage(f"Bad status line: b'POST {HOOK} HTTP/9.9'"),
        web.RequestPayloadError("Not enough data to satisfy transfer length header."),
    ):
        log.exception("Error handling request from %s", "127.0.0.1", exc_info=exc)
    assert malformed_count(registry) == 2
    assert all(r.levelno == logging.DEBUG and r.exc_info is None for r in handler.records)
    assert len(handler.records) == (2 if level == logging.DEBUG else 0)
    assert all(
        HOOK not in r.getMessage() and "/hook/ab12cd34…" in r.getMessage() for r in handler.records[:1]
    )


def test_other_exceptions_stay_errors(logger: logging.Logger) -> None:
    registry = CollectorRegistry()
    handler = Records()
    logger.addHandler(handler)
    log = ProtocolErrorLog(ReceiverMetrics(registry), logger)
    try:
        raise RuntimeError("a bug in a handler")
    except RuntimeError as exc:
        log.exception("Unhandled exception", exc_info=exc)
    [record] = handler.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert malformed_count(registry) == 0
    log.debug("passed through %s", "as is")
    assert handler.records[-1].getMessage() == "passed through as is"


def test_filter_demotes_parser_errors_on_other_runners(logger: logging.Logger) -> None:
    """A runner without ``ProtocolErrorLog`` (aiohttp's own logger): the record aiohttp makes at ERROR is
    dropped unless the logger is enabled for debug, and then it is a DEBUG line without traceback."""
    handler = Records()
    logger.addHandler(handler)
    logger.addFilter(HookPathFilter())
    logger.setLevel(logging.INFO)
    logger.error("Error handling request", exc_info=BadHttpMessage("Invalid header token"))
    assert handler.records == []
    logger.setLevel(logging.DEBUG)
    logger.error("Error handling request", exc_info=BadHttpMessage(f"Invalid header in {HOOK}"))
    [record] = handler.records
    assert record.levelno == logging.DEBUG and record.exc_info is None
    assert HOOK not in record.getMessage()
