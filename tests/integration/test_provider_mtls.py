"""mTLS towards a provider with certificates the test mints (issue 5; reference §3.8 certSecretRef)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from notification_controller.api.event import Event
from notification_controller.errors import RetryableDeliveryError
from notification_controller.objects.base import ObjectStore
from notification_controller.objects.local import load_directory
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.providers.base import DeliveryContext
from notification_controller.providers.options import resolve_options
from notification_controller.providers.registry import create_notifier
from tests.support.capture import CaptureServer, TLSMaterial, mint_tls

EVENT = Event.model_validate(
    {"involvedObject": {"kind": "Kustomization", "namespace": "ns", "name": "app"}, "message": "mtls"}
)


def _indent(pem: bytes) -> str:
    return textwrap.indent(pem.decode(), "    ")


def store_with(tmp: Path, url: str, tls: TLSMaterial, *, client_cert: bool) -> ObjectStore:
    cert = (
        f"  tls.crt: |\n{_indent(tls.client_cert_pem)}\n  tls.key: |\n{_indent(tls.client_key_pem)}\n"
        if client_cert
        else ""
    )
    (tmp / "objects.yaml").write_text(
        f"apiVersion: v1\nkind: Secret\nmetadata: {{name: certs, namespace: ns}}\nstringData:\n"
        f"  ca.crt: |\n{_indent(tls.ca_pem)}\n{cert}"
        "---\napiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Provider\n"
        f"metadata: {{name: p, namespace: ns}}\nspec: {{type: generic, address: '{url}/mtls', certSecretRef: {{name: certs}}}}\n"
    )
    result = load_directory(tmp)
    assert result.errors == []
    store = ObjectStore()
    for obj in result.objects:
        store.upsert(obj)
    return store


async def deliver(store: ObjectStore) -> OutboundHTTP:
    provider = store.provider("ns", "p")
    assert provider is not None
    notifier = create_notifier(resolve_options(provider, store.secret))
    http = OutboundHTTP(RetryPolicy(max_attempts=3, wait_min=0.01, wait_max=0.02))
    await http.start()
    try:
        await notifier.post(EVENT, DeliveryContext(http=http))
    finally:
        await http.close()
    return http


async def test_client_certificate_from_cert_secret_ref_is_presented(tmp_path: Path) -> None:
    tls = mint_tls()
    async with CaptureServer(tls=tls, require_client_cert=True) as server:
        await deliver(store_with(tmp_path, server.url, tls, client_cert=True))
        [request] = await server.wait_for(1)
        assert request.path == "/mtls"
        assert request.json()["message"] == "mtls"


async def test_without_a_client_certificate_the_server_refuses_the_connection(tmp_path: Path) -> None:
    """TLS 1.3 servers reject a missing client certificate after the handshake: the client sees a reset.

    That is indistinguishable from a transient reset, so it is retried (bounded) as a connection error; the
    error text carries no URL path, and the server never sees a request.
    """
    tls = mint_tls()
    async with CaptureServer(tls=tls, require_client_cert=True) as server:
        with pytest.raises(RetryableDeliveryError) as caught:
            await deliver(store_with(tmp_path, server.url, tls, client_cert=False))
        assert server.requests == []
        assert caught.value.reason == "connection"
        assert "/mtls" not in str(caught.value)
