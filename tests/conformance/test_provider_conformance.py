"""The provider conformance kit: every provider case through one matrix, against real local servers.

Cases come from each provider type's own module, ``tests/providers/test_<type>.py`` (its ``CASES``, gathered
by ``tests/providers/cases.py``), next to the unit tests of its builder. For each HTTP case, notifiers are built through the production path (``resolve_options`` → ``create_notifier``) and
deliver the kit's sample event through ``OutboundHTTP``:

(a) the request matches reference §4.1 (the case's ``expect``);
(b) 500/502/503/504 and connection resets are retried, then succeed (reference §4.0, checklist E1);
(c) 400/401/403/404 are not retried (one attempt, ``PermanentDeliveryError``; checklist E2);
(d) ``429`` + ``Retry-After: 1`` is waited for; a ``Retry-After`` beyond the budget stops at once (E3);
(e) ``spec.timeout`` bounds the whole delivery (E4);
(f) no canary secret reaches an error text or a log record (reference §9, checklist F1/F4);
(g) ``proxySecretRef`` routes through the proxy for Proxy=yes types, and is ignored by the others (E11);
(h) ``certSecretRef`` trusts a private CA for TLS=yes types; without it verification fails, unretried;
    TLS=no types ignore the CA (E10).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from notification_controller.api.alert import Alert
from notification_controller.api.common import Secret
from notification_controller.api.provider import Provider, ProviderType
from notification_controller.errors import DeliveryError, PermanentDeliveryError, RetryableDeliveryError
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.providers.base import DeliveryContext
from notification_controller.providers.message import Message
from notification_controller.providers.options import resolve_options
from notification_controller.providers.registry import create_notifier
from tests.providers.build import SAMPLE_EVENT, Built, build, fill
from tests.providers.case import ProviderCase
from tests.providers.cases import cases_by_type
from tests.support.capture import CapturedRequest, CaptureServer, ForwardProxy, Reply, mint_tls

FAST = RetryPolicy(max_attempts=5, wait_min=0.01, wait_max=0.05)

# Every case runs on looptime's virtual clock: the loop's time jumps to the next timer whenever the loop has
# nothing to do, so the Retry-After waits, the 1-second budgets and the servers' 10-second stalls take no real
# time, and every wait is asserted exactly in loop seconds (no wall-clock window). The servers are real local
# sockets in the same loop: bytes written on 127.0.0.1 are readable at the next poll, so time only moves
# when every side is waiting for a timer.
pytestmark = pytest.mark.looptime

# Proxy/TLS support per type, from the "Proxy/TLS" column of reference §4.1 (and §4.2 for git types).
# Types not listed fall back to the notifier class's ``uses_proxy``/``uses_tls`` declaration.
REFERENCE_PROXY_TLS: dict[str, tuple[bool, bool]] = {
    "generic": (True, True),
    "generic-hmac": (True, True),
    "slack": (True, True),
    "discord": (True, False),
    "rocket": (True, True),
    "msteams": (True, True),
    "googlechat": (True, False),
    "webex": (True, True),
    "sentry": (False, True),
    "telegram": (True, False),
    "lark": (False, False),
    "matrix": (False, True),
    "opsgenie": (True, True),
    "alertmanager": (True, True),
    "grafana": (True, True),
    "pagerduty": (True, True),
    "datadog": (True, True),
    "zulip": (True, True),
    "zoom": (True, True),
    "incident.io": (True, True),
    "gitea": (True, True),
    "giteapullrequestcomment": (True, True),
}


CASES_BY_TYPE = cases_by_type()
ALL_CASES = [case for cases in CASES_BY_TYPE.values() for case in cases]
HTTP_CASES = [c for c in ALL_CASES if c.http]


def _ids(cases: list[ProviderCase]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for case in cases:
        n = seen.get(case.type, 0)
        seen[case.type] = n + 1
        out.append(case.type if n == 0 else f"{case.type}-{n}")
    return out


http_case = pytest.mark.parametrize("case", HTTP_CASES, ids=_ids(HTTP_CASES))


@pytest.fixture
async def http() -> AsyncIterator[OutboundHTTP]:
    client = OutboundHTTP(FAST)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


class Final:
    """Matches the case's final request (``"METHOD"`` or ``"METHOD path-regex"``)."""

    def __init__(self, spec: str) -> None:
        method, _, regex = spec.partition(" ")
        self.method = method.upper()
        self.regex = regex or ".*"
        self.pattern = re.compile(self.regex)

    def matches(self, req: CapturedRequest) -> bool:
        return req.method == self.method and self.pattern.search(req.path) is not None

    def count(self, requests: list[CapturedRequest]) -> int:
        return sum(1 for r in requests if self.matches(r))


def arm(
    srv: CaptureServer,
    case: ProviderCase,
    faults: list[Reply],
    on_final: Callable[[CapturedRequest], None] | None = None,
) -> Final:
    """Prelude routes answer as the case says; the final request gets ``faults`` first, then 200."""
    for key, (status, body) in case.prelude.items():
        method, _, regex = key.partition(" ")
        srv.on(method, regex or ".*", Reply(status, body))
    final = Final(case.final)
    queue = list(faults)

    def reply(req: CapturedRequest) -> Reply:
        if on_final is not None:
            on_final(req)
        return queue.pop(0) if queue else Reply()

    srv.on(final.method, final.regex, reply)
    return final


def event_of(case: ProviderCase) -> Any:
    return case.event if case.event is not None else SAMPLE_EVENT


async def deliver(built: Built, case: ProviderCase, http: OutboundHTTP) -> None:
    await built.notifier().post(event_of(case), DeliveryContext(http=http))


def supports(case: ProviderCase, built: Built) -> tuple[bool, bool]:
    if case.type in REFERENCE_PROXY_TLS:
        return REFERENCE_PROXY_TLS[case.type]
    cls = type(built.notifier())
    return bool(getattr(cls, "uses_proxy", True)), bool(getattr(cls, "uses_tls", True))


def hidden_values(case: ProviderCase, built: Built, url: str) -> list[str]:
    """Canaries of the case plus the secret-bearing part (path and query) of the final address."""
    values = [v for v in fill(case.canaries, url) if v]
    address = built.options().address
    parts = urlsplit(address)
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    if len(tail) > 1 and case.secret.get("address"):
        values.append(tail)
    return values


def texts_of(exc: BaseException | None, caplog: pytest.LogCaptureFixture) -> list[str]:
    texts: list[str] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        texts.extend((str(exc), repr(exc)))
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    for record in caplog.records:
        texts.append(record.getMessage())
        if record.exc_text:
            texts.append(record.exc_text)
        if record.exc_info and record.exc_info[1] is not None:
            texts.append(str(record.exc_info[1]))
    return texts


def assert_no_leak(texts: list[str], secrets: list[str]) -> None:
    for text in texts:
        for secret in secrets:
            assert secret not in text, f"secret {secret[:4]}… leaked into: {text[:300]}"


# --------------------------------------------------------------------------------------------------
# the matrix
# --------------------------------------------------------------------------------------------------


async def test_every_case_module_was_loaded() -> None:
    """Every provider type has its case(s) in its own module, and that module holds no other type's case."""
    assert set(CASES_BY_TYPE) == set(ProviderType)
    for ptype, cases in CASES_BY_TYPE.items():
        assert cases, f"no case for {ptype.value}"
        assert {c.type for c in cases} == {ptype.value}, ptype
    assert all(c.expect is not None for c in HTTP_CASES)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "providers"
# Pages whose example uses real-looking values (no ``<placeholder>`` credentials): the chat, incident and
# generic types.
DOC_TYPES = frozenset(
    {
        "generic", "generic-hmac", "slack", "discord", "rocket", "msteams", "googlechat", "webex", "telegram",
        "lark", "matrix", "opsgenie", "alertmanager", "grafana", "pagerduty", "datadog", "zulip", "zoom",
        "incident.io", "sentry", "cloudevents", "smtp", "ntfy", "pushover", "gotify", "mattermost", "sns", "sqs",
    }
)  # fmt: skip
DOC_CASES = [c for c in ALL_CASES if c.type in DOC_TYPES]


@pytest.mark.parametrize("case", DOC_CASES, ids=_ids(DOC_CASES))
async def test_docs_example_builds_a_notifier(case: ProviderCase) -> None:
    """STYLE §12: the YAML example of each provider page loads and resolves into a working notifier."""
    text = (DOCS / f"{case.type}.md").read_text(encoding="utf-8")
    match = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert match, f"docs/providers/{case.type}.md has no YAML example"
    providers: list[Provider] = []
    secrets: dict[tuple[str, str], Secret] = {}
    for doc in yaml.safe_load_all(match.group(1)):
        if doc["kind"] == "Provider":
            doc["metadata"].setdefault("uid", "00000000-0000-4000-8000-000000000001")  # set by the apiserver
            providers.append(Provider.model_validate(doc))
        elif doc["kind"] == "Secret":
            item = Secret.from_manifest(doc)
            secrets[(item.metadata.namespace, item.metadata.name)] = item
        elif doc["kind"] == "Alert":
            Alert.model_validate(doc)
    assert [p.spec.type.value for p in providers] == [case.type]
    notifier = create_notifier(resolve_options(providers[0], lambda ns, name: secrets.get((ns, name))))
    assert notifier.type.value == case.type


@http_case
async def test_a_request_matches_reference(case: ProviderCase, http: OutboundHTTP) -> None:
    """(a) Reference §4.1: method, path, headers and body of the delivered request."""
    async with CaptureServer() as srv:
        final = arm(srv, case, [])
        await deliver(build(case, srv.url), case, http)
        assert final.count(srv.requests) == 1
        assert case.expect is not None
        case.expect(srv.requests)


@http_case
@pytest.mark.parametrize("fault", ["500", "502", "503", "504", "reset"])
async def test_b_transient_failures_are_retried(case: ProviderCase, fault: str, http: OutboundHTTP) -> None:
    """(b) Reference §4.0: 5xx (not 501) and transport errors are retried within the budget."""
    reply = Reply(reset=True) if fault == "reset" else Reply(int(fault), {"error": "try later"})
    async with CaptureServer() as srv:
        final = arm(srv, case, [reply, reply])
        await deliver(build(case, srv.url), case, http)
        assert final.count(srv.requests) == 3


@http_case
@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_c_client_errors_are_not_retried(case: ProviderCase, status: int, http: OutboundHTTP) -> None:
    """(c) Reference §4.0: other statuses are final — one attempt, a permanent DeliveryError."""
    async with CaptureServer() as srv:
        final = arm(srv, case, [Reply(status, {"error": "denied"})] * 12)
        with pytest.raises(PermanentDeliveryError) as info:
            await deliver(build(case, srv.url), case, http)
        assert isinstance(info.value, DeliveryError)
        assert final.count(srv.requests) == 1
        assert str(status) in str(info.value)


@http_case
async def test_d_retry_after_is_honoured(case: ProviderCase, http: OutboundHTTP) -> None:
    """(d) Reference §4.0: a 429 ``Retry-After: 1`` is waited for before the next attempt."""
    loop = asyncio.get_running_loop()
    times: list[float] = []
    async with CaptureServer() as srv:
        arm(
            srv,
            case,
            [Reply(429, {"error": "slow down"}, headers={"Retry-After": "1"})],
            lambda _: times.append(loop.time()),
        )
        await deliver(build(case, srv.url, timeout="5s"), case, http)
    assert len(times) == 2
    assert times[1] - times[0] == pytest.approx(1.0, abs=1e-3)  # loop seconds: the wait is Retry-After


@http_case
async def test_d_retry_after_beyond_budget_stops_early(case: ProviderCase, http: OutboundHTTP) -> None:
    """(d) Checklist E3: a Retry-After longer than the remaining budget ends the delivery at once."""
    loop = asyncio.get_running_loop()
    async with CaptureServer() as srv:
        final = arm(srv, case, [Reply(429, {"error": "slow down"}, headers={"Retry-After": "30"})] * 12)
        built = build(case, srv.url, timeout="3s")
        start = loop.time()
        with pytest.raises(RetryableDeliveryError):
            await deliver(built, case, http)
        assert loop.time() - start == pytest.approx(0.0, abs=1e-3)  # no wait at all (loop seconds)
        assert final.count(srv.requests) == 1


@http_case
async def test_e_timeout_is_enforced(case: ProviderCase, http: OutboundHTTP) -> None:
    """(e) Reference §4.0: ``spec.timeout`` (here 1s) covers every attempt of a delivery."""
    loop = asyncio.get_running_loop()
    async with CaptureServer() as srv:
        arm(srv, case, [Reply(delay=10)] * 12)
        built = build(case, srv.url, timeout="1s")
        start = loop.time()
        with pytest.raises(DeliveryError) as info:
            await deliver(built, case, http)
        elapsed = loop.time() - start
    assert elapsed == pytest.approx(1.0, abs=1e-3)  # loop seconds: the budget, not the server's 10 s stall
    assert info.value.reason == "timeout"


@http_case
@pytest.mark.parametrize("fault", ["echo-401", "echo-500", "reset", "timeout"])
async def test_f_no_secret_in_errors_or_logs(
    case: ProviderCase, fault: str, http: OutboundHTTP, caplog: pytest.LogCaptureFixture
) -> None:
    """(f) Reference §9 and checklist F1/F4: errors and logs never carry a secret, even when echoed."""
    caplog.set_level(logging.DEBUG)
    async with CaptureServer() as srv:
        built = build(case, srv.url, timeout="1s")
        secrets = hidden_values(case, built, srv.url)
        echo = "echo: " + " | ".join(fill(case.canaries, srv.url))
        replies = {
            "echo-401": [Reply(401, echo)],
            "echo-500": [Reply(500, echo)] * 12,
            "reset": [Reply(reset=True)] * 12,
            "timeout": [Reply(delay=10)] * 12,
        }[fault]
        arm(srv, case, replies)
        with pytest.raises(DeliveryError) as info:
            await deliver(built, case, http)
    texts = texts_of(info.value, caplog)
    assert texts  # the error itself is always checked
    assert_no_leak(texts, secrets)


@http_case
async def test_g_proxy_secret_is_used(case: ProviderCase, http: OutboundHTTP) -> None:
    """(g) Reference §3.8/§4.1: ``proxySecretRef`` (with credentials) routes Proxy=yes types."""
    async with (
        CaptureServer() as srv,
        ForwardProxy(require_auth=("proxy-user", "proxy-canary-pass")) as proxy,
    ):
        final = arm(srv, case, [])
        secret = {"address": proxy.url, "username": "proxy-user", "password": "proxy-canary-pass"}
        built = build(case, srv.url, proxy=secret)
        uses_proxy, _ = supports(case, built)
        await deliver(built, case, http)
        assert final.count(srv.requests) == 1
        if uses_proxy:
            assert proxy.seen, "the proxy saw no request"
            assert all(f"127.0.0.1:{srv.port}" in target for target in proxy.seen)
            assert proxy.auth[-1] is not None
        else:
            assert proxy.seen == []


@http_case
async def test_h_custom_ca(case: ProviderCase, http: OutboundHTTP) -> None:
    """(h) Reference §3.8/§4.1 and checklist E10: a private CA via ``certSecretRef``."""
    tls = mint_tls()
    async with CaptureServer(tls=tls) as srv:
        final = arm(srv, case, [])
        with_ca = build(case, srv.url, ca_pem=tls.ca_pem)
        _, uses_tls = supports(case, with_ca)
        if uses_tls:
            await deliver(with_ca, case, http)
            assert final.count(srv.requests) == 1
            before = http.attempts
            with pytest.raises(PermanentDeliveryError) as info:
                await deliver(build(case, srv.url), case, http)
            assert http.attempts - before == 1, "a TLS verification failure must not be retried"
            assert info.value.reason == "tls_verification"
        else:
            before = http.attempts
            with pytest.raises(DeliveryError):
                await deliver(with_ca, case, http)
            assert http.attempts - before == 1
        assert final.count(srv.requests) == (1 if uses_tls else 0)


# Types that keep their own shape (the event they forward, a commit status): they render an Alert
# template's message, never another stage's (a group's or a recovery's message stays chat-only).
TEMPLATE_ONLY = frozenset(
    {
        "generic", "generic-hmac", "sentry", "azureeventhub", "githubdispatch", "github", "gitlab", "gitea",
        "bitbucket", "bitbucketserver", "azuredevops", "githubpullrequestcomment",
        "gitlabmergerequestcomment", "giteapullrequestcomment", "cloudevents",
    }
)  # fmt: skip
TEMPLATED = Message("TitleMarker7q", "TextMarker9z", "error", (("FieldMarker", "ValueMarker"),))


@http_case
async def test_t_a_template_reaches_the_request(case: ProviderCase, http: OutboundHTTP) -> None:
    """Issue 15: an Alert template reaches every type's request, where the type puts its title or text
    (nats, googlepubsub and otel: tests/integration/test_git_providers.py); a stage's message that is not
    a template (a group, a recovery) reaches only the chat and incident types, the others send Flux's bytes."""
    contexts = [
        DeliveryContext(http=http, message=TEMPLATED, templated=True),
        DeliveryContext(http=http),
        DeliveryContext(http=http, message=TEMPLATED),
    ]
    async with CaptureServer() as srv:
        final = arm(srv, case, [])
        built = build(case, srv.url)
        for ctx in contexts:
            await built.notifier().post(event_of(case), ctx)
        templated, plain, grouped = [
            r.body.decode("utf-8", "replace") for r in srv.requests if final.matches(r)
        ]
    assert "TitleMarker7q" in templated or "TextMarker9z" in templated, (case.type, templated[:300])
    assert "TitleMarker7q" not in plain and "TextMarker9z" not in plain
    if case.type in TEMPLATE_ONLY:
        assert grouped == plain, case.type
    else:
        assert "TitleMarker7q" in grouped or "TextMarker9z" in grouped, (case.type, grouped[:300])
