"""The exception tree of the controller.

Library exceptions (aiohttp, kubernetes_asyncio, pydantic, yaml) never leave the adapter that called
the library: they are wrapped in one of these, with the cause chained (``raise X from exc``).
Messages are safe to log: they never contain a secret value (see ``core.redact``).

    ControllerError
    ├── ConfigError                  a manifest or flag is invalid (user must fix; never retried)
    │   ├── ManifestError            a YAML document could not be turned into an object
    │   └── ProviderConfigError      a Provider + Secret cannot produce a working notifier
    ├── ObjectReferenceError         something an object points at does not exist (Secret, Provider)
    ├── DeliveryError                sending a notification failed: .status, .body (masked excerpt) and
    │   │                            .failure (FailureReason) say how, so no caller parses the message
    │   ├── RetryableDeliveryError   the attempt may succeed later (5xx, 429, connection error)
    │   └── PermanentDeliveryError   retrying will not help (4xx, TLS verification, redirect refused)
    ├── VerificationError            a webhook request failed authentication/validation (→ 400/401)
    ├── KubeError                    a Kubernetes API call failed (wrapped ApiException)
    ├── StoreError                   the store (--store: sqlite file, NATS JetStream) is unreachable (→ 503)
    ├── HookError                    a user hook failed (see docs/hooks.md)
    │
    │   defined next to the code that raises them (the module owns its failure vocabulary):
    ├── core.cel.CELError            a CEL expression failed
    │   ├── CELCompileError          invalid for its environment (syntax, references, types, limits)
    │   └── CELEvalError             failed on one input, or produced the wrong type
    ├── api.event.EventDecodeError   + ValueError: an event payload is not a valid Flux event (→ 400)
    ├── api.crdgen.CRDGenerationError  a model has no structural-schema equivalent (build time)
    ├── receivers.oidc.OIDCError     an OIDC token or provider failed a check
    ├── receivers.signatures.SignatureError  + ValueError: a signature missing or wrong
    ├── receivers.base.JSONShapeError        + ValueError: a body is not the Go struct expected
    ├── receivers.targets.RequestBodyError   + ValueError: the body must be JSON for the filters
    └── receivers.targets.FilterError        + ValueError: a filter does not compile (→ 500)

The classes marked ``+ ValueError`` keep ValueError as a second base: callers (and libraries) that catch
ValueError for bad input still do. Private exceptions used for control flow inside one module (for example
``kube.leader._LeaseLost``) are not part of the tree.
"""

from __future__ import annotations

import enum


class ControllerError(Exception):
    """Base of every error raised by this package."""


class ConfigError(ControllerError):
    """Invalid configuration: the user must change a manifest or a flag."""

    def __init__(self, message: str, *, reason: str = "ValidationFailed") -> None:
        super().__init__(message)
        self.reason = reason


class ManifestError(ConfigError):
    """A document of a manifests directory could not be loaded."""

    def __init__(
        self, message: str, *, source: str = "", index: int = 0, field: str = "", line: int = 0
    ) -> None:
        # ``line`` (1-based, in the file) when the loader knows it: "file:line", as compilers and ``check``
        # write it; else the 0-based document index, "file[index]" (issue 25 item 4).
        where = source + ((f":{line}" if line else f"[{index}]") if source else "")
        prefix = f"{where}: " if where else ""
        if field:
            prefix += f"{field}: "
        super().__init__(prefix + message, reason="ValidationFailed")
        self.source = source
        self.index = index
        self.field = field
        self.line = line


class ProviderConfigError(ConfigError):
    """A Provider (with its Secret) cannot be turned into a notifier."""


class ObjectReferenceError(ControllerError):
    """An object referenced by another one is missing or unreadable."""

    def __init__(self, message: str, *, reason: str = "ReferenceNotFound") -> None:
        super().__init__(message)
        self.reason = reason


class FailureReason(enum.StrEnum):
    """What kind of failure a ``DeliveryError`` is (as Alertmanager's notify ``Reason``), so callers decide
    on a value instead of parsing a message: retry or not, count, show. Every raise site names one (the
    constructors require it: mypy finds a site that does not); there is no catch-all "other"."""

    CLIENT_ERROR = "client_error"  # the receiver refused the request (4xx other than 429)
    SERVER_ERROR = "server_error"  # 5xx, or an answer that is not readable HTTP
    RATE_LIMITED = "rate_limited"  # 429
    TIMEOUT = "timeout"  # no answer within the delivery's budget (or a transport's connect timer)
    CONNECTION = "connection"  # refused, unreachable, reset, closed before an answer
    DNS = "dns"  # the host name did not resolve
    PROXY = "proxy"  # the proxy was unreachable or refused the tunnel (HTTP CONNECT, SOCKS)
    TLS = "tls"  # certificate verification, handshake
    REDIRECT = "redirect"  # a redirect to another host refused, or a loop
    INVALID_REQUEST = "invalid_request"  # a URL, header or event this delivery cannot send
    INVALID_CONFIG = "invalid_config"  # the Provider (or its Secret) cannot work for this event
    AUTH = "auth"  # a credential could not be obtained (workload identity, GitHub App token)
    PROVIDER_ERROR = "provider_error"  # the receiver answered 2xx but said it failed (Slack's ok:false)
    INTERNAL = "internal"  # a bug


class DeliveryError(ControllerError):
    """Sending a notification failed.

    ``failure`` is the class of the failure, required at every raise site: callers decide on it; ``reason``
    a finer low-cardinality label (``http_503``, ``tls_verification``...; the failure's value when not
    given) that labels ``notification_delivery_failed_total`` as it always did; ``status`` the HTTP status when the receiver answered; ``body`` a bounded, masked excerpt of the
    answer (the first KiB)."""

    def __init__(
        self,
        message: str,
        *,
        failure: FailureReason,
        reason: str = "",
        status: int | None = None,
        body: str = "",
    ) -> None:
        super().__init__(message)
        self.reason = reason or failure.value
        self.failure = failure
        self.status = status
        self.body = body


class RetryableDeliveryError(DeliveryError):
    """A delivery attempt failed in a way that may succeed later."""

    def __init__(
        self,
        message: str,
        *,
        failure: FailureReason,
        reason: str = "",
        status: int | None = None,
        body: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, reason=reason, failure=failure, status=status, body=body)
        self.retry_after = retry_after


class PermanentDeliveryError(DeliveryError):
    """A delivery attempt failed in a way that retrying cannot fix."""


def rewrap(exc: DeliveryError, prefix: str) -> DeliveryError:
    """The same error (kind, reason, failure, status, body) with ``prefix: `` in front of its message."""
    message = f"{prefix}: {exc}"
    reason, failure, status, body = exc.reason, exc.failure, exc.status, exc.body
    if isinstance(exc, RetryableDeliveryError):
        return RetryableDeliveryError(
            message, reason=reason, failure=failure, status=status, body=body, retry_after=exc.retry_after
        )
    cls = PermanentDeliveryError if isinstance(exc, PermanentDeliveryError) else DeliveryError
    return cls(message, reason=reason, failure=failure, status=status, body=body)


class VerificationError(ControllerError):
    """A webhook request did not pass its receiver's checks. ``status`` is the HTTP answer."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class KubeError(ControllerError):
    """A Kubernetes API call failed. ``status`` is the HTTP status (0 when no answer)."""

    def __init__(self, message: str, *, status: int = 0, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def conflict(self) -> bool:
        return self.status == 409


class StoreError(ControllerError):
    """The durable store (``store/``, the ``--store`` flag) could not read or write: the caller answers 503, never 202-and-lose."""


class HookError(ControllerError):
    """A hook answered with an error, timed out, or could not be reached."""

    def __init__(self, message: str, *, permanent: bool = False, proceed: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.proceed = proceed
