"""The cdevents (a CDEvent in CloudEvents binary mode) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.receivers.case import (
    Env,
    ReceiverCase,
    Request,
    plain,
)
from tests.receivers.support import serve
from tests.support.receiver_kit import (
    make_receiver,
)

# ---- conformance case ----------------------------------------------------------------------------


CDEVENT_BODY = json.dumps(
    {
        "context": {
            "version": "0.4.1",
            "id": "271069a8-fc18-44f1-b38f-9d70a1695819",
            "source": "/event/source/123",
            "type": "dev.cdevents.change.merged.0.2.0",
            "timestamp": "2026-01-01T14:27:05.315384Z",
        },
        "subject": {
            "id": "mySubject123",
            "source": "/event/source/123",
            "type": "change",
            "content": {"repository": {"id": "org/webapp", "source": "https://example.org"}},
        },
    }
).encode()


def _cdevents(env: Env) -> Request:
    return {
        "Content-Type": "application/json",
        "Ce-Type": "dev.cdevents.change.merged.0.2.0",
        "Ce-Id": "271069a8-fc18-44f1-b38f-9d70a1695819",
        "Ce-Source": "/event/source/123",
        "Ce-Specversion": "1.0",
    }, CDEVENT_BODY


CASE = ReceiverCase(
    "cdevents",
    _cdevents,
    events=("Ce-Type", "dev.cdevents.change.merged.0.2.0", "dev.cdevents.build.started.0.2.0"),
    bad_payload=plain(b'{"context":{"type":"dev.cdevents.change.merged.0.2.0"},"subject":{}}'),
)


# ---- the verifier --------------------------------------------------------------------------------


async def test_cdevent_in_cloudevents_binary_mode() -> None:
    """reference §5.3 cdevents: structure validated, then ``Ce-Type`` against spec.events; ``ce-id`` dedups."""
    receiver, secret = make_receiver("cdevents", events=["dev.cdevents.change.merged.0.2.0"])
    h, path = await serve(receiver, secret)
    headers = {
        "Content-Type": "application/json",
        "Ce-Specversion": "1.0",
        "Ce-Source": "/event/source/123",
        "Ce-Type": "dev.cdevents.change.merged.0.2.0",
        "Ce-Id": "271069a8",
    }
    async with h:
        assert (await h.post(path, CDEVENT_BODY, headers))[0] == 200
        assert (await h.post(path, CDEVENT_BODY, headers))[0] == 200
        assert len(h.cluster.annotate_calls) == 1, "same ce-id: replay, not patched twice"
        event = json.loads(CDEVENT_BODY)
        mutations: list[Callable[[dict[str, Any]], object]] = [
            lambda e: e["context"].pop("id"),
            lambda e: e["context"].pop("timestamp"),
            lambda e: e["context"].update(type="dev.cdevents.change.exploded.0.2.0"),
            lambda e: e["context"].update(type="dev.cdevents.change.merged.1.0.0"),
            lambda e: e["context"].update(type="dev.cdeventsx.tool-thing.happened.0.1.0"),
            lambda e: e["context"].update(timestamp="yesterday"),
            lambda e: e["subject"].pop("id"),
            lambda e: e["subject"].update(type="build"),
            lambda e: e.pop("subject"),
        ]
        for mutate in mutations:
            broken = json.loads(CDEVENT_BODY)
            mutate(broken)
            status, _, _ = await h.post(
                path, json.dumps(broken).encode(), {**headers, "Ce-Id": str(id(mutate))}
            )
            assert status == 400, broken
        assert event["context"]["type"] == "dev.cdevents.change.merged.0.2.0"
        other = {**headers, "Ce-Type": "dev.cdevents.change.created.0.3.0", "Ce-Id": "x"}
        assert (await h.post(path, CDEVENT_BODY, other))[0] == 400, "Ce-Type not in spec.events"
        assert len(h.cluster.annotate_calls) == 1
