"""Secrets as types, and masking of every string that may reach a log, an Event or a status.

* ``SecretValue`` wraps a credential; ``str()``/``repr()`` print ``***``. Only ``reveal()`` gives the value.
* ``mask_token`` reproduces Flux's masking (regexp ``QuoteMeta(token)+"*"`` → ``*****``), so error texts read
  the same as Flux's (reference §3.6 step 11, §9).
* ``redact_url`` drops userinfo, path and query of a URL: webhook URLs (Slack, Teams, Discord) carry their
  credential in the path.
* ``Redactor`` masks any of a set of known secret values in a text: the last line of defence, applied by the
  logging filter and before writing Kubernetes Events and status messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

MASK = "*****"


class SecretValue:
    """A credential that never prints itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "SecretValue('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        # Equality of secrets is only used for change detection, never for authentication.
        return isinstance(other, SecretValue) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("SecretValue", len(self._value)))


def mask_token(text: str, token: str) -> str:
    """Flux's ``masktoken``: replace every match of ``re.escape(token) + '*'`` with ``*****``."""
    token = token.strip()
    if not token:
        return text
    return re.sub(re.escape(token) + "*", MASK, text)


def redact_url(url: str) -> str:
    """Keep scheme and host only: ``https://hooks.slack.com/services/T/B/X`` → ``https://hooks.slack.com/***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid url>"
    if not parts.scheme or not parts.hostname:
        return "<redacted>"
    host = parts.hostname
    if parts.port:
        host = f"{host}:{parts.port}"
    suffix = "/***" if (parts.path not in ("", "/") or parts.query) else ""
    return urlunsplit((parts.scheme, host, "", "", "")) + suffix


_URL_RE = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+")


def redact_urls_in(text: str) -> str:
    """Redact every URL found in a free text (exception messages of HTTP libraries embed them)."""
    return _URL_RE.sub(lambda m: redact_url(m.group(0)), text)


class Redactor:
    """Masks known secret values (minimum length 4, to avoid masking common short words)."""

    MIN_LEN = 4

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._pattern: re.Pattern[str] | None = None
        self.update(secrets)

    def update(self, secrets: Iterable[str]) -> None:
        values = sorted({s for s in secrets if len(s) >= self.MIN_LEN}, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)
