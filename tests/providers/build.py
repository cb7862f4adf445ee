"""Turn a ``ProviderCase`` into the real objects: Provider, Secrets, ProviderOptions and the notifier.

Notifiers are built through the production path (``resolve_options`` with a Secret getter, then
``create_notifier``), so the kit exercises the same code the controller runs. Placeholders in spec
and Secret strings: ``{url}`` (capture server base URL, e.g. ``http://127.0.0.1:PORT``), ``{scheme}``
and ``{host}`` (``127.0.0.1:PORT``) for addresses that need userinfo, such as a Sentry DSN.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from notification_controller.api.common import Secret
from notification_controller.api.event import Event
from notification_controller.api.provider import Provider
from notification_controller.providers.base import Notifier, ProviderOptions
from notification_controller.providers.options import resolve_options
from notification_controller.providers.registry import create_notifier
from tests.providers.case import ProviderCase

NAMESPACE = "conformance"
PROVIDER_NAME = "under-test"
PROVIDER_UID = "6f1c3d2e-8b7a-4c5d-9e0f-112233445566"
SECRET_NAME = "provider-secret"
PROXY_SECRET_NAME = "proxy-secret"
CERT_SECRET_NAME = "cert-secret"

SAMPLE_REVISION = "main@sha1:0123456789abcdef0123456789abcdef01234567"

# The kit's sample event (reference §2): an info event after metadata combination (plain keys).
SAMPLE_EVENT = Event.from_raw(
    {
        "involvedObject": {
            "kind": "GitRepository",
            "namespace": "gitops-system",
            "name": "webapp",
            "uid": "a1b2c3d4-0000-4000-8000-00000000beef",
            "apiVersion": "source.toolkit.fluxcd.io/v1",
        },
        "severity": "info",
        "timestamp": "2026-03-01T10:20:30Z",
        "message": "stored artifact for revision 'main@sha1:0123456'\nfetched 3 files",
        "reason": "ReconciliationSucceeded",
        "metadata": {"revision": SAMPLE_REVISION, "summary": "Cluster prod-eu"},
        "reportingController": "source-controller",
        "reportingInstance": "source-controller-7f9c",
    }
)


def fill(value: Any, url: str) -> Any:
    """Replace the placeholders in every string of ``value`` (dicts and lists walked)."""
    if isinstance(value, str):
        parts = urlsplit(url)
        return value.replace("{url}", url).replace("{scheme}", parts.scheme).replace("{host}", parts.netloc)
    if isinstance(value, dict):
        return {k: fill(v, url) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, url) for v in value]
    return value


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block, then restore what was there."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


@dataclass
class Built:
    provider: Provider
    secrets: dict[tuple[str, str], Secret] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the case's environment, placeholders filled

    def get_secret(self, namespace: str, name: str) -> Secret | None:
        return self.secrets.get((namespace, name))

    def options(self) -> ProviderOptions:
        return resolve_options(self.provider, self.get_secret)

    def notifier(self) -> Notifier:
        with environment(self.env):
            return create_notifier(self.options())


def secret(name: str, string_data: dict[str, str]) -> Secret:
    return Secret.from_manifest(
        {"metadata": {"name": name, "namespace": NAMESPACE}, "stringData": string_data}
    )


def build(
    case: ProviderCase,
    url: str,
    *,
    timeout: str | None = None,
    proxy: dict[str, str] | None = None,
    ca_pem: bytes | None = None,
) -> Built:
    """Provider + Secrets for ``case`` against the server at ``url``.

    ``proxy`` is the ``proxySecretRef`` Secret content; ``ca_pem`` goes to a ``certSecretRef`` Secret.
    """
    spec: dict[str, Any] = {"type": case.type, **fill(case.spec, url)}
    secrets: dict[tuple[str, str], Secret] = {}
    if case.secret:
        spec["secretRef"] = {"name": SECRET_NAME}
        secrets[(NAMESPACE, SECRET_NAME)] = secret(SECRET_NAME, fill(case.secret, url))
    if proxy is not None:
        spec["proxySecretRef"] = {"name": PROXY_SECRET_NAME}
        secrets[(NAMESPACE, PROXY_SECRET_NAME)] = secret(PROXY_SECRET_NAME, proxy)
    if ca_pem is not None:
        spec["certSecretRef"] = {"name": CERT_SECRET_NAME}
        secrets[(NAMESPACE, CERT_SECRET_NAME)] = secret(CERT_SECRET_NAME, {"ca.crt": ca_pem.decode()})
    if timeout is not None:
        spec["timeout"] = timeout
    provider = Provider.model_validate(
        {"metadata": {"name": PROVIDER_NAME, "namespace": NAMESPACE, "uid": PROVIDER_UID}, "spec": spec}
    )
    return Built(provider, secrets, fill(case.env, url))
