"""Object-level workload identity against a real kube-apiserver (issue 16, "Identity").

The controller runs as ``config/`` deploys it (the ``config/rbac`` ServiceAccount and ClusterRole, which
must allow ``serviceaccounts`` get and ``serviceaccounts/token`` create) with the
``ObjectLevelWorkloadIdentity`` gate. A tenant's ``azureeventhub`` Provider names a ServiceAccount of its
namespace annotated with an Azure client and tenant; a local server plays Azure AD
(``AZURE_AUTHORITY_HOST``) and another the Event Hub. Asserted: the API server issued the token (RS256,
signed with its service-account key, ``aud`` = ``api://AzureADTokenExchange``, ``sub`` = the
ServiceAccount) and it reached Azure AD as the client assertion of the ServiceAccount's client in its
tenant; the Event Hub got the minted access token as the bearer.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import jwt
import pytest

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import (
    NS,
    Controller,
    ThreadedSink,
    apply,
    flux_event,
    get,
    install,
    post_event,
    ready,
    wait_for,
)
from tests.support.capture import CapturedRequest, CaptureServer, Reply

pytestmark = pytest.mark.e2e
AUDIENCE = "api://AzureADTokenExchange"


class ThreadedTokenEndpoint:
    """A local Azure AD token endpoint (a ``CaptureServer`` on its own loop thread)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._server = CaptureServer()
        self._server.on("POST", r"/oauth2/v2\.0/token$", self._mint)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._server.__aenter__(), self._loop).result(10)

    @staticmethod
    def _mint(_: CapturedRequest) -> Reply:
        return Reply(
            body={"access_token": "aad-access-token-e2e", "expires_in": 3599, "token_type": "Bearer"}
        )

    @property
    def url(self) -> str:
        return self._server.url

    def requests(self) -> list[CapturedRequest]:
        return list(self._server.requests)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._server.__aexit__(None, None, None), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def endpoints() -> Iterator[tuple[ThreadedTokenEndpoint, ThreadedSink]]:
    aad, hub = ThreadedTokenEndpoint(), ThreadedSink()
    try:
        yield aad, hub
    finally:
        aad.close()
        hub.close()


@pytest.fixture
def controller(
    kube: KubeTestServer,
    endpoints: tuple[ThreadedTokenEndpoint, ThreadedSink],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Controller]:
    install(kube)
    aad, _ = endpoints
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", aad.url + "/")
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)  # the controller's own identity must not be what is used
    kubeconfig = kube.create_service_account_kubeconfig(NS, "notification-controller")
    ctl = Controller(
        kube,
        kubeconfig,
        "--feature-gates=ObjectLevelWorkloadIdentity=true",
        "--workload-identity-custom-endpoints=true",  # the local Event Hub stands in for Azure's
        name="identity",
    )
    try:
        ctl.wait_ready()
        yield ctl
    finally:
        code = ctl.stop()
        assert code == 0, ctl.log()[-3000:]


def test_service_account_token_reaches_azure_ad_as_client_assertion(
    kube: KubeTestServer,
    namespace: str,
    controller: Controller,
    endpoints: tuple[ThreadedTokenEndpoint, ThreadedSink],
) -> None:
    aad, hub = endpoints
    client_id, tenant = str(uuid.uuid4()), str(uuid.uuid4())
    apply(
        kube,
        f"""\
apiVersion: v1
kind: ServiceAccount
metadata:
  name: eh-writer
  namespace: {namespace}
  annotations:
    azure.workload.identity/client-id: "{client_id}"
    azure.workload.identity/tenant-id: "{tenant}"
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: eventhub, namespace: {namespace}}}
spec:
  type: azureeventhub
  address: flux-events
  channel: {hub.url}
  serviceAccountName: eh-writer
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: eventhub, namespace: {namespace}}}
spec:
  providerRef: {{name: eventhub}}
  eventSources: [{{kind: Kustomization, name: '*'}}]
""",
    )
    wait_for(lambda: ready(get(kube, "provider", namespace, "eventhub")), what="Provider Ready")
    wait_for(lambda: ready(get(kube, "alert", namespace, "eventhub")), what="Alert Ready")
    assert post_event(controller, flux_event(namespace, "apps", "deployed with workload identity")) == 202
    sent = wait_for(lambda: hub.requests(), timeout=30, what="the Event Hub send")

    [grant] = aad.requests()
    assert grant.path == f"/{tenant}/oauth2/v2.0/token"
    fields = {k: v[0] for k, v in parse_qs(grant.text()).items()}
    assert fields["client_id"] == client_id
    assert fields["grant_type"] == "client_credentials"
    assert fields["scope"] == "https://eventhubs.azure.net//.default"
    # The API server's own token: its signature verifies with the service-account key, for the audience.
    claims: dict[str, Any] = jwt.decode(
        fields["client_assertion"],
        key=kube.sa_pub_file.read_bytes(),
        algorithms=["RS256"],
        audience=AUDIENCE,
    )
    assert claims["sub"] == f"system:serviceaccount:{namespace}:eh-writer"
    assert claims["aud"] == [AUDIENCE]
    assert sent[0].path == "/flux-events/messages"
    assert sent[0].headers["Authorization"] == "Bearer aad-access-token-e2e"
    assert sent[0].json()["message"] == "deployed with workload identity"
    assert fields["client_assertion"] not in controller.log()  # never logged, even at debug
