"""The receiver webhook path formula (reference §5.1)."""

from __future__ import annotations

import hashlib

HOOK_PREFIX = "/hook/"


def webhook_path(token: bytes, name: str, namespace: str) -> str:
    """``/hook/`` + lowercase hex SHA-256 of token + name + namespace (plain concatenation, raw token)."""
    digest = hashlib.sha256(token + name.encode() + namespace.encode()).hexdigest()
    return HOOK_PREFIX + digest


def path_digest_prefix(path: str) -> str:
    """A short, non-secret label for logs: the first 8 hex characters of the digest."""
    return path.removeprefix(HOOK_PREFIX)[:8] + "…"
