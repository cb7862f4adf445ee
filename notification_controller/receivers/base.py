"""The shapes every receiver verifier shares: the request, the context, the verdict, and small helpers.

A verifier is ``async def verify(req: HookRequest, ctx: VerifyContext) -> Verified`` (reference §5.3). It is
pure except for ``generic-oidc`` and ``gcr``, which fetch signing keys through ``ctx.oidc``. Verifiers never
see aiohttp: ``HookRequest`` carries the RAW header bytes exactly as received, so signatures and tokens are
compared on bytes (``hmac.compare_digest``) and a header with non-ASCII or invalid UTF-8 bytes gives a
``VerificationError`` (400), never an exception from a codec (checklist A5).

Failures raise ``errors.VerificationError`` with Flux's message; the server answers ``status`` (400, as Flux
does for every validation failure, reference §5.2 step 4).
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import orjson

from ..api.common import Secret
from ..api.receiver import Receiver
from ..errors import ControllerError, VerificationError
from ..lib.clock import Clock
from ..lib.goquote import quote as go_quote  # Go's %q, one home (issue 24 item 3)

if TYPE_CHECKING:
    from ..sandbox import SandboxPool
    from .oidc import OIDCClient

TOKEN_KEY = "token"


class RawHeaders:
    """A case-insensitive multi-mapping of header names to RAW value bytes, in arrival order.

    Built from the HTTP layer's raw ``(name, value)`` byte pairs (``from_wire``). ``str`` names/values are
    accepted too and encoded with ``surrogateescape`` so that a surrogate-escaped ``str`` maps back to the
    bytes that were on the wire.
    """

    __slots__ = ("_by_name", "_items", "_pairs")

    def __init__(self, items: Iterable[tuple[bytes | str, bytes | str]] = ()) -> None:
        converted = tuple((_b(k).lower(), _b(v)) for k, v in items)
        self._items: tuple[tuple[bytes, bytes], ...] | None = converted
        self._pairs: Sequence[tuple[bytes, bytes]] = ()
        self._by_name: dict[bytes, list[bytes]] = {}
        for key, value in converted:
            self._by_name.setdefault(key, []).append(value)

    @classmethod
    def from_wire(cls, pairs: Sequence[tuple[bytes, bytes]]) -> RawHeaders:
        """From byte pairs as parsed (``server/http1.py``'s ``Request.headers``): one pass. A value loses the
        spaces and tabs around it (RFC 9110 §5.5, as Go and aiohttp read it; llhttp keeps trailing ones)."""
        self = cls.__new__(cls)
        by_name: dict[bytes, list[bytes]] = {}
        for name, raw in pairs:
            key = name.lower()
            values = by_name.get(key)
            if values is None:
                by_name[key] = [raw.strip(b" \t")]
            else:
                values.append(raw.strip(b" \t"))
        self._by_name = by_name
        self._items = None  # made if asked for: a webhook reads a few headers by name
        self._pairs = pairs
        return self

    def _all(self) -> tuple[tuple[bytes, bytes], ...]:
        if self._items is None:
            self._items = tuple((name.lower(), raw.strip(b" \t")) for name, raw in self._pairs)
        return self._items

    def getall(self, name: str) -> list[bytes]:
        return list(self._by_name.get(_key(name), ()))

    def get(self, name: str) -> bytes | None:
        """The first value (Go's ``Header.Get``), or None when absent."""
        values = self._by_name.get(_key(name))
        return values[0] if values else None

    def single(self, name: str) -> bytes | None:
        """The only value of an authentication header; two or more values are ambiguous → 400 (A8)."""
        values = self._by_name.get(_key(name), ())
        if len(values) > 1:
            raise VerificationError(f"the {name} header is repeated")
        return values[0] if values else None

    def text(self, name: str) -> str:
        """The first value as text ("" when absent), rejecting bytes that are not printable ASCII/UTF-8."""
        value = self.get(name)
        if value is None:
            return ""
        return header_text(name, value)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __len__(self) -> int:
        return len(self._all())

    def items(self) -> tuple[tuple[bytes, bytes], ...]:
        return self._all()

    def __repr__(self) -> str:  # never print values: they may be credentials
        return f"RawHeaders({sorted({k.decode('latin-1') for k, _ in self._all()})})"


_KEYS: dict[str, bytes] = {}


def _key(name: str) -> bytes:
    """The lookup key of a header name (lower-case bytes), remembered: the names are the verifiers' constants."""
    key = _KEYS.get(name)
    if key is None:
        key = name.lower().encode("ascii")
        if len(_KEYS) < 256:  # bounded, whoever calls
            _KEYS[name] = key
    return key


def _b(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8", errors="surrogateescape")


def header_text(name: str, value: bytes) -> str:
    """Decode a header value for use as text (event types, media types); malformed bytes → 400."""
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        raise VerificationError(f"the {name} header is not valid UTF-8") from None
    if not text.isprintable() and any((ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F for ch in text):
        raise VerificationError(f"the {name} header contains control characters")
    return text


class HookRequest(NamedTuple):
    """One webhook request as received: method, raw request-target (path + query), raw headers, body.
    (A named tuple: made per request, and a frozen dataclass's ``__init__`` cost ~1 µs more.)"""

    method: str
    path: str
    headers: RawHeaders
    body: bytes


class Verified(NamedTuple):
    """The verdict of a verifier when the request is authentic and well-formed (a named tuple: one per
    request, cheaper to make than a frozen dataclass).

    * ``body``: what CEL filters see as ``req`` (github/bitbucket: the ``payload``; gcr: the unwrapped data);
    * ``event``: the sender's event type, if the type has one;
    * ``claims``: the OIDC claims (generic-oidc only; exposed to CEL as ``claims``);
    * ``ping``: a connectivity test (GitHub ``ping``, Bitbucket ``diagnostics:ping``): answer 200, no patch;
    * ``delivery_id``: the sender's unique delivery id, for replay protection.
    """

    body: bytes
    event: str | None = None
    claims: Mapping[str, Any] | None = None
    ping: bool = False
    delivery_id: str | None = None


@dataclass(frozen=True)
class GCRSettings:
    """Where ``gcr`` tokens come from. Flux hard-codes Google; tests inject a local issuer's key set."""

    jwks_url: str = "https://www.googleapis.com/oauth2/v3/certs"
    issuers: frozenset[str] = frozenset({"accounts.google.com", "https://accounts.google.com"})


@dataclass(frozen=True)
class VerifyContext:
    """Everything a verifier may need besides the request. Built per request by the server."""

    receiver: Receiver
    secret: Secret | None
    clock: Clock
    oidc: OIDCClient | None = None
    gcr: GCRSettings = field(default_factory=GCRSettings)
    sandbox: SandboxPool | None = None
    """Where CEL beyond the inline-safe subset runs (generic-oidc claims); None: in process."""

    @functools.cached_property
    def hmac_key(self) -> HMACKey:
        """The token as HMAC key objects, prepared once for this context (the server keeps one context per
        Receiver and Secret version)."""
        return HMACKey(self.token)

    @property
    def token(self) -> bytes:
        """The raw ``token`` of the Secret (never trimmed, reference §9). Presence is checked beforehand."""
        if self.secret is None:
            return b""
        return self.secret.data.get(TOKEN_KEY, b"")

    @property
    def events(self) -> Sequence[str]:
        return self.receiver.spec.events or ()

    @functools.cached_property
    def folded_events(self) -> frozenset[str] | None:
        """``spec.events`` case-folded, once per context (the server keeps one per Receiver version); None
        when the list is empty (everything is allowed)."""
        events = self.events
        return frozenset(e.casefold() for e in events) if events else None

    def secret_field(self, key: str) -> bytes | None:
        return None if self.secret is None else self.secret.data.get(key)


class HMACKey:
    """A receiver token as HMAC key objects, one per digest, each prepared on first use: a request copies one
    (``mac``) instead of deriving the key again (an HMAC's key setup is two hash blocks; the copy ~0.3 µs less
    than ``hmac.new`` per request, measured against it with timeit on a 3 KB push)."""

    __slots__ = ("_prepared", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._prepared: dict[str, hmac.HMAC] = {}

    def mac(self, digest: str) -> hmac.HMAC:
        """A fresh HMAC of the token with ``digest`` (``sha1``, ``sha256``, ``sha512``), ready for ``update``."""
        prepared = self._prepared.get(digest)
        if prepared is None:
            prepared = self._prepared[digest] = hmac.new(self.raw, digestmod=digest)
        return prepared.copy()

    def __repr__(self) -> str:  # never print the token
        return "HMACKey(***)"


class Verifier(Protocol):
    async def __call__(self, req: HookRequest, ctx: VerifyContext) -> Verified: ...


# ---- helpers ---------------------------------------------------------------------------------------


def event_allowed(event: str, allowed: Sequence[str]) -> bool:
    """Flux: an empty list allows everything; otherwise Go's ``strings.EqualFold`` against each entry."""
    if not allowed:
        return True
    folded = event.casefold()
    return any(folded == e.casefold() for e in allowed)


def require_event(event: str, ctx: VerifyContext, message: str) -> None:
    """Raise ``message % event`` (Go ``%q``) when the event is not in ``spec.events`` (``event_allowed``, with
    the list folded once per context: ``VerifyContext.folded_events``)."""
    allowed = ctx.folded_events
    if allowed is not None and event.casefold() not in allowed:
        raise VerificationError(message.format(go_quote(event)))


def tokens_equal(given: bytes | None, expected: bytes) -> bool:
    """Constant-time equality of a header value and the receiver token, on bytes.

    Pinned (README "empty token"): an empty token never authenticates anything, and a missing header never
    matches (Flux compares ``""`` with the token, so an empty token accepted requests with no header).
    """
    if given is None or not expected:
        return False
    return hmac.compare_digest(given, expected)


class JSONShapeError(ControllerError, ValueError):
    """A body does not decode into the Go struct a verifier expects."""


def load_json(body: bytes) -> Any:
    """Strict JSON: NaN/Infinity, invalid UTF-8, depth > 1024 and trailing data are errors (never a crash)."""
    if not body.strip():
        raise JSONShapeError("unexpected end of JSON input")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise JSONShapeError(str(exc)) from None


# A shape is a Go struct: field name → "string" | "[]string" | a nested shape.
Shape = Mapping[str, Any]


def decode_struct(body: bytes, shape: Shape) -> dict[str, Any]:
    """Decode ``body`` like Go's ``json.Unmarshal`` into a struct of ``shape``.

    Go semantics kept: unknown fields ignored, field names matched case-insensitively, ``null`` leaves the
    zero value, a top-level ``null`` is accepted; a wrong JSON type is an error. Returns the struct with
    every field (zero values filled), in field order.
    """
    return _match(load_json(body), shape, "")


def _zero(spec: Any) -> Any:
    if isinstance(spec, str):
        return "" if spec == "string" else []
    return {k: _zero(v) for k, v in spec.items()}


def _match(value: Any, shape: Shape, where: str) -> dict[str, Any]:
    out = {k: _zero(v) for k, v in shape.items()}
    if value is None:
        return out
    if not isinstance(value, dict):
        raise JSONShapeError(f"cannot unmarshal {_json_type(value)} into Go value of type struct{where}")
    folded = {k.casefold(): k for k in shape}
    for key, item in value.items():
        name = key if key in shape else folded.get(key.casefold())
        if name is None or item is None:
            continue
        spec = shape[name]
        path = f"{where}.{name}" if where else name
        if spec == "string":
            if not isinstance(item, str):
                raise JSONShapeError(
                    f"cannot unmarshal {_json_type(item)} into Go struct field {path} of type string"
                )
            out[name] = item
        elif spec == "[]string":
            if not isinstance(item, list) or not all(isinstance(i, str) or i is None for i in item):
                raise JSONShapeError(
                    f"cannot unmarshal {_json_type(item)} into Go struct field {path} of type []string"
                )
            out[name] = ["" if i is None else i for i in item]
        elif isinstance(spec, Mapping):
            out[name] = _match(item, spec, path)
    return out


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"
