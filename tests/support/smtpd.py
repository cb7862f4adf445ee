"""A real SMTP server for the smtp provider's tests: aiosmtpd's protocol on 127.0.0.1, in the test's loop.

STARTTLS (``starttls=True``) or implicit TLS (``implicit=True``) with a ``TLSMaterial`` certificate (optionally
requiring a client certificate), AUTH (PLAIN and LOGIN, aiosmtpd's; one can be excluded), and scripted
refusals: ``refuse_data`` is a list of reply lines the next DATA commands get before ``250``
(``["451 4.7.1 greylisted"]``, ``["550 5.7.1 no"] * 10``). Every accepted message is kept in ``messages``.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import ssl
from dataclasses import dataclass, field
from email.message import EmailMessage
from types import TracebackType
from typing import Any, Self

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.support.capture import TLSMaterial


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes
    tls: bool
    login: str | None

    def parsed(self) -> EmailMessage:
        out = email.message_from_bytes(self.data, policy=email.policy.default)
        assert isinstance(out, EmailMessage)
        return out


@dataclass
class SMTPServer:
    tls: TLSMaterial | None = None
    starttls: bool = False
    implicit: bool = False
    require_client_cert: bool = False
    users: dict[str, str] = field(default_factory=dict)
    plain_text_auth: bool = False  # aiosmtpd refuses AUTH before STARTTLS unless this is set
    exclude_auth: tuple[str, ...] = ()
    refuse_data: list[str] = field(default_factory=list)
    refuse_rcpt: dict[str, str] = field(default_factory=dict)  # address -> reply line
    messages: list[Received] = field(default_factory=list)
    sessions: int = 0  # connections accepted
    data_commands: int = 0  # DATA commands answered (accepted or refused)
    data_seen: list[bytes] = field(default_factory=list)  # every DATA's content, refused ones too
    logins: list[tuple[str, str, bool]] = field(default_factory=list)  # (mechanism, login, success)
    _server: asyncio.Server | None = None
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    port: int = 0

    @property
    def address(self) -> str:
        return f"{'smtps' if self.implicit else 'smtp'}://127.0.0.1:{self.port}"

    def _context(self) -> ssl.SSLContext:
        assert self.tls is not None
        return self.tls.server_context(require_client_cert=self.require_client_cert)

    def _protocol(self) -> SMTP:
        self.sessions += 1
        return SMTP(
            self,
            hostname="mail.test",
            tls_context=self._context() if self.starttls else None,
            auth_require_tls=not (self.implicit or self.plain_text_auth),  # it knows STARTTLS only
            authenticator=self._authenticate if self.users else None,
            auth_exclude_mechanism=self.exclude_auth,
            loop=asyncio.get_running_loop(),
        )

    async def __aenter__(self) -> Self:
        ssl_ctx = self._context() if self.implicit else None
        self._server = await asyncio.get_running_loop().create_server(
            self._protocol, "127.0.0.1", 0, ssl=ssl_ctx
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def wait_for(self, n: int, timeout: float = 20) -> list[Received]:
        async with asyncio.timeout(timeout):
            while len(self.messages) < n:
                self._arrived.clear()
                await self._arrived.wait()
        return list(self.messages)

    # ---- aiosmtpd hooks ----

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        assert isinstance(auth_data, LoginPassword)
        login, password = auth_data.login.decode(), auth_data.password.decode()
        ok = self.users.get(login) == password
        self.logins.append((mechanism, login, ok))
        return AuthResult(success=ok, handled=False, auth_data=login)

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        if address in self.refuse_rcpt:
            return self.refuse_rcpt[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.data_commands += 1
        self.data_seen.append(envelope.original_content or b"")
        if self.refuse_data:
            return self.refuse_data.pop(0)
        content = envelope.original_content or b""
        login = session.auth_data if session.authenticated else None
        tls = session.ssl is not None or self.implicit
        self.messages.append(Received(envelope.mail_from or "", list(envelope.rcpt_tos), content, tls, login))
        self._arrived.set()
        return "250 2.0.0 queued"
