"""The server span of one request (``--otlp-endpoint``, issue 28), the same for the event and the receiver
listeners: it continues the sender's W3C ``traceparent``, is the current span while the handler runs (and
in the task that finishes a handler which had to wait: a durable admission, a verification, a trigger), and
ends with the answer's status — 499 when the client left, an error from 500 on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from ..tracing import CURRENT, Span, SpanKind, Tracer
from ..tracing import Value as SpanValue
from .http1 import Request, Response

CLIENT_CLOSED = 499  # the code of a request whose client went away (nginx's convention), never a 5xx

Handler = Callable[[Request], "Response | Coroutine[Any, Any, Response]"]


def serve_traced(
    tracer: Tracer, name: str, request: Request, attributes: Mapping[str, SpanValue], handle: Handler
) -> Response | Coroutine[Any, Any, Response]:
    """``handle(request)`` in a server span named ``name`` (see the module docstring)."""
    span = tracer.start(
        name, parent=request.header("traceparent"), kind=SpanKind.SERVER, attributes=attributes
    )
    token = CURRENT.set(span)
    try:
        result = handle(request)
    except BaseException as exc:
        span.fail(type(exc).__name__)
        span.end()
        raise
    finally:
        CURRENT.reset(token)
    if isinstance(result, Response):
        answered(span, result.status)
        return result
    return _finish(result, span)


async def _finish(pending: Coroutine[Any, Any, Response], span: Span) -> Response:
    token = CURRENT.set(span)  # this task's context: what the handler awaits is part of the trace
    status = 500
    try:
        response = await pending
        status = response.status
        return response
    except asyncio.CancelledError:
        status = CLIENT_CLOSED
        raise
    finally:
        CURRENT.reset(token)
        answered(span, status)


def answered(span: Span, status: int) -> None:
    span.set("http.response.status_code", status)
    if status >= 500:
        span.fail(str(status))
    span.end()
