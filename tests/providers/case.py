"""The shape of one provider conformance case (one per provider type).

Each ``tests/providers/test_<type>.py`` module exports ``CASES: list[ProviderCase]`` (gathered by
``tests/providers/cases.py``); the kit in ``tests/conformance/test_provider_conformance.py`` runs every
case through the same matrix against real local servers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from notification_controller.api.event import Event

URL = "{url}"  # placeholder replaced by the capture server's base URL (e.g. http://127.0.0.1:PORT)


@dataclass
class ProviderCase:
    type: str
    spec: dict[str, Any]  # Provider spec (camelCase) without type/secretRef; strings may contain {url}
    secret: dict[str, str] = field(
        default_factory=dict
    )  # the secretRef Secret's stringData; may contain {url}
    event: Event | None = None  # None → the kit's sample event
    # Called with the list of captured requests (tests.support.capture.CapturedRequest) after one delivery;
    # asserts URL path, method, headers and body against the reference.
    expect: Callable[[list[Any]], None] | None = None
    http: bool = (
        True  # False: not delivered over HTTP (nats, pubsub...): the HTTP fault matrix does not apply
    )
    canaries: list[str] = field(default_factory=list)  # secret values that must never appear in errors/logs
    # Replies the capture server gives to non-final requests (e.g. a GET listing statuses before the POST):
    # mapping "METHOD path-regex" -> (status, json body)
    prelude: dict[str, tuple[int, Any]] = field(default_factory=dict)
    # Which captured request the fault matrix targets (its status is replaced by 5xx/4xx/429...):
    final: str = "POST"
    # The controller's environment while the notifier is built (API base overrides such as
    # TELEGRAM_API_BASE_URL or BITBUCKET_API_BASE_URL); values may contain {url}
    env: dict[str, str] = field(default_factory=dict)
