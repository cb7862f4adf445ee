"""HMAC signature checks shared by ``github``, ``bitbucket`` and ``generic-hmac`` (go-github's rules).

``validate_signature`` is go-github's ``ValidateSignature`` (``<algo>=<hex>``, algo ``sha1``/``sha256``/
``sha512``, HMAC keyed with the raw token over the RAW body) with its error texts, and two pinned tightenings
(docs/receivers/README.md): hex must be lowercase (as GitHub, Bitbucket and Flux's own generic-hmac provider
send it; Go's decoder also accepted uppercase), and the MAC is compared with ``hmac.compare_digest`` on bytes.

``validate_payload`` is go-github's ``ValidatePayload``: signature from ``X-Hub-Signature-256`` and, only when
that header is absent, from the legacy ``X-Hub-Signature`` (checklist A6/A7: the SHA-256 header always wins,
even when it is wrong and the legacy one is right); ``Content-Type`` must be ``application/json`` (payload =
body) or ``application/x-www-form-urlencoded`` (payload = the ``payload`` form field; the MAC is still over the
raw form body) — anything else is refused (checklist B10).
"""

from __future__ import annotations

import hmac
import re
from urllib.parse import unquote_to_bytes

from ..errors import ControllerError, VerificationError
from ..lib.goquote import quote as go_quote
from .base import HMACKey, HookRequest

SHA256_HEADER = "X-Hub-Signature-256"
SHA1_HEADER = "X-Hub-Signature"

# algorithm prefix → the digest name ``hmac.new`` takes
_ALGORITHMS: dict[bytes, str] = {b"sha1": "sha1", b"sha256": "sha256", b"sha512": "sha512"}
_HEX_DIGITS = b"0123456789abcdef"
_MEDIA_TYPE = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]+/[!#$%&'*+\-.^_`|~0-9a-z]+")


class SignatureError(ControllerError, ValueError):
    """go-github's error texts: ``missing signature``, ``payload signature check failed``..."""


def _show(raw: bytes) -> str:
    return go_quote(raw.decode("utf-8", errors="replace"))


def validate_signature(
    signature: bytes | None, body: bytes, key: bytes | HMACKey, *, only: bytes | None = None
) -> None:
    """Check ``<algo>=<hex>`` against HMAC(key, body). ``only`` restricts the algorithm (the -256 header).
    ``key`` is the raw token, or the ``HMACKey`` the server prepared for the Receiver (``VerifyContext.hmac_key``)."""
    if not signature:
        raise SignatureError("missing signature")
    algo, sep, hex_mac = signature.partition(b"=")
    if not sep:
        raise SignatureError("error parsing signature: expected <algorithm>=<hex>")
    name = _ALGORITHMS.get(algo)
    if name is None or (only is not None and algo != only):
        raise SignatureError("unknown hash type prefix")
    if len(hex_mac) % 2 or hex_mac.translate(None, _HEX_DIGITS):  # anything left is not lowercase hex
        raise SignatureError("error decoding signature: not lowercase hex of even length")
    mac = key.mac(name) if isinstance(key, HMACKey) else hmac.new(key, digestmod=name)
    mac.update(body)
    expected = mac.hexdigest().encode("ascii")
    if not hmac.compare_digest(hex_mac, expected):
        raise SignatureError("payload signature check failed")


_COMMON_MEDIA_TYPES = frozenset({"application/json", "application/x-www-form-urlencoded"})


def media_type(value: str) -> str:
    """Go's ``mime.ParseMediaType`` media type (lowercased, parameters dropped); errors as Go words them."""
    if value in _COMMON_MEDIA_TYPES:  # what senders send: the answer is the value
        return value
    media = value.split(";", 1)[0].strip().lower()
    if not media:
        raise SignatureError("mime: no media type")
    if not _MEDIA_TYPE.fullmatch(media):
        raise SignatureError(
            "mime: expected token after slash" if "/" in media else "mime: expected slash after first token"
        )
    return media


def parse_form(body: bytes) -> dict[bytes, list[bytes]]:
    """Go's ``url.ParseQuery``: ``&``-separated, ``;`` refused, invalid ``%`` escapes refused."""
    out: dict[bytes, list[bytes]] = {}
    for part in body.split(b"&"):
        if not part:
            continue
        if b";" in part:
            raise SignatureError("invalid semicolon separator in query")
        key, _, value = part.partition(b"=")
        out.setdefault(_unescape(key), []).append(_unescape(value))
    return out


_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")


def _unescape(raw: bytes) -> bytes:
    match = _BAD_ESCAPE.search(raw)
    if match:
        raise SignatureError(f"invalid URL escape {_show(raw[match.start() : match.start() + 3])}")
    return unquote_to_bytes(raw.replace(b"+", b" "))


def validate_payload(req: HookRequest, key: bytes | HMACKey) -> bytes:
    """go-github ``ValidatePayload``: returns the JSON payload; raises ``SignatureError``.

    Pinned: a signature is always required (go-github skips the check when the token is empty and no
    signature is sent, which would make an empty-token receiver unauthenticated).
    """
    signature = req.headers.single(SHA256_HEADER)
    only: bytes | None = b"sha256"
    if signature is None:  # the legacy header counts only when the SHA-256 one is absent (even if empty)
        signature = req.headers.single(SHA1_HEADER)
        only = None
    media = media_type(req.headers.text("Content-Type"))
    if media == "application/json":
        payload = req.body
    elif media == "application/x-www-form-urlencoded":
        payload = b""
        values = parse_form(req.body).get(b"payload")
        if values:
            payload = values[0]
    else:
        raise SignatureError(f"webhook request has unsupported Content-Type {go_quote(media)}")
    if not (key.raw if isinstance(key, HMACKey) else key):
        raise SignatureError("the receiver token is empty")
    validate_signature(signature, req.body, key, only=only)
    return payload


def check_payload(req: HookRequest, key: bytes | HMACKey, prefix: str) -> bytes:
    """``validate_payload`` with errors wrapped as Flux words them (``<prefix>, err: <error>``)."""
    try:
        return validate_payload(req, key)
    except SignatureError as exc:
        raise VerificationError(f"{prefix}, err: {exc}") from None
