"""smtp (email, beyond Flux): its conformance case and the pure tests of its configuration and message builder.

SMTP is not HTTP (``http=False``): the real-server tests are ``tests/integration/test_smtp.py`` (aiosmtpd with
STARTTLS, smtps, AUTH, refusals, the real controller) and ``tests/integration/test_smtp_hostile.py`` (hostile
servers: bounded time and memory).
"""

from __future__ import annotations

import email
import email.policy
from email.message import EmailMessage
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notification_controller.api.event import Event
from notification_controller.api.provider import ProviderType
from notification_controller.errors import ProviderConfigError
from notification_controller.providers.message import Message
from notification_controller.providers.smtp import (
    MAX_RECIPIENTS,
    SMTPNotifier,
    build_email,
    header_text,
    parse_endpoint,
    parse_recipients,
    parse_sender,
)
from tests.providers.build import SAMPLE_EVENT
from tests.providers.case import ProviderCase
from tests.providers.git_support import config_error, opts

# ---- conformance case ----------------------------------------------------------------------------

CASES: list[ProviderCase] = [
    ProviderCase(
        type="smtp",
        spec={
            "address": "smtps://127.0.0.1:465",
            "channel": "ops@example.com",
            "username": "flux@example.com",
        },
        secret={"username": "flux-mailer", "password": "smtp-canary-password"},
        http=False,
        canaries=["smtp-canary-password"],
    ),
]

SENDER = parse_sender("Flux <flux@example.com>")


def parsed(mail: EmailMessage) -> EmailMessage:
    """What a mail client reads: the bytes on the wire parsed back."""
    raw = mail.as_bytes(policy=email.policy.SMTP)
    out = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(out, EmailMessage)
    return out


def parts(mail: EmailMessage) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in mail.walk():
        if isinstance(part, EmailMessage) and part.get_content_maintype() == "text":
            found[part.get_content_type()] = part.get_content().replace("\r\n", "\n")
    return found


def event_with(**changes: Any) -> Event:
    """The sample event with fields replaced, unvalidated: the event server refuses control characters in
    names, the email must be safe without relying on it."""
    names: dict[str, Any] = {k: changes.pop(k) for k in ("kind", "name", "namespace") if k in changes}
    obj = SAMPLE_EVENT.involved_object.model_copy(update=names)
    return SAMPLE_EVENT.model_copy(update={**changes, "involved_object": obj})


# ---- configuration -------------------------------------------------------------------------------


def test_endpoints() -> None:
    plain = parse_endpoint("smtp://mail.example.com")
    assert (plain.host, plain.port, plain.implicit_tls, plain.starttls_required) == (
        "mail.example.com",
        587,
        False,
        False,
    )
    assert plain.hello == "localhost" and not plain.plain_auth
    implicit = parse_endpoint("smtps://mail.example.com")
    assert (implicit.port, implicit.implicit_tls) == (465, True)
    required = parse_endpoint("smtp://10.0.0.1:25?starttls=required&hello=flux.example.com")
    assert (required.port, required.starttls_required, required.hello) == (25, True, "flux.example.com")
    assert parse_endpoint("smtp://127.0.0.1:2525").plain_auth and parse_endpoint("smtp://[::1]:25").plain_auth
    assert (
        parse_endpoint("smtp://localhost").plain_auth
        and not parse_endpoint("smtp://localhost.evil.example").plain_auth
    )
    assert parse_endpoint("smtp://[::1]:25").url() == "smtp://[::1]:25"


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("", "SMTP server (address) cannot be empty"),
        ("http://mail.example.com", "expected smtp://HOST:PORT or smtps://HOST:PORT"),
        ("smtp://user:pw@mail.example.com", "credentials do not belong in the address"),
        ("smtp://mail.example.com:99999", "invalid SMTP address"),
        ("smtp://mail.example.com/path", "expected no path"),
        ("smtps://mail.example.com?starttls=required", "starttls must be"),
        ("smtp://mail.example.com?starttls=maybe", "starttls must be"),
        ("smtp://mail.example.com?hello=a%0d%0aRCPT", "hello must be a host name"),
        ("smtp://mail.example.com?tls=no", "unknown parameter 'tls'"),
    ],
)
def test_bad_addresses_are_config_errors(address: str, message: str) -> None:
    error = config_error(
        ProviderType.SMTP, address=address, channel="a@example.com", username="f@example.com"
    )
    assert message in error


def test_recipients_are_validated_deduplicated_and_bounded() -> None:
    assert parse_recipients(" a@example.com, b@example.org ,A@example.com,, ") == (
        "a@example.com",
        "b@example.org",
    )
    for bad in (
        "not-an-address",
        "a@b@c",
        "a@example.com\r\nRCPT TO:<x@evil>",
        "<a@example.com>",
        "a @x.com",
    ):
        with pytest.raises(ProviderConfigError, match="invalid recipient in channel"):
            parse_recipients(f"ok@example.com,{bad}")
    with pytest.raises(ProviderConfigError, match="invalid recipient") as info:
        parse_recipients("x\r\nBcc: victim@example.com@")
    assert "\r" not in str(info.value) and "\n" not in str(info.value)
    many = ",".join(f"u{i}@example.com" for i in range(MAX_RECIPIENTS))
    assert len(parse_recipients(many)) == MAX_RECIPIENTS
    with pytest.raises(ProviderConfigError, match=f"at most {MAX_RECIPIENTS}"):
        parse_recipients(many + ",one-more@example.com")
    with pytest.raises(ProviderConfigError, match="recipients \\(channel\\) cannot be empty"):
        parse_recipients(" , ")
    with pytest.raises(ProviderConfigError, match="invalid recipient"):
        parse_recipients("a" * 250 + "@example.com")


def test_sender() -> None:
    assert str(parse_sender("flux@example.com")) == "flux@example.com"
    assert str(parse_sender("Flux CD <flux@example.com>")) == "Flux CD <flux@example.com>"
    for bad in ("", "flux", "Flux <flux>", "Evil\r\nBcc: x <flux@example.com>", 'A"B <flux@example.com>'):
        with pytest.raises(ProviderConfigError):
            parse_sender(bad)


def test_notifier_options() -> None:
    base = {
        "address": "smtps://mail.example.com",
        "channel": "ops@example.com",
        "username": "flux@example.com",
    }
    anonymous = SMTPNotifier(opts(ProviderType.SMTP, **base))
    assert anonymous.login == "" and anonymous.recipients == ("ops@example.com",)
    # only a password: the From address logs in
    assert SMTPNotifier(opts(ProviderType.SMTP, **base, password="pw")).login == "flux@example.com"
    # the Secret's username is the login
    named = SMTPNotifier(
        opts(ProviderType.SMTP, **base, password="pw", secret_data={"username": b"mailer\n"})
    )
    assert named.login == "mailer" and named.sender.addr_spec == "flux@example.com"
    assert "no 'password'" in config_error(ProviderType.SMTP, **base, secret_data={"username": b"mailer"})
    assert "sender (username) cannot be empty" in config_error(
        ProviderType.SMTP, address="smtp://m.example.com", channel="a@example.com"
    )


def test_the_from_address_is_specs_username_even_when_the_secret_has_one() -> None:
    """resolve_options puts the Secret's username over spec.username (Flux's rule): smtp reads the spec's."""
    from notification_controller.api.common import Secret
    from notification_controller.api.provider import Provider
    from notification_controller.providers.options import resolve_options

    provider = Provider.model_validate(
        {
            "metadata": {"name": "mail", "namespace": "flux-system"},
            "spec": {
                "type": "smtp",
                "address": "smtps://mail.example.com",
                "channel": "ops@example.com",
                "username": "Flux <flux@example.com>",
                "secretRef": {"name": "mail"},
            },
        }
    )
    secret = Secret.from_manifest(
        {
            "metadata": {"name": "mail", "namespace": "flux-system"},
            "stringData": {"username": "u", "password": "p"},
        }
    )
    notifier = SMTPNotifier(resolve_options(provider, lambda ns, name: secret))
    assert (str(notifier.sender), notifier.login) == ("Flux <flux@example.com>", "u")


def test_the_smtp_client_is_imported_only_when_a_provider_is_built() -> None:
    """Importing the module does not import aiosmtplib; without it, the Provider fails clearly."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import importlib.abc, sys
        import notification_controller.providers.smtp as smtp
        assert "aiosmtplib" not in sys.modules, "imported eagerly"

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "aiosmtplib":
                    raise ImportError(f"blocked: {name}")
                return None

        sys.meta_path.insert(0, Block())
        from notification_controller.api.provider import ProviderType
        from notification_controller.errors import ProviderConfigError
        from notification_controller.providers.base import ProviderOptions
        opts = ProviderOptions(type=ProviderType.SMTP, name="p", namespace="ns", address="smtp://127.0.0.1:25",
                               channel="a@example.com", username="f@example.com")
        try:
            smtp.SMTPNotifier(opts)
        except ProviderConfigError as exc:
            assert "aiosmtplib" in str(exc), exc
        else:
            raise AssertionError("built without aiosmtplib")
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


# ---- the message ---------------------------------------------------------------------------------


def test_one_multipart_alternative_message_from_the_event() -> None:
    mail = parsed(
        build_email(SAMPLE_EVENT, None, SENDER, ["a@example.com", "b@example.org"], message_id="k1", date=0)
    )
    assert mail["From"] == "Flux <flux@example.com>"
    assert mail["To"] == "a@example.com, b@example.org"
    assert mail["Subject"] == "[info] gitrepository/webapp.gitops-system: ReconciliationSucceeded"
    assert mail["Message-ID"] == "<k1@example.com>"
    assert mail["Date"] == "Thu, 01 Jan 1970 00:00:00 +0000"
    assert mail["Auto-Submitted"] == "auto-generated"
    assert mail["X-Flux-Object"] == "GitRepository/gitops-system/webapp"
    assert mail["X-Flux-Severity"] == "info" and mail["Importance"] is None
    assert mail.get_content_type() == "multipart/alternative"
    bodies = parts(mail)
    assert set(bodies) == {"text/plain", "text/html"}
    text = bodies["text/plain"]
    assert text.startswith("stored artifact for revision 'main@sha1:0123456'\nfetched 3 files\n")
    assert "revision: main@sha1:0123456789abcdef0123456789abcdef01234567\n" in text
    assert "summary: Cluster prod-eu\n" in text
    assert (
        "Object: GitRepository/gitops-system/webapp\n" in text and "Time: 2026-03-01 10:20:30 UTC\n" in text
    )
    page = bodies["text/html"]
    assert "<h3" in page and "gitrepository/webapp.gitops-system</h3>" in page
    assert "revision &#x27;main@sha1:0123456&#x27;<br>" in page
    assert "<th" in page and "Cluster prod-eu" in page


def test_a_template_or_stage_message_is_what_the_email_says() -> None:
    message = Message("Deploy failed: webapp", "it <b>broke</b>", "error", (("cluster", "prod & eu"),))
    mail = parsed(build_email(SAMPLE_EVENT, message, SENDER, ["a@example.com"], message_id="k", date=0))
    assert mail["Subject"] == "[error] Deploy failed: webapp: ReconciliationSucceeded"
    assert mail["Importance"] == "high" and mail["X-Priority"] == "2 (High)"
    bodies = parts(mail)
    assert bodies["text/plain"].startswith("it <b>broke</b>\n\ncluster: prod & eu\n")
    assert "it &lt;b&gt;broke&lt;/b&gt;" in bodies["text/html"]  # escaped: an event cannot inject markup
    assert "prod &amp; eu" in bodies["text/html"] and "<b>" not in bodies["text/html"]


def test_line_breaks_in_event_fields_cannot_create_headers() -> None:
    hostile = "x\r\nBcc: victim@example.com\r\n\r\nforged body"
    event = event_with(
        reason="Failed\r\nBcc: victim@example.com",
        name="web\napp\u2028X-Evil: 1",
        namespace="ns\rX-Injected: yes",
        kind="Kustomization\x00",
        message=hostile,
    )
    raw = build_email(event, None, SENDER, ["a@example.com"], message_id="k", date=0).as_bytes(
        policy=email.policy.SMTP
    )
    head = raw.split(b"\r\n\r\n", 1)[0]
    names = [line.split(b":", 1)[0] for line in head.split(b"\r\n") if line and not line[:1].isspace()]
    assert b"Bcc" not in names and b"X-Evil" not in names and b"X-Injected" not in names
    mail = parsed(build_email(event, None, SENDER, ["a@example.com"], message_id="k", date=0))
    assert mail["Bcc"] is None and mail["X-Injected"] is None
    assert "Bcc: victim@example.com" in mail["Subject"]  # the text is kept, on one line
    assert "\n" not in mail["Subject"] and "\r" not in mail["Subject"]


def test_a_huge_message_is_capped() -> None:
    event = event_with(message="y" * 200_000, reason="R" * 5000)
    mail = parsed(build_email(event, None, SENDER, ["a@example.com"], message_id="k", date=0))
    assert len(mail["Subject"]) <= 200
    assert len(parts(mail)["text/plain"]) < 40_000


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_header_text_is_always_one_safe_line(value: str) -> None:
    out = header_text(value)
    assert len(out) <= 256
    assert not any(ch in out for ch in "\r\n\x00\x0b\x0c\x85\u2028\u2029")


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=120), st.text(max_size=120), st.text(max_size=60))
def test_any_event_text_builds_a_message_with_exactly_our_headers(reason: str, text: str, name: str) -> None:
    event = event_with(reason=reason, message=text, name=name or "n")
    raw = build_email(event, None, SENDER, ["a@example.com"], message_id="k", date=0).as_bytes(
        policy=email.policy.SMTP
    )
    mail = email.message_from_bytes(raw, policy=email.policy.default)
    assert set(mail.keys()) <= {
        "From", "To", "Subject", "Date", "Message-ID", "Auto-Submitted", "X-Flux-Object", "X-Flux-Reason",
        "X-Flux-Severity", "Importance", "X-Priority", "MIME-Version", "Content-Type",
    }  # fmt: skip
