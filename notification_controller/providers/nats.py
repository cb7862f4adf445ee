"""``nats``: publish the event JSON on a NATS subject (reference §4.1, §4.5).

Server = the address (``nats://host:4222``, several comma-separated URLs allowed), subject = ``spec.channel``.
Authentication, first match wins (as Flux): the Secret's ``creds`` (a ``.creds`` file: user JWT + nkey
seed), else ``nkey`` (an nkey seed, ``SU...``), else ``username`` + ``password``. Each delivery connects,
publishes, flushes and closes, inside ``spec.timeout``; NATS is not HTTP, so the proxy, TLS and retry
settings of ``OutboundHTTP`` do not apply (Flux's SDK does not retry either).

``nats-py`` (with ``nkeys`` for creds and nkey authentication) is a core dependency, as NATS is built into
Flux; it is still imported lazily, on the first ``nats`` Provider, so the controller does not pay for it
otherwise, and a broken install fails that Provider with a clear configuration error, not the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from typing import Any, ClassVar

from ..api.event import Event
from ..api.provider import ProviderType
from ..errors import FailureReason, PermanentDeliveryError, ProviderConfigError, RetryableDeliveryError
from ..outbound import masked
from .base import DeliveryContext, ProviderOptions
from .message import with_text

log = logging.getLogger(__name__)

CLIENT_NAME = "NATS Provider Publisher"
INSTALL_HINT = "it is a dependency of notification-controller: reinstall the package"


def _import(module: str, what: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ProviderConfigError(
            f"the nats provider needs the Python package '{what}': {INSTALL_HINT}"
        ) from exc


def nats_auth(opts: ProviderOptions) -> tuple[str, dict[str, Any]]:
    """``(method, connect kwargs)``: creds > nkey > username/password > none. Validates the material."""
    creds = opts.secret_data.get("creds") or b""
    seed = opts.secret_data.get("nkey") or b""
    if creds:
        text = creds.decode("utf-8", errors="replace")
        if "BEGIN NATS USER JWT" not in text or "BEGIN USER NKEY SEED" not in text:
            raise ProviderConfigError(
                "invalid NATS user credentials in the Secret's 'creds' key: expected a .creds file "
                "with a user JWT and an nkey seed"
            )
        _import("nkeys", "nkeys")
        client = _import("nats.aio.client", "nats-py")
        return "creds", {"user_credentials": client.RawCredentials(text)}
    if seed:
        nkeys = _import("nkeys", "nkeys")
        try:
            keypair = nkeys.from_seed(bytearray(seed.strip()))
            keypair.wipe()
        except Exception as exc:  # nkeys raises its own error classes (ErrInvalidSeed...) and ValueError
            raise ProviderConfigError(
                "error parsing nkey seed: invalid seed in the Secret's 'nkey' key"
            ) from exc
        return "nkey", {"nkeys_seed_str": seed.decode("ascii", errors="replace").strip()}
    if opts.username and opts.password_text:
        return "userpass", {"user": opts.username, "password": opts.password_text}
    return "none", {}


class NATSNotifier:
    type: ClassVar[ProviderType] = ProviderType.NATS
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = False

    def __init__(self, opts: ProviderOptions) -> None:
        if not opts.address:
            raise ProviderConfigError("NATS server (address) cannot be empty")
        if not opts.channel:
            raise ProviderConfigError("NATS subject (channel) cannot be empty")
        self.opts = opts
        self.servers = [s.strip() for s in opts.address.split(",") if s.strip()]
        self.subject = opts.channel
        self._nats = _import("nats", "nats-py")
        self._client_module = _import("nats.aio.client", "nats-py")
        self.auth_method, self._auth = nats_auth(opts)

    def build_payload(self, event: Event) -> bytes:
        """The event exactly as Flux publishes it (``json.Marshal(event)``)."""
        return event.to_go_json()

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        payload = self.build_payload(with_text(event, ctx.template))
        prefix = f"error publishing event to subject {self.subject}"
        masks = self.opts.masks()
        try:
            async with asyncio.timeout(self.opts.timeout):
                await self._publish(payload)
        except TimeoutError:
            raise RetryableDeliveryError(
                f"{prefix}: timed out after {self.opts.timeout:g}s",
                reason="timeout",
                failure=FailureReason.TIMEOUT,
            ) from None
        except _ConnectError as exc:
            cause = masked(str(exc.__cause__ or exc), masks)
            error = RetryableDeliveryError if exc.retryable else PermanentDeliveryError
            failure = FailureReason.CONNECTION if exc.retryable else FailureReason.AUTH
            raise error(
                f"{prefix}: error connecting to server: {cause}", reason=exc.reason, failure=failure
            ) from None
        except _PublishError as exc:
            cause = masked(str(exc.__cause__ or exc), masks)
            raise RetryableDeliveryError(
                f"{prefix}: error publishing message to server: {cause}",
                reason="nats_publish",
                failure=FailureReason.CONNECTION,
            ) from None

    async def _publish(self, payload: bytes) -> None:
        errors = self._nats.errors

        seen: list[Exception] = []

        async def quiet(exc: Exception) -> None:
            seen.append(exc)
            log.debug("nats client error: %s", type(exc).__name__)

        client = self._client_module.Client()
        try:
            try:
                await client.connect(
                    servers=self.servers,
                    name=CLIENT_NAME,
                    allow_reconnect=False,
                    # nats-py drops a server from its pool only after more than this many failures.
                    max_reconnect_attempts=1,
                    reconnect_time_wait=0.2,
                    connect_timeout=max(1, int(self.opts.timeout)),
                    error_cb=quiet,
                    **self._auth,
                )
            except Exception as exc:  # any library failure stays inside this adapter
                cause = seen[0] if seen else (client.last_error or exc)
                auth_failed = (
                    isinstance(cause, errors.AuthorizationError) or "authorization" in str(cause).lower()
                )
                raise _ConnectError(not auth_failed, "nats_auth" if auth_failed else "connection") from cause
            try:
                await client.publish(self.subject, payload)
                await client.flush(timeout=max(1, int(self.opts.timeout)))
            except Exception as exc:  # any library failure stays inside this adapter
                raise _PublishError() from exc
            if client.last_error is not None:
                raise _PublishError() from client.last_error
        finally:
            with contextlib.suppress(Exception):
                await client.close()


class _ConnectError(Exception):
    def __init__(self, retryable: bool, reason: str) -> None:
        super().__init__(reason)
        self.retryable = retryable
        self.reason = reason


class _PublishError(Exception):
    pass
