"""The shape of one receiver conformance case (one per receiver type), and how to break a valid request.

Each ``tests/receivers/test_<type>.py`` module exports ``CASE: ReceiverCase`` (gathered by
``tests/receivers/cases.py``); the kit in ``tests/conformance/test_receiver_conformance.py`` runs every case
through the same matrix over HTTP against the real receiver app.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jwt

from tests.support.receiver_kit import LocalIssuer

Request = tuple[dict[str, str], bytes]


@dataclass
class Env:
    """What a case needs to build requests: the token, the issuer (oidc types) and the clock."""

    token: str
    issuer: LocalIssuer
    now: datetime


@dataclass
class ReceiverCase:
    type: str
    valid: Callable[[Env], Request]
    # name → a request that must be refused by authentication (empty for types without authentication)
    forged: dict[str, Callable[[Env], Request]] = field(default_factory=dict)
    # (header, accepted event, refused event) for types with ``spec.events``
    events: tuple[str, str, str] | None = None
    # a request with a malformed payload (types that validate the body)
    bad_payload: Callable[[Env], Request] | None = None
    secret_data: dict[str, str] = field(default_factory=dict)
    oidc_providers: Callable[[Env], list[dict[str, Any]]] | None = None
    settings: Callable[[Env], dict[str, Any]] | None = None


GENERIC_BODY = b'{"hello":"world"}'


def with_headers(fn: Callable[[Env], Request], **changes: str | None) -> Callable[[Env], Request]:
    def build(env: Env) -> Request:
        headers, body = fn(env)
        headers = dict(headers)
        for key, value in changes.items():
            key = key.replace("_", "-")
            if value is None:
                headers.pop(key, None)
            else:
                headers[key] = value
        return headers, body

    return build


def mutate_header(
    fn: Callable[[Env], Request], header: str, how: Callable[[str], str]
) -> Callable[[Env], Request]:
    def build(env: Env) -> Request:
        headers, body = fn(env)
        headers = dict(headers)
        headers[header] = how(headers[header])
        return headers, body

    return build


def flip_last(value: str) -> str:
    return value[:-1] + ("0" if value[-1] != "0" else "1")


def signature_forgeries(fn: Callable[[Env], Request], header: str) -> dict[str, Callable[[Env], Request]]:
    return {
        "wrong": mutate_header(fn, header, flip_last),
        "missing": with_headers(fn, **{header.replace("-", "_"): None}),
        "truncated": mutate_header(fn, header, lambda v: v[: len(v) // 2]),
        "other-key": resign(fn, header),
    }


def resign(fn: Callable[[Env], Request], header: str) -> Callable[[Env], Request]:
    def build(env: Env) -> Request:
        headers, body = fn(Env("another-receivers-token", env.issuer, env.now))
        return headers, body

    return build


def token_forgeries(fn: Callable[[Env], Request]) -> dict[str, Callable[[Env], Request]]:
    def foreign_key(env: Env) -> Request:
        headers, body = fn(env)
        token = headers["Authorization"].removeprefix("Bearer ")
        claims = jwt.decode(token, options={"verify_signature": False})
        forged = env.issuer.mint(claims, key=env.issuer.other)
        return {**headers, "Authorization": f"Bearer {forged}"}, body

    return {
        "wrong": mutate_header(
            fn, "Authorization", lambda v: v[:-3] + ("AAA" if not v.endswith("AAA") else "BBB")
        ),
        "missing": with_headers(fn, Authorization=None),
        "truncated": mutate_header(fn, "Authorization", lambda v: v[: len(v) // 2]),
        "other-key": foreign_key,
    }


def plain(body: bytes) -> Callable[[Env], Request]:
    return lambda env: ({"Content-Type": "application/json"}, body)
