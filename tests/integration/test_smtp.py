"""The smtp provider against a real SMTP server (aiosmtpd on 127.0.0.1): STARTTLS, implicit TLS, mutual TLS,
AUTH PLAIN and LOGIN, refusals (5xx permanent, 4xx retried), and one delivery through the real controller.

The notifier is built through the production path (``resolve_options`` → ``create_notifier``) from a Provider
and its Secrets, as the conformance kit builds the HTTP types; the server is ``tests/support/smtpd.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email
import email.policy
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from notification_controller.api.common import Secret
from notification_controller.api.event import Event
from notification_controller.api.provider import Provider
from notification_controller.errors import (
    DeliveryError,
    FailureReason,
    PermanentDeliveryError,
    RetryableDeliveryError,
)
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.providers.base import DeliveryContext
from notification_controller.providers.options import resolve_options
from notification_controller.providers.registry import create_notifier
from notification_controller.providers.smtp import SMTPNotifier
from notification_controller.settings import StoreSettings
from tests.integration.appkit import metric, post_event, running_app, write
from tests.providers.build import SAMPLE_EVENT
from tests.support.capture import TLSMaterial, mint_tls
from tests.support.smtpd import SMTPServer

FAST = RetryPolicy(max_attempts=5, wait_min=0.01, wait_max=0.05)
PASSWORD = "smtp-canary-pw-7Hq2"


@pytest.fixture(scope="module")
def pki() -> TLSMaterial:
    return mint_tls()


@pytest.fixture
async def ctx() -> AsyncIterator[DeliveryContext]:
    http = OutboundHTTP(FAST)
    await http.start()
    try:
        yield DeliveryContext(http=http)
    finally:
        await http.close()


def build(
    address: str,
    *,
    login: str | None = None,
    password: str | None = None,
    tls: TLSMaterial | None = None,
    client_cert: bool = False,
    channel: str = "ops@example.com, dev@example.org",
    timeout: str = "10s",
) -> SMTPNotifier:
    spec: dict[str, Any] = {
        "type": "smtp",
        "address": address,
        "channel": channel,
        "username": "Flux <flux@example.com>",
        "timeout": timeout,
    }
    secrets: dict[str, Secret] = {}
    data: dict[str, str] = {}
    if login is not None:
        data["username"] = login
    if password is not None:
        data["password"] = password
    if data:
        spec["secretRef"] = {"name": "mail"}
        secrets["mail"] = secret("mail", data)
    if tls is not None:
        spec["certSecretRef"] = {"name": "ca"}
        certs = {"ca.crt": tls.ca_pem.decode()}
        if client_cert:
            certs |= {"tls.crt": tls.client_cert_pem.decode(), "tls.key": tls.client_key_pem.decode()}
        secrets["ca"] = secret("ca", certs)
    provider = Provider.model_validate(
        {"metadata": {"name": "mail", "namespace": "flux-system"}, "spec": spec}
    )
    notifier = create_notifier(resolve_options(provider, lambda ns, name: secrets.get(name)))
    assert isinstance(notifier, SMTPNotifier)
    return notifier


def secret(name: str, data: dict[str, str]) -> Secret:
    return Secret.from_manifest({"metadata": {"name": name, "namespace": "flux-system"}, "stringData": data})


async def failure(notifier: SMTPNotifier, ctx: DeliveryContext, event: Event = SAMPLE_EVENT) -> DeliveryError:
    with pytest.raises(DeliveryError) as info:
        await notifier.post(event, ctx)
    return info.value


# ---- TLS and AUTH --------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "LOGIN"])
async def test_starttls_and_auth_deliver_one_multipart_email(
    pki: TLSMaterial, ctx: DeliveryContext, mechanism: str
) -> None:
    other = {"PLAIN": "LOGIN", "LOGIN": "PLAIN"}[mechanism]
    async with SMTPServer(tls=pki, starttls=True, users={"mailer": PASSWORD}, exclude_auth=(other,)) as srv:
        notifier = build(srv.address, login="mailer", password=PASSWORD, tls=pki)
        await notifier.post(SAMPLE_EVENT, ctx)
    assert srv.logins == [(mechanism, "mailer", True)]
    [got] = srv.messages
    assert got.tls and got.login == "mailer"
    assert (got.mail_from, got.rcpt_tos) == ("flux@example.com", ["ops@example.com", "dev@example.org"])
    mail = got.parsed()
    assert mail["From"] == "Flux <flux@example.com>" and mail["To"] == "ops@example.com, dev@example.org"
    assert mail["Subject"] == "[info] gitrepository/webapp.gitops-system: ReconciliationSucceeded"
    assert re.fullmatch(r"<[0-9a-f]{32}@example\.com>", mail["Message-ID"])
    kinds = [p.get_content_type() for p in mail.walk()]
    assert kinds == ["multipart/alternative", "text/plain", "text/html"]
    body = mail.get_body(("plain",))
    assert body is not None and "stored artifact for revision 'main@sha1:0123456'" in body.get_content()


async def test_smtps_with_a_client_certificate(pki: TLSMaterial, ctx: DeliveryContext) -> None:
    """Implicit TLS (RFC 8314) with mutual TLS from certSecretRef's tls.crt/tls.key, and AUTH on top."""
    async with SMTPServer(
        tls=pki, implicit=True, require_client_cert=True, users={"mailer": PASSWORD}
    ) as srv:
        await build(srv.address, login="mailer", password=PASSWORD, tls=pki, client_cert=True).post(
            SAMPLE_EVENT, ctx
        )
    [got] = srv.messages
    assert got.tls and got.login == "mailer" and srv.address.startswith("smtps://")


@pytest.mark.parametrize("implicit", [True, False], ids=["smtps", "starttls"])
async def test_an_untrusted_certificate_is_permanent_and_not_retried(
    pki: TLSMaterial, ctx: DeliveryContext, implicit: bool
) -> None:
    async with SMTPServer(tls=pki, implicit=implicit, starttls=not implicit) as srv:
        error = await failure(build(srv.address, password=PASSWORD), ctx)  # no certSecretRef: system roots
    assert isinstance(error, PermanentDeliveryError), error
    assert (error.failure, error.reason) == (FailureReason.TLS, "tls_verification")
    assert "certificate verify failed" in str(error) or "verification failed" in str(error)
    assert srv.sessions == 1 and srv.messages == [] and srv.logins == []


async def test_starttls_required_refuses_a_server_that_does_not_offer_it(ctx: DeliveryContext) -> None:
    async with SMTPServer() as srv:
        error = await failure(build(srv.address + "?starttls=required"), ctx)
    assert isinstance(error, PermanentDeliveryError)
    assert (error.failure, error.reason) == (FailureReason.TLS, "starttls_unavailable")
    assert srv.data_commands == 0 and srv.sessions == 1


async def test_without_starttls_the_password_is_not_sent(ctx: DeliveryContext) -> None:
    """A server that offers no STARTTLS (or a network that strips it) never sees the password, unless it is
    on a loopback address (Go's net/smtp rule); an unauthenticated relay still gets the email."""
    async with SMTPServer(users={"mailer": PASSWORD}, plain_text_auth=True) as srv:
        loopback = build(srv.address, login="mailer", password=PASSWORD)
        assert loopback.endpoint.plain_auth  # 127.0.0.1
        await loopback.post(SAMPLE_EVENT, ctx)
        assert srv.logins == [("PLAIN", "mailer", True)] and len(srv.messages) == 1
        remote = build(srv.address, login="mailer", password=PASSWORD)
        remote.endpoint = dataclasses.replace(remote.endpoint, plain_auth=False)  # as for mail.example.com
        error = await failure(remote, ctx)
        assert isinstance(error, PermanentDeliveryError)
        assert (error.failure, error.reason) == (FailureReason.TLS, "auth_without_tls")
        assert len(srv.logins) == 1 and srv.data_commands == 1  # no AUTH, no DATA on the second session
        relay = build(srv.address)  # no credentials: no TLS needed
        relay.endpoint = dataclasses.replace(relay.endpoint, plain_auth=False)
        await relay.post(SAMPLE_EVENT, ctx)
        assert len(srv.messages) == 2


async def test_a_wrong_password_is_permanent_and_never_shown(
    pki: TLSMaterial, ctx: DeliveryContext, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with SMTPServer(tls=pki, starttls=True, users={"mailer": "the-right-one"}) as srv:
        error = await failure(build(srv.address, login="mailer", password=PASSWORD, tls=pki), ctx)
    assert isinstance(error, PermanentDeliveryError)
    assert error.failure is FailureReason.AUTH and error.reason == "smtp_5xx" and "535" in str(error)
    # aiosmtplib tries each mechanism the server offers, in one session; nothing is retried
    assert srv.logins == [("PLAIN", "mailer", False), ("LOGIN", "mailer", False)] and srv.sessions == 1
    assert PASSWORD not in str(error) and PASSWORD not in caplog.text


# ---- refusals and retries ------------------------------------------------------------------------


async def test_a_5xx_is_permanent_after_one_attempt(ctx: DeliveryContext) -> None:
    async with SMTPServer(refuse_data=["550 5.7.1 message rejected by policy"] * 5) as srv:
        notifier = build(srv.address)
        error = await failure(notifier, ctx)
    assert isinstance(error, PermanentDeliveryError)
    assert (error.failure, error.reason) == (FailureReason.CLIENT_ERROR, "smtp_5xx")
    assert "550 5.7.1 message rejected by policy" in str(error)
    assert srv.data_commands == 1 and notifier.attempts == 1


async def test_a_4xx_is_retried_then_delivered_with_one_message_id(ctx: DeliveryContext) -> None:
    async with SMTPServer(refuse_data=["451 4.7.1 greylisted, try again later"] * 2) as srv:
        notifier = build(srv.address)
        await notifier.post(SAMPLE_EVENT, ctx)
    assert srv.data_commands == 3 and notifier.attempts == 3 and len(srv.messages) == 1
    ids = {email.message_from_bytes(d, policy=email.policy.default)["Message-ID"] for d in srv.data_seen}
    assert len(ids) == 1  # a receiver can tell a resent email from a new one


async def test_a_4xx_that_lasts_is_retried_within_the_budget_only(ctx: DeliveryContext) -> None:
    async with SMTPServer(refuse_data=["421 4.3.2 service shutting down"] * 1000) as srv:
        notifier = build(srv.address, timeout="2s")
        loop = asyncio.get_running_loop()
        started = loop.time()
        error = await failure(notifier, ctx)
        elapsed = loop.time() - started
    assert isinstance(error, RetryableDeliveryError) and error.reason in ("smtp_4xx", "timeout")
    assert notifier.attempts == FAST.max_attempts and elapsed < 2.5


async def test_recipients_refused(ctx: DeliveryContext, caplog: pytest.LogCaptureFixture) -> None:
    """Some refused: delivered to the others (a resend would duplicate theirs), logged at info. All refused:
    permanent only when every refusal is a 5xx."""
    caplog.set_level(logging.INFO, logger="notification_controller.providers.smtp")
    async with SMTPServer(refuse_rcpt={"dev@example.org": "550 5.1.1 no such user"}) as srv:
        await build(srv.address).post(SAMPLE_EVENT, ctx)
        assert srv.messages[0].rcpt_tos == ["ops@example.com"]
        assert "refused some recipients: dev@example.org (550)" in caplog.text
        error = await failure(build(srv.address, channel="dev@example.org"), ctx)
        assert isinstance(error, PermanentDeliveryError) and error.reason == "smtp_5xx"
    async with SMTPServer(
        refuse_rcpt={"a@example.com": "550 no", "b@example.com": "452 4.2.2 mailbox full"}
    ) as srv:
        notifier = build(srv.address, channel="a@example.com,b@example.com")
        error = await failure(notifier, ctx)
        assert isinstance(error, RetryableDeliveryError) and error.reason == "smtp_4xx"
        assert notifier.attempts == FAST.max_attempts


async def test_connection_refused_is_retried(ctx: DeliveryContext) -> None:
    async with SMTPServer() as srv:
        address = srv.address  # the port is free once the server is gone
    notifier = build(address, timeout="3s")
    error = await failure(notifier, ctx)
    assert isinstance(error, RetryableDeliveryError)
    assert (error.failure, error.reason) == (FailureReason.CONNECTION, "connection")
    assert notifier.attempts == FAST.max_attempts


# ---- through the real controller -----------------------------------------------------------------


def objects(tmp: Path, greylisting: SMTPServer, refusing: SMTPServer) -> Path:
    directory = tmp / "manifests"
    directory.mkdir()
    docs = []
    for name, srv in (("greylisting", greylisting), ("refusing", refusing)):
        docs.append(
            f"""\
            apiVersion: v1
            kind: Secret
            metadata: {{name: {name}, namespace: flux-system}}
            stringData: {{username: mailer, password: {PASSWORD}}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Provider
            metadata: {{name: {name}, namespace: flux-system}}
            spec:
              type: smtp
              address: {srv.address}
              channel: ops@example.com
              username: flux@example.com
              secretRef: {{name: {name}}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Alert
            metadata: {{name: {name}, namespace: flux-system}}
            spec:
              providerRef: {{name: {name}}}
              eventSources: [{{kind: Kustomization, name: '*'}}]
            """
        )
    write(directory, "objects.yaml", "---\n".join(docs))
    return directory


async def test_through_the_controller_a_4xx_is_retried_and_a_5xx_is_a_dead_letter(tmp_path: Path) -> None:
    event = (Path(__file__).resolve().parents[2] / "examples" / "event.json").read_bytes()
    store = StoreSettings(url=f"sqlite:{tmp_path / 'state.db'}", retry_base=0.05, retry_cap=0.2)
    async with (
        SMTPServer(users={"mailer": PASSWORD}, plain_text_auth=True, refuse_data=["451 4.7.1 later"]) as grey,
        SMTPServer(
            users={"mailer": PASSWORD}, plain_text_auth=True, refuse_data=["554 5.7.1 no"] * 5
        ) as refusing,
        running_app(objects(tmp_path, grey, refusing), store=store) as app,
    ):
        async with asyncio.timeout(20):  # 503 until the store and the objects are loaded
            while (await post_event(app, event)).status != 202:
                await asyncio.sleep(0.1)
        [got] = await grey.wait_for(1)
        mail = got.parsed()
        assert mail["Subject"] == "[info] kustomization/apps.flux-system: ReconciliationSucceeded"
        assert re.fullmatch(
            r"<[0-9a-f]{32}@example\.com>", mail["Message-ID"]
        )  # the outbox's Idempotency-Key
        assert grey.data_commands == 2 and got.login == "mailer"
        dead = {"provider_type": "smtp", "reason": "permanent"}
        async with asyncio.timeout(20):
            while metric(app, "notification_dead_letters_total", **dead) < 1:
                await asyncio.sleep(0.05)
        assert refusing.data_commands == 1 and refusing.messages == []
        assert metric(app, "notification_dead_letters_total", provider_type="smtp") == 1


async def test_an_alert_template_is_what_the_email_says(ctx: DeliveryContext) -> None:
    """The template stage's message (ctx.message) reaches subject and both bodies, as for the chat types."""
    from notification_controller.providers.message import Message

    templated = Message("TitleMarker7q", "TextMarker9z", "error", (("FieldMarker", "ValueMarker"),))
    async with SMTPServer() as srv:
        notifier = build(srv.address)
        await notifier.post(SAMPLE_EVENT, dataclasses.replace(ctx, message=templated, templated=True))
        await notifier.post(SAMPLE_EVENT, ctx)
    with_template, plain = (m.parsed() for m in srv.messages)
    assert with_template["Subject"] == "[error] TitleMarker7q: ReconciliationSucceeded"
    for kind in ("plain", "html"):
        part = with_template.get_body((kind,))
        assert (
            part is not None and "TextMarker9z" in part.get_content() and "ValueMarker" in part.get_content()
        )
    assert "TitleMarker7q" not in plain.as_string() and "TextMarker9z" not in plain.as_string()
