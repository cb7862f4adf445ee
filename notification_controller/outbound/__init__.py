"""THE outbound HTTP path, for providers, hooks and OIDC discovery (``client.py``).

One HTTP/1.1 client with a keep-alive pool (``h1client.py``: direct, CONNECT, absolute-form and SOCKS
requests), proxies, TLS, same-origin redirects, response bodies capped,
error texts masked, and one retry/deadline loop: ``OutboundHTTP.send`` retries within a time budget
(``spec.timeout`` for a delivery, shared by every request of a multi-request delivery through ``Budget``).
The retry decision is pure (``retry.py``); a failure is a ``DeliveryError`` with ``status``, a bounded
``body`` excerpt and a ``FailureReason``, so no caller parses a message.
"""

from .client import (
    ATTEMPT_LOG,
    IDEMPOTENCY_KEY,
    TRACEPARENT,
    AttemptLog,
    Budget,
    OutboundHTTP,
    RetryPolicy,
    masked,
)
from .request import OutboundRequest, OutboundResponse, path_segment, shared_headers

__all__ = [
    "ATTEMPT_LOG",
    "IDEMPOTENCY_KEY",
    "TRACEPARENT",
    "AttemptLog",
    "Budget",
    "OutboundHTTP",
    "OutboundRequest",
    "OutboundResponse",
    "RetryPolicy",
    "masked",
    "path_segment",
    "shared_headers",
]
