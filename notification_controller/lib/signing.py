"""``X-Signature: sha256=<hex>``: the HMAC-SHA256 of a body, as the generic-hmac provider and hooks sign."""

from __future__ import annotations

import hashlib
import hmac


def hmac_signature(key: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
