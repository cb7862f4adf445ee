"""Checks shared by provider constructors."""

from __future__ import annotations

from urllib.parse import urlsplit

from ..errors import ProviderConfigError


def require_url(address: str, *, what: str = "address") -> str:
    """Go's ``url.ParseRequestURI`` on an http(s) URL: absolute, with a host. Never echoes credentials."""
    if not address:
        raise ProviderConfigError(f"invalid {what}: empty (set spec.address or the Secret's 'address' key)")
    try:
        parts = urlsplit(address)
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError as exc:
        raise ProviderConfigError(f"invalid {what}: not a valid URL") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProviderConfigError(f"invalid {what}: must be an absolute http or https URL")
    return address
