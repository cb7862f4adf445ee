"""proxySecretRef with a socks5 address and credentials (issue 5; reference §3.8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from notification_controller.api.event import Event
from notification_controller.errors import PermanentDeliveryError
from notification_controller.objects.base import ObjectStore
from notification_controller.objects.local import load_directory
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.providers.base import DeliveryContext
from notification_controller.providers.options import resolve_options
from notification_controller.providers.registry import create_notifier
from tests.support.capture import CaptureServer
from tests.support.socks5 import Socks5Proxy

EVENT = Event.model_validate(
    {"involvedObject": {"kind": "Kustomization", "namespace": "ns", "name": "app"}, "message": "via socks"}
)


def store_for(tmp: Path, sink: str, proxy: str, password: str) -> ObjectStore:
    (tmp / "objects.yaml").write_text(
        f"""\
apiVersion: v1
kind: Secret
metadata: {{name: proxy, namespace: ns}}
stringData: {{address: "{proxy}", username: flux, password: "{password}"}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: p, namespace: ns}}
spec: {{type: generic, address: "{sink}/socks", proxySecretRef: {{name: proxy}}}}
"""
    )
    result = load_directory(tmp)
    assert result.errors == []
    store = ObjectStore()
    for obj in result.objects:
        store.upsert(obj)
    return store


async def post(store: ObjectStore) -> None:
    provider = store.provider("ns", "p")
    assert provider is not None
    http = OutboundHTTP(RetryPolicy(max_attempts=2, wait_min=0.01, wait_max=0.02))
    await http.start()
    try:
        await create_notifier(resolve_options(provider, store.secret)).post(EVENT, DeliveryContext(http=http))
    finally:
        await http.close()


async def test_delivery_goes_through_the_socks5_proxy_with_credentials(tmp_path: Path) -> None:
    async with CaptureServer() as sink, Socks5Proxy(require_auth=("flux", "s3cret-proxy")) as proxy:
        await post(store_for(tmp_path, sink.url, proxy.url, "s3cret-proxy"))
        [request] = await sink.wait_for(1)
        assert request.json()["message"] == "via socks"
        assert proxy.targets == [f"127.0.0.1:{sink.port}"]
        assert proxy.credentials == [("flux", "s3cret-proxy")]


async def test_wrong_proxy_credentials_fail_permanently_without_leaking_them(tmp_path: Path) -> None:
    async with CaptureServer() as sink, Socks5Proxy(require_auth=("flux", "right")) as proxy:
        with pytest.raises(PermanentDeliveryError) as caught:
            await post(store_for(tmp_path, sink.url, proxy.url, "wrong-canary-pw"))
        assert caught.value.reason == "proxy"
        assert "wrong-canary-pw" not in str(caught.value)
        assert sink.requests == []
        assert len(proxy.credentials) == 1  # not retried: bad credentials are not transient
