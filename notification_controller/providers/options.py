"""Resolve a Provider and its Secrets into ``ProviderOptions`` (reference §3.8), or fail clearly.

Errors are ``ProviderConfigError`` (the spec or Secret content is wrong) or ``ObjectReferenceError``
(a referenced Secret is missing); their messages name the Secret and key, never a value.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from urllib.parse import quote, urlsplit, urlunsplit

import yaml

from ..api.common import Secret
from ..api.provider import COMMIT_STATUS_TYPES, Provider
from ..core.conditions import SECRET_NOT_FOUND
from ..core.redact import SecretValue
from ..errors import ObjectReferenceError, ProviderConfigError
from .base import ProviderOptions

MAX_ADDRESS = 2048
SecretGetter = Callable[[str, str], Secret | None]


def _get_secret(get: SecretGetter, namespace: str, name: str) -> Secret:
    secret = get(namespace, name)
    if secret is None:
        raise ObjectReferenceError(
            f"failed to get secret '{namespace}/{name}': not found", reason=SECRET_NOT_FOUND
        )
    return secret


def parse_headers(raw: bytes) -> dict[str, str]:
    """The Secret's ``headers`` key: a YAML map of strings."""
    try:
        data = yaml.safe_load(raw.decode("utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        raise ProviderConfigError("failed to read headers from secret: invalid YAML") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProviderConfigError(
            "failed to read headers from secret: expected a map of header names to values"
        )
    return {str(k): "" if v is None else str(v) for k, v in data.items()}


def tls_context(secret: Secret) -> ssl.SSLContext:
    """CA only, client cert+key only (system roots), or both. Keys ``ca.crt``/``tls.crt``/``tls.key``
    preferred over the legacy ``caFile``/``certFile``/``keyFile``."""
    ca = secret.data.get("ca.crt") or secret.data.get("caFile")
    cert = secret.data.get("tls.crt") or secret.data.get("certFile")
    key = secret.data.get("tls.key") or secret.data.get("keyFile")
    where = f"'{secret.metadata.namespace}/{secret.metadata.name}'"
    if not ca and not (cert and key):
        if cert or key:
            raise ProviderConfigError(
                f"failed to get TLS config: secret {where} must contain both tls.crt and tls.key"
            )
        raise ProviderConfigError(
            f"failed to get TLS config: secret {where} has no ca.crt nor tls.crt/tls.key"
        )
    if (cert and not key) or (key and not cert):
        raise ProviderConfigError(
            f"failed to get TLS config: secret {where} must contain both tls.crt and tls.key"
        )
    ctx = ssl.create_default_context()
    if ca:
        try:
            ctx.load_verify_locations(cadata=ca.decode("utf-8", errors="replace"))
        except (ssl.SSLError, ValueError) as exc:
            raise ProviderConfigError("failed to get TLS config: failed to parse CA certificate") from exc
    if cert and key:
        # ssl only loads client certificates from files: write them to a private temp dir, briefly.
        with tempfile.TemporaryDirectory(prefix="nc-tls-") as tmp:
            cert_path, key_path = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
            for path, data in ((cert_path, cert), (key_path, key)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
            try:
                ctx.load_cert_chain(cert_path, key_path)
            except (ssl.SSLError, ValueError) as exc:
                raise ProviderConfigError(
                    f"failed to get TLS config: invalid client certificate or key in secret {where}"
                ) from exc
    return ctx


def proxy_from_secret(secret: Secret) -> SecretValue:
    where = f"'{secret.metadata.namespace}/{secret.metadata.name}'"
    address = (secret.get_str("address") or "").strip()
    if not address:
        raise ProviderConfigError(f"failed to get proxy URL: secret {where} has no 'address'")
    if len(address) > MAX_ADDRESS:
        raise ProviderConfigError(
            f"failed to get proxy URL: address in secret {where} exceeds {MAX_ADDRESS} bytes"
        )
    try:
        parts = urlsplit(address)
    except ValueError as exc:
        raise ProviderConfigError(f"failed to get proxy URL: invalid address in secret {where}") from exc
    if parts.scheme not in ("http", "https", "socks5") or not parts.hostname:
        raise ProviderConfigError(
            f"failed to get proxy URL: address in secret {where} must be an http, https or socks5 URL with a host"
        )
    username, password = secret.get_str("username"), secret.get_str("password")
    if username or password:
        userinfo = quote(username or "", safe="") + ":" + quote(password or "", safe="")
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        address = urlunsplit((parts.scheme, f"{userinfo}@{host}", parts.path, parts.query, parts.fragment))
    return SecretValue(address)


def resolve_options(provider: Provider, get_secret: SecretGetter) -> ProviderOptions:
    spec, meta = provider.spec, provider.metadata
    ns = meta.namespace
    address = (spec.address or "").strip()
    username = spec.username or ""
    token: SecretValue | None = None
    password: SecretValue | None = None
    headers: dict[str, str] = {}
    proxy: SecretValue | None = SecretValue(spec.proxy) if spec.proxy else None
    secret_data: dict[str, bytes] = {}
    tls: ssl.SSLContext | None = None

    if spec.secret_ref is not None:
        secret = _get_secret(get_secret, ns, spec.secret_ref.name)
        secret_data = dict(secret.data)
        where = f"'{ns}/{spec.secret_ref.name}'"
        if "address" in secret.data:
            raw = secret.data["address"]
            if len(raw) > MAX_ADDRESS:
                raise ProviderConfigError(
                    f"invalid address in secret: address exceeds maximum length of {MAX_ADDRESS} bytes"
                )
            address = raw.decode("utf-8", errors="replace").strip()
        if "proxy" in secret.data:
            text = (secret.get_str("proxy") or "").strip()
            try:
                parts = urlsplit(text)
            except ValueError as exc:
                raise ProviderConfigError(f"invalid 'proxy' in secret {where}") from exc
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ProviderConfigError(
                    f"invalid 'proxy' in secret {where}: must be an http or https URL with a host"
                )
            proxy = SecretValue(text)
        if "headers" in secret.data:
            headers = parse_headers(secret.data["headers"])
        if "token" in secret.data:
            token = SecretValue(secret.data["token"].decode("utf-8", errors="replace"))
        user, pwd = secret.get_str("username"), secret.get_str("password")
        if user is not None and pwd is not None:
            username = user
            password = SecretValue(pwd)
        elif pwd is not None:
            password = SecretValue(pwd)
        if spec.cert_secret_ref is None and spec.type in COMMIT_STATUS_TYPES:
            if "ca.crt" in secret.data or ("tls.crt" in secret.data and "tls.key" in secret.data):
                tls = tls_context(secret)

    if spec.proxy_secret_ref is not None:
        proxy = proxy_from_secret(_get_secret(get_secret, ns, spec.proxy_secret_ref.name))

    if spec.cert_secret_ref is not None:
        tls = tls_context(_get_secret(get_secret, ns, spec.cert_secret_ref.name))

    try:
        timeout = spec.timeout_seconds()
    except ValueError as exc:
        raise ProviderConfigError(str(exc)) from exc

    return ProviderOptions(
        type=spec.type,
        name=meta.name,
        namespace=ns,
        uid=meta.uid,
        address=address,
        channel=spec.channel or "",
        username=username,
        token=token,
        password=password,
        headers=headers,
        proxy=proxy,
        tls=tls,
        timeout=timeout,
        secret_data=secret_data,
        provider=provider,
    )
