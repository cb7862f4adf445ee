"""Invalid Alerts, Providers and Receivers in local mode: each is refused precisely, the rest keeps working
(issue 7 "Manifests"; checklist C9, D9, E9–E11; reference §1.2–1.4, §3.8, §6.1–6.3).

Two outcomes, pinned per field:
* **schema errors** (what the CRD's OpenAPI schema or CEL rules reject, so the API server would never store
  the object): the loader logs ``invalid manifest skipped: <file>:<line>: <field>: <reason>`` (the field's 1-based line) and the object
  never reaches the store;
* **semantic errors** (valid to the schema, unusable at run time: bad URL, missing Secret or key, malformed
  PEM, headers that are not YAML, bad regex, CEL that does not compile): the object is stored and its
  reconciler reports ``Ready=False`` with a specific reason and a message naming the field or Secret.

All invalid objects load in the same run as a valid Alert+Provider pair and a valid Receiver: the pair
still delivers an event, the Receiver still answers 200 and annotates its target.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from notification_controller.api.common import ConditionStatus
from notification_controller.app import App
from notification_controller.core import conditions as cond
from notification_controller.core.webhook import webhook_path
from tests.adversarial.kit import event_body, eventually, pair, secret
from tests.integration.appkit import local_cluster, post_event, running_app
from tests.support.capture import CaptureServer

NS = "flux-system"
RECEIVER_TOKEN = "valid-receiver-token"
LONG = "http://127.0.0.1/" + "a" * 2100
PEM_GARBAGE = "-----BEGIN CERTIFICATE-----\nnot base64 !!\n-----END CERTIFICATE-----\n"


def provider(name: str, spec: str) -> str:
    return f"""
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: {name}, namespace: {NS}}}
spec: {spec}
"""


def alert(name: str, spec: str) -> str:
    return f"""
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: {name}, namespace: {NS}}}
spec: {spec}
"""


def receiver(name: str, spec: str) -> str:
    return f"""
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata: {{name: {name}, namespace: {NS}}}
spec: {spec}
"""


SOURCES = "eventSources: [{kind: Kustomization, name: '*'}]"
RESOURCES = "resources: [{kind: GitRepository, name: webapp}]"

# (file, document, field the error names, words of the message)
SCHEMA_ERRORS: list[tuple[str, str, str, str]] = [
    (
        "p-type",
        provider("p-type", "{type: carrier-pigeon, address: 'http://x/'}"),
        "spec.type",
        "must be one of",
    ),
    (
        "p-timeout",
        provider("p-timeout", "{type: generic, address: 'http://x/', timeout: 5 minutes}"),
        "spec.timeout",
        "pattern",
    ),
    (
        "p-timeout-hours",
        provider("p-timeout-hours", "{type: generic, address: 'http://x/', timeout: 1h}"),
        "spec.timeout",
        "pattern",
    ),
    (
        "p-interval",
        provider("p-interval", "{type: generic, address: 'http://x/', interval: soon}"),
        "spec.interval",
        "pattern",
    ),
    (
        "p-proxy",
        provider("p-proxy", "{type: generic, address: 'http://x/', proxy: 'proxy.local:3128'}"),
        "spec.proxy",
        "pattern",
    ),
    (
        "p-address-2049",
        provider("p-address-2049", f"{{type: generic, address: '{LONG}'}}"),
        "spec.address",
        "at most 2048",
    ),
    (
        "p-cel-type",
        provider("p-cel-type", "{type: slack, address: 'http://x/', commitStatusExpr: \"'x'\"}"),
        "spec",
        "commitStatusExpr is only supported",
    ),
    ("p-no-type", provider("p-no-type", "{address: 'http://x/'}"), "spec.type", "required field is missing"),
    (
        "a-severity",
        alert("a-severity", f"{{providerRef: {{name: good}}, eventSeverity: critical, {SOURCES}}}"),
        "spec.eventSeverity",
        "'info' or 'error'",
    ),
    (
        "a-kind",
        alert("a-kind", "{providerRef: {name: good}, eventSources: [{kind: Pod, name: '*'}]}"),
        "spec.eventSources[0].kind",
        "must be one of",
    ),
    (
        "a-summary",
        alert("a-summary", f"{{providerRef: {{name: good}}, summary: '{'s' * 300}', {SOURCES}}}"),
        "spec.summary",
        "at most 255",
    ),
    (
        "a-no-provider",
        alert("a-no-provider", f"{{{SOURCES}}}"),
        "spec.providerRef",
        "required field is missing",
    ),
    (
        "a-sources-type",
        alert("a-sources-type", "{providerRef: {name: good}, eventSources: Kustomization}"),
        "spec.eventSources",
        "must be a list",
    ),
    (
        "r-type",
        receiver("r-type", f"{{type: smoke-signal, secretRef: {{name: x}}, {RESOURCES}}}"),
        "spec.type",
        "must be one of",
    ),
    (
        "r-interval",
        receiver(
            "r-interval", f"{{type: generic, interval: ten minutes, secretRef: {{name: x}}, {RESOURCES}}}"
        ),
        "spec.interval",
        "pattern",
    ),
    (
        "r-resource-kind",
        receiver(
            "r-resource-kind",
            "{type: generic, secretRef: {name: x}, resources: [{kind: Deployment, name: a}]}",
        ),
        "spec.resources[0].kind",
        "must be one of",
    ),
    (
        "r-no-secretref",
        receiver("r-no-secretref", f"{{type: github, {RESOURCES}}}"),
        "spec",
        "secretRef is required",
    ),
    (
        "r-oidc-issuer",
        receiver(
            "r-oidc-issuer",
            f"{{type: generic-oidc, oidcProviders: [{{issuerURL: 'ftp://x', validations: [{{expression: 'true', message: m}}]}}], {RESOURCES}}}",
        ),
        "spec.oidcProviders[0].issuerURL",
        "pattern",
    ),
]


@dataclass(frozen=True)
class Semantic:
    kind: str
    name: str
    reason: str
    words: str  # part of the Ready message
    doc: str


SEMANTIC_ERRORS: list[Semantic] = [
    Semantic(
        "Provider",
        "p-bad-url",
        "InvalidConfig",
        "invalid address: must be an absolute http or https URL",
        provider("p-bad-url", "{type: generic, address: 'not a url'}"),
    ),
    Semantic(
        "Provider",
        "p-ftp",
        "InvalidConfig",
        "invalid address: must be an absolute http or https URL",
        provider("p-ftp", "{type: generic, address: 'ftp://files.example.com/x'}"),
    ),
    Semantic(
        "Provider",
        "p-empty-address",
        "InvalidConfig",
        "invalid Slack hook URL: empty",
        provider("p-empty-address", "{type: slack}"),
    ),
    Semantic(
        "Provider",
        "p-no-secret",
        "SecretNotFound",
        f"failed to get secret '{NS}/ghost': not found",
        provider("p-no-secret", "{type: generic, address: 'http://x/', secretRef: {name: ghost}}"),
    ),
    Semantic(
        "Provider",
        "p-hmac-no-key",
        "InvalidConfig",
        "HMAC key is empty",
        provider("p-hmac-no-key", "{type: generic-hmac, address: 'http://x/', secretRef: {name: no-token}}"),
    ),
    Semantic(
        "Provider",
        "p-telegram-no-token",
        "InvalidConfig",
        "empty Telegram token",
        provider("p-telegram-no-token", "{type: telegram, channel: '@ops', secretRef: {name: no-token}}"),
    ),
    Semantic(
        "Provider",
        "p-bad-pem",
        "InvalidConfig",
        "failed to get TLS config: failed to parse CA certificate",
        provider("p-bad-pem", "{type: generic, address: 'https://x/', certSecretRef: {name: bad-pem}}"),
    ),
    Semantic(
        "Provider",
        "p-cert-no-key",
        "InvalidConfig",
        "must contain both tls.crt and tls.key",
        provider(
            "p-cert-no-key", "{type: generic, address: 'https://x/', certSecretRef: {name: cert-no-key}}"
        ),
    ),
    Semantic(
        "Provider",
        "p-proxy-secret-no-scheme",
        "InvalidConfig",
        "failed to get proxy URL: address in secret",
        provider(
            "p-proxy-secret-no-scheme",
            "{type: generic, address: 'http://x/', proxySecretRef: {name: proxy-no-scheme}}",
        ),
    ),
    Semantic(
        "Provider",
        "p-proxy-secret-no-address",
        "InvalidConfig",
        "has no 'address'",
        provider(
            "p-proxy-secret-no-address",
            "{type: generic, address: 'http://x/', proxySecretRef: {name: proxy-no-address}}",
        ),
    ),
    Semantic(
        "Provider",
        "p-headers",
        "InvalidConfig",
        "failed to read headers from secret: invalid YAML",
        provider("p-headers", "{type: generic, secretRef: {name: bad-headers}}"),
    ),
    Semantic(
        "Provider",
        "p-headers-list",
        "InvalidConfig",
        "expected a map of header names to values",
        provider("p-headers-list", "{type: generic, secretRef: {name: list-headers}}"),
    ),
    Semantic(
        "Provider",
        "p-address-2049",
        "InvalidConfig",
        "address exceeds maximum length of 2048 bytes",
        provider("p-address-2049", "{type: generic, secretRef: {name: long-address}}"),
    ),
    Semantic(
        "Provider",
        "p-cel",
        "InvalidCELExpression",
        "invalid commitStatusExpr expression",
        provider(
            "p-cel",
            "{type: github, address: 'https://github.com/o/r', secretRef: {name: gh}, commitStatusExpr: 'event.bogus +'}",
        ),
    ),
    Semantic(
        "Alert",
        "a-inclusion",
        "ValidationFailed",
        "failed to compile inclusion regex: (unclosed (missing ))",
        alert("a-inclusion", f"{{providerRef: {{name: good}}, inclusionList: ['(unclosed'], {SOURCES}}}"),
    ),
    Semantic(
        "Alert",
        "a-exclusion",
        "ValidationFailed",
        "failed to compile exclusion regex: a(?<!b) (invalid perl operator)",
        alert("a-exclusion", f"{{providerRef: {{name: exclusion}}, exclusionList: ['a(?<!b)'], {SOURCES}}}"),
    ),
    Semantic(
        "Alert",
        "a-missing-provider",
        "ProviderNotFound",
        "Provider 'ghost' not found",
        alert("a-missing-provider", f"{{providerRef: {{name: ghost}}, {SOURCES}}}"),
    ),
    Semantic(
        "Alert",
        "a-broken-provider",
        "ProviderNotReady",
        "Provider 'p-bad-url' is not ready",
        alert("a-broken-provider", f"{{providerRef: {{name: p-bad-url}}, {SOURCES}}}"),
    ),
    Semantic(
        "Receiver",
        "r-cel",
        "InvalidCELExpression",
        "invalid resourceFilter expression",
        receiver(
            "r-cel",
            f"{{type: generic, secretRef: {{name: good-receiver-token}}, resourceFilter: 'req.x ==', {RESOURCES}}}",
        ),
    ),
    Semantic(
        "Receiver",
        "r-resource-cel",
        "InvalidCELExpression",
        "invalid filter expression for resources[0]",
        receiver(
            "r-resource-cel",
            "{type: generic, secretRef: {name: good-receiver-token}, resources: [{kind: GitRepository, name: '*', filter: 'res.metadata.name =='}]}",
        ),
    ),
    Semantic(
        "Receiver",
        "r-no-secret",
        "TokenNotFound",
        "unable to read token from secret",
        receiver("r-no-secret", f"{{type: github, secretRef: {{name: ghost}}, {RESOURCES}}}"),
    ),
    Semantic(
        "Receiver",
        "r-no-token-key",
        "TokenNotFound",
        "required fields 'token'",
        receiver("r-no-token-key", f"{{type: gitlab, secretRef: {{name: no-token}}, {RESOURCES}}}"),
    ),
]

SECRETS = "".join(
    [
        secret("no-token", address="http://127.0.0.1:9/x", channel="x"),
        secret("bad-pem", **{"ca.crt": PEM_GARBAGE}),
        secret("cert-no-key", **{"tls.crt": PEM_GARBAGE}),
        secret("proxy-no-scheme", address="proxy.local:3128"),
        secret("proxy-no-address", username="user"),
        secret("bad-headers", address="http://127.0.0.1:9/x", headers="{not: [yaml"),
        secret("list-headers", address="http://127.0.0.1:9/x", headers="- a\n- b\n"),
        secret("long-address", address=LONG),
        secret("gh", token="t"),
        secret("good-receiver-token", token=RECEIVER_TOKEN),
    ]
)

VALID_RECEIVER = f"""
---
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata: {{name: good-receiver, namespace: {NS}}}
spec: {{type: generic, secretRef: {{name: good-receiver-token}}, {RESOURCES}}}
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {{name: webapp, namespace: {NS}}}
spec: {{url: 'https://example.com/webapp'}}
"""


def write_all(tmp: Path, sink_url: str) -> Path:
    redos = pair("redos", "generic", f"{sink_url}/redos").replace(
        "eventSources:", "inclusionList: ['^(a+)+$']\n  eventSources:"
    )
    (tmp / "valid.yaml").write_text(
        pair("good", "generic", f"{sink_url}/good")
        + pair("exclusion", "generic", f"{sink_url}/exclusion").split(
            "---\napiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Alert"
        )[0]  # Provider only
        + redos
        + SECRETS
        + VALID_RECEIVER
    )
    for name, doc, _, _ in SCHEMA_ERRORS:
        (tmp / f"bad-{name}.yaml").write_text(doc)
    (tmp / "semantic.yaml").write_text("\n---\n".join(case.doc for case in SEMANTIC_ERRORS))
    return tmp


def ready(running: App, kind: str, name: str) -> tuple[ConditionStatus, str, str] | None:
    obj = running.store.get(kind, NS, name)
    if obj is None or not hasattr(obj, "status"):
        return None
    found = cond.find(obj.status.conditions, cond.READY)
    return None if found is None else (found.status, found.reason, found.message)


async def test_invalid_objects_are_refused_precisely_and_the_rest_keeps_working(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with CaptureServer() as sink, running_app(write_all(tmp_path, sink.url)) as running:
        # -- schema errors: reported with file, document index and field, and skipped
        skipped = [r.getMessage() for r in caplog.records if "invalid manifest skipped" in r.getMessage()]
        for name, _, field, words in SCHEMA_ERRORS:
            [line] = [m for m in skipped if f"bad-{name}.yaml:" in m]
            assert re.search(rf"bad-{re.escape(name)}\.yaml:\d+: {re.escape(field)}: ", line), line
            assert words in line, line
            kind = {"p": "Provider", "a": "Alert", "r": "Receiver"}[name[0]]
            if name != "p-address-2049":  # that name is reused by a valid-schema Provider (semantic case)
                assert running.store.get(kind, NS, name) is None
        assert len(skipped) == len(SCHEMA_ERRORS)

        # -- semantic errors: Ready=False with a specific reason
        def all_reconciled() -> bool:
            return (
                all(
                    (r := ready(running, c.kind, c.name)) is not None and r[0] == ConditionStatus.FALSE
                    for c in SEMANTIC_ERRORS
                )
                # settled: an Alert reconciled before its Provider is Unknown (ProviderNotReady) until the
                # Provider's reconcile requeues it
                and (r := ready(running, "Alert", "good")) is not None
                and r[0] != ConditionStatus.UNKNOWN
                and ready(running, "Receiver", "good-receiver") is not None
            )

        await eventually(all_reconciled, timeout=10, what="every object to be reconciled")
        for case in SEMANTIC_ERRORS:
            status, reason, message = ready(running, case.kind, case.name) or (None, "", "")
            assert (status, reason) == (ConditionStatus.FALSE, case.reason), (case.name, reason, message)
            assert case.words in message, (case.name, message)
        events = local_cluster(running).events
        for case in SEMANTIC_ERRORS:
            if case.reason != "ProviderNotFound":
                assert any(e[0].name == case.name and e[1] == "Warning" for e in events), case.name

        # -- the valid objects are Ready and work in the same run
        assert ready(running, "Provider", "good") == (ConditionStatus.TRUE, "Succeeded", "Provider is ready")
        assert ready(running, "Alert", "good") == (ConditionStatus.TRUE, "Succeeded", "Alert is ready")
        assert (await post_event(running, event_body("still delivering"))).status == 202
        await sink.wait_for(2)
        [request] = [r for r in sink.requests if r.path == "/good"]
        assert request.json()["message"] == "still delivering"

        path = webhook_path(RECEIVER_TOKEN.encode(), "good-receiver", NS)

        def published() -> bool:
            good = running.store.receiver(NS, "good-receiver")
            return good is not None and good.status.webhook_path == path

        await eventually(published, what="the valid Receiver's webhook path")
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{running.ports['receiver']}{path}"
            async with session.post(url, data=b"{}") as resp:
                assert resp.status == 200
        annotations = local_cluster(running).others[("GitRepository", NS, "webapp")]["metadata"][
            "annotations"
        ]
        assert "reconcile.fluxcd.io/requestedAt" in annotations
        # Flux's regex semantics (reference §3.5): an Alert whose exclusion regex does not compile ignores that
        # regex and still delivers; one whose inclusion regex does not compile matches nothing. Both are
        # warned about (InvalidConfig) at dispatch time. Alerts of broken Providers deliver nothing.
        assert await running.dispatcher.wait_idle(5)
        assert sorted(r.path for r in sink.requests) == ["/exclusion", "/good"]
        await eventually(
            lambda: (
                {e[0].name for e in local_cluster(running).events if e[2] == "InvalidConfig"}
                >= {"a-inclusion", "a-exclusion"}
            ),
            what="InvalidConfig warnings at dispatch",
        )

        # C9: a catastrophic-backtracking inclusion regex against a long message: RE2 is linear
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert (await post_event(running, event_body("a" * 100_000 + "!"))).status == 202
        assert await running.dispatcher.wait_idle(5)
        assert loop.time() - start < 1.0
        await sink.wait_for(4)
        assert "/redos" not in [r.path for r in sink.requests]


async def test_secret_proxy_key_without_scheme_is_invalid_config(tmp_path: Path) -> None:
    """E11: the ``proxy`` key of ``secretRef`` must be an http(s) URL, as ``spec.proxy`` and
    ``proxySecretRef.address`` already are."""
    (tmp_path / "p.yaml").write_text(
        secret("proxy-key", address="http://127.0.0.1:9/x", proxy="proxy.local:3128")
        + "\n---\n"
        + provider("p-proxy-key", "{type: generic, secretRef: {name: proxy-key}}")
    )
    async with running_app(tmp_path) as running:
        await eventually(lambda: ready(running, "Provider", "p-proxy-key") is not None, what="reconcile")
        status, reason, message = ready(running, "Provider", "p-proxy-key") or (None, "", "")
        assert (status, reason) == (ConditionStatus.FALSE, "InvalidConfig"), message
        assert "proxy.local" not in message
