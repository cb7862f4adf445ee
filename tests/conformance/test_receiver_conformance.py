"""Every receiver type through the same matrix, over HTTP against the real receiver app (reference §5.2, §5.3).

Rows: a valid request as the real sender makes it is accepted and patches exactly one target; a wrong,
missing, truncated or other-receiver signature/token is refused with 400 and patches nothing (types with
authentication); an event missing from ``spec.events`` is refused (github, gitlab, bitbucket, cdevents); a
malformed payload is refused (types that validate the body); a body over the cap is refused with 413 before
the lookup; any method but POST gets 405. The registry, the CRD enum, the cases and ``docs/receivers`` agree.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from notification_controller.api import RECONCILE_REQUEST_ANNOTATION
from notification_controller.api.objects import parse_object
from notification_controller.api.receiver import Receiver, ReceiverType
from notification_controller.receivers.registry import UNAUTHENTICATED, VERIFIERS
from notification_controller.server.receivers import MAX_BODY, ReceiverServerSettings
from tests.receivers.case import Env, ReceiverCase
from tests.receivers.cases import CASES
from tests.support.receiver_kit import TOKEN, Harness, LocalIssuer, make_receiver

DOCS = Path(__file__).resolve().parents[2] / "docs" / "receivers"
TYPES = sorted(CASES)


@asynccontextmanager
async def running(case: ReceiverCase, **receiver_kwargs: Any) -> AsyncIterator[tuple[Harness, str, Env]]:
    async with LocalIssuer() as issuer:
        harness = Harness()
        env = Env(TOKEN, issuer, harness.clock.now())
        if case.settings is not None:
            harness.settings = ReceiverServerSettings(**case.settings(env))
        providers = case.oidc_providers(env) if case.oidc_providers else None
        receiver, secret = make_receiver(
            case.type, secret_data=case.secret_data, oidc_providers=providers, **receiver_kwargs
        )
        path = harness.add(receiver, secret)
        harness.add_targets()
        async with harness:
            yield harness, path, env


async def test_registry_equals_crd_enum_cases_and_docs() -> None:
    """reference §1.4: the 13 types; STYLE: registry == CRD enum == docs, so no type can drift."""
    enum = {t.value for t in ReceiverType}
    assert {t.value for t in VERIFIERS} == enum
    assert set(CASES) == enum
    assert {p.stem for p in DOCS.glob("*.md") if p.stem != "README"} == enum
    assert {t.value for t in UNAUTHENTICATED} == {t for t, c in CASES.items() if not c.forged}


@pytest.mark.parametrize("type_", TYPES)
async def test_doc_page_examples_are_valid_manifests(type_: str) -> None:
    """Every YAML example of ``docs/receivers/<type>.md`` parses into our models, with the page's type."""
    text = (DOCS / f"{type_}.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    receivers = []
    for block in blocks:
        for doc in yaml.safe_load_all(block):
            if isinstance(doc, dict) and doc.get("kind") in ("Receiver", "Secret"):
                obj = parse_object(doc)
                if isinstance(obj, Receiver):
                    receivers.append(obj)
    assert [r.spec.type.value for r in receivers] == [type_]


@pytest.mark.parametrize("type_", TYPES)
async def test_valid_request_patches_once(type_: str) -> None:
    """reference §5.2 step 6: a valid delivery annotates the target (checklist A1)."""
    case = CASES[type_]
    async with running(case) as (h, path, env):
        headers, body = case.valid(env)
        status, data, _ = await h.post(path, body, headers)
        assert (status, data) == (200, b"")
        assert h.cluster.annotated() == [("GitRepository", "default", "webapp")]
        assert h.cluster.annotation("GitRepository", "default", "webapp", RECONCILE_REQUEST_ANNOTATION)
        assert h.metric("notification_receiver_requests_total", type=type_, outcome="accepted") == 1


FORGERIES = [(t, name) for t in TYPES for name in CASES[t].forged]


@pytest.mark.parametrize(("type_", "forgery"), FORGERIES)
async def test_forged_request_is_refused_without_patch(type_: str, forgery: str) -> None:
    """reference §5.3: wrong/missing/truncated signature or token, or another receiver's key (A2, A13, A14, A19)."""
    case = CASES[type_]
    async with running(case) as (h, path, env):
        headers, body = case.forged[forgery](env)
        status, data, _ = await h.post(path, body, headers)
        assert (status, data) == (400, b"")
        assert h.cluster.annotate_calls == []
        assert h.metric("notification_receiver_requests_total", type=type_, outcome="rejected_signature") == 1


async def test_every_authenticated_type_has_the_four_forgeries() -> None:
    for type_, case in CASES.items():
        if type_ in {t.value for t in UNAUTHENTICATED}:
            assert case.forged == {}
        else:
            assert set(case.forged) == {"wrong", "missing", "truncated", "other-key"}, type_


EVENT_TYPES = [t for t in TYPES if CASES[t].events]


@pytest.mark.parametrize("type_", EVENT_TYPES)
async def test_event_not_in_spec_events_is_refused(type_: str) -> None:
    """reference §5.3 event filter (checklist A17): listed → 200, not listed → 400 and no patch."""
    case = CASES[type_]
    assert case.events is not None
    header, allowed, refused = case.events
    async with running(case, events=[allowed.upper()]) as (h, path, env):
        headers, body = case.valid(env)
        status, _, _ = await h.post(path, body, {**headers, header: refused})
        assert status == 400
        assert h.cluster.annotate_calls == []
        status, _, _ = await h.post(path, body, {**headers, header: allowed})
        assert status == 200, "spec.events is matched case-insensitively (Go EqualFold)"
        assert len(h.cluster.annotate_calls) == 1


PAYLOAD_TYPES = [t for t in TYPES if CASES[t].bad_payload is not None]


@pytest.mark.parametrize("type_", PAYLOAD_TYPES)
async def test_malformed_payload_is_refused(type_: str) -> None:
    """reference §5.3 payload handling: a body of the wrong shape → 400, no patch (checklist B11)."""
    case = CASES[type_]
    assert case.bad_payload is not None
    async with running(case) as (h, path, env):
        headers, body = case.bad_payload(env)
        status, _, _ = await h.post(path, body, headers)
        assert status == 400
        assert h.cluster.annotate_calls == []


@pytest.mark.parametrize("type_", TYPES)
async def test_oversized_body_is_413_before_lookup(type_: str) -> None:
    """reference §5.2 step 1 (checklist B5): the cap applies before the lookup and before authentication."""
    case = CASES[type_]
    async with running(case) as (h, path, env):
        headers, _ = case.valid(env)
        big = b"x" * (MAX_BODY + 1)
        assert (await h.post(path, big, headers))[0] == 413
        assert (await h.post("/hook/" + "0" * 64, big, headers))[0] == 413, "413 even for an unknown path"
        assert h.cluster.annotate_calls == []
        assert h.metric("notification_receiver_requests_total", type="unknown", outcome="too_large") == 2


@pytest.mark.parametrize("type_", TYPES)
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
async def test_other_methods_are_405(type_: str, method: str) -> None:
    """Hardening (checklist B3): Flux triggers on any method; only POST is accepted here."""
    case = CASES[type_]
    async with running(case) as (h, path, env):
        headers, body = case.valid(env)
        status, data, resp_headers = await h.post(path, body, headers, method=method)
        assert (status, data) == (405, b"")
        assert resp_headers["Allow"] == "POST"
        assert h.cluster.annotate_calls == []
