"""Workload identity for ``azureeventhub``, ``azuredevops`` and ``googlepubsub`` (issue 16, "Identity").

Real local servers play Azure AD (``AZURE_AUTHORITY_HOST``), the GCE/GKE metadata server
(``GCE_METADATA_HOST``), Google's STS and IAM Credentials endpoints and the provider APIs. Two harnesses:

* the real ``App`` in local mode (the controller's own federated token / metadata token, and a
  ServiceAccount whose token comes from a file, ``LocalCluster``);
* the real ``Dispatcher`` over ``RecordingCluster``, whose TokenRequest mints a JWT as the API server does
  (``spec.serviceAccountName`` and ``--default-service-account`` under the ``ObjectLevelWorkloadIdentity``
  gate). The e2e test ``tests/e2e/test_workload_identity_e2e.py`` runs the TokenRequest on a real API server.

What Flux does is in ``fluxcd/pkg/auth`` (``GetAccessToken``, ``azure``, ``gcp``); the grants are the
Microsoft identity platform's client-assertion grant and RFC 8693 token exchange.
"""

from __future__ import annotations

import base64
import json
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import jwt
import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.app import App
from notification_controller.dispatch.builder import build
from notification_controller.dispatch.dispatcher import Dispatcher
from notification_controller.errors import KubeError
from notification_controller.metrics import EventMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.objects.local import LOCAL_TOKEN_FILE_ANNOTATION, LocalCluster
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.outbound.identity import (
    AZURE_AUDIENCE,
    AZURE_SCOPE_DEVOPS,
    AZURE_SCOPE_EVENT_HUBS,
    GCP_SCOPES,
)
from notification_controller.outbound.tokens import TokenCache
from notification_controller.settings import KubeSettings, ServerSettings, Settings, TokenCacheSettings
from tests.integration.appkit import FAST_RETRY, local_cluster, post_event
from tests.support.capture import CapturedRequest, CaptureServer, Reply
from tests.support.recording_cluster import RecordingCluster
from tests.support.sinks import LogSink

NS = "flux-system"
KS = "kustomize.toolkit.fluxcd.io"
SHA = "0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41"
GATE_MESSAGE = (
    "to use spec.serviceAccountName for provider authentication please enable the "
    "ObjectLevelWorkloadIdentity feature gate in the controller"
)
WIP = "projects/123456/locations/global/workloadIdentityPools/flux/providers/k8s"
GSA = "flux-notifier@my-project.iam.gserviceaccount.com"
ENV = (
    "AZURE_AUTHORITY_HOST",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
    "GCE_METADATA_HOST",
    "NC_GOOGLE_STS_URL",
    "NC_GOOGLE_IAM_CREDENTIALS_URL",
    "NC_GOOGLE_PUBSUB_API_URL",
    "PUBSUB_EMULATOR_HOST",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------------------------------
# Local token endpoints
# --------------------------------------------------------------------------------------------------


def form(request: CapturedRequest) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(request.text(), keep_blank_values=True).items()}


def minting(prefix: str, *, camel: bool = False) -> Callable[[CapturedRequest], Reply]:
    """A token endpoint answering a fresh token per request (``<prefix>-1``, ``<prefix>-2``...)."""
    count = 0

    def answer(_: CapturedRequest) -> Reply:
        nonlocal count
        count += 1
        if camel:  # IAM Credentials generateAccessToken
            return Reply(body={"accessToken": f"{prefix}-{count}", "expireTime": "2099-01-01T00:00:00Z"})
        return Reply(body={"access_token": f"{prefix}-{count}", "expires_in": 3599, "token_type": "Bearer"})

    return answer


@asynccontextmanager
async def azure_ad() -> AsyncIterator[CaptureServer]:
    async with CaptureServer() as server:
        server.on("POST", r"/oauth2/v2\.0/token$", minting("aad-access-token"))
        yield server


def aad_env(monkeypatch: pytest.MonkeyPatch, aad: CaptureServer, token_file: Path | None = None) -> None:
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", aad.url + "/")
    monkeypatch.setenv("AZURE_CLIENT_ID", "controller-client-id")
    monkeypatch.setenv("AZURE_TENANT_ID", "controller-tenant")
    if token_file is not None:
        monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", str(token_file))


def basic_password(request: CapturedRequest) -> str:
    kind, _, value = request.headers["Authorization"].partition(" ")
    assert kind == "Basic"
    user, _, password = base64.b64decode(value).decode().partition(":")
    assert user == ""
    return password


# --------------------------------------------------------------------------------------------------
# Harness 1: the App in local mode
# --------------------------------------------------------------------------------------------------


@asynccontextmanager
async def local_app(
    manifests: Path, *, gate: bool = False, default_sa: str = "", cache: bool = True
) -> AsyncIterator[App]:
    settings = Settings(
        server=ServerSettings(
            events_addr="127.0.0.1:0",
            receiver_addr="127.0.0.1:0",
            metrics_addr="127.0.0.1:0",
            health_addr="127.0.0.1:0",
            shutdown_grace=5.0,
        ),
        # The local servers stand in for Azure's hosts: the operator's flag lets the tokens reach them.
        kube=KubeSettings(default_service_account=default_sa, workload_identity_custom_endpoints=True),
        tokens=TokenCacheSettings(max_size=100 if cache else 0),
        feature_gates={"ObjectLevelWorkloadIdentity": gate},
        manifests=manifests,
        manifests_poll_interval=0.1,
    )
    app = App(settings, retry=FAST_RETRY)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


def write_manifests(tmp: Path, provider_spec: str, extra: str = "") -> Path:
    (tmp / "objects.yaml").write_text(
        textwrap.dedent(
            """\
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Provider
            metadata: {name: cloud, namespace: flux-system}
            spec:
            """
        )
        + textwrap.indent(textwrap.dedent(provider_spec), "  ")
        + textwrap.dedent(
            """\
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Alert
            metadata: {name: all, namespace: flux-system}
            spec:
              providerRef: {name: cloud}
              eventSources: [{kind: Kustomization, name: '*'}]
            """
        )
        + textwrap.dedent(extra)
    )
    return tmp


def event_body(message: str) -> bytes:
    return json.dumps(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": NS,
                "name": "apps",
                "apiVersion": f"{KS}/v1",
            },
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": "ReconciliationSucceeded",
            "metadata": {f"{KS}/revision": f"main@sha1:{SHA}", "event.toolkit.fluxcd.io/commit": SHA},
            "reportingController": "kustomize-controller",
        }
    ).encode()


async def send(app: App, message: str) -> None:
    response = await post_event(app, event_body(message))
    assert response.status == 202


def warnings(app: App) -> list[str]:
    return [message for _, type_, _, message in local_cluster(app).events if type_ == "Warning"]


async def test_azure_federated_token_mints_the_event_hubs_bearer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's own identity: the projected federated token is the client assertion."""
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text("federated-jwt-canary-1\n")
    async with azure_ad() as aad, CaptureServer() as hub:
        aad_env(monkeypatch, aad, token_file)
        manifests = write_manifests(
            tmp_path, f"type: azureeventhub\naddress: flux-events\nchannel: {hub.url}\n"
        )
        async with local_app(manifests) as app:
            await send(app, "deployed")
            [sent] = await hub.wait_for(1)
    [grant] = aad.requests
    assert grant.path == "/controller-tenant/oauth2/v2.0/token"
    assert grant.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert form(grant) == {
        "client_assertion": "federated-jwt-canary-1",
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        "client_id": "controller-client-id",
        "grant_type": "client_credentials",
        "scope": "https://eventhubs.azure.net//.default",
    }
    assert sent.path == "/flux-events/messages"
    assert sent.headers["Authorization"] == "Bearer aad-access-token-1"
    assert sent.json()["message"] == "deployed"


async def test_federated_token_file_is_read_at_every_mint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet rotates the projected token: with the token cache off, each mint sends the file's
    current content (``--token-cache-max-size=0``, as Flux mints per delivery then)."""
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text("federated-jwt-first")
    async with azure_ad() as aad, CaptureServer() as hub:
        aad_env(monkeypatch, aad, token_file)
        manifests = write_manifests(tmp_path, f"type: azureeventhub\naddress: hub\nchannel: {hub.url}\n")
        async with local_app(manifests, cache=False) as app:
            await send(app, "one")
            await hub.wait_for(1)
            token_file.write_text("federated-jwt-rotated")
            await send(app, "two")
            sent = await hub.wait_for(2)
    assert [form(r)["client_assertion"] for r in aad.requests] == [
        "federated-jwt-first",
        "federated-jwt-rotated",
    ]
    assert [r.headers["Authorization"] for r in sent] == [
        "Bearer aad-access-token-1",
        "Bearer aad-access-token-2",
    ]


async def test_one_mint_for_two_deliveries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("federated-jwt")
    async with azure_ad() as aad, CaptureServer() as hub:
        aad_env(monkeypatch, aad, token_file)
        manifests = write_manifests(tmp_path, f"type: azureeventhub\naddress: hub\nchannel: {hub.url}\n")
        async with local_app(manifests) as app:
            await send(app, "one")
            await hub.wait_for(1)
            await send(app, "two")
            sent = await hub.wait_for(2)
    assert len(aad.requests) == 1
    assert {r.headers["Authorization"] for r in sent} == {"Bearer aad-access-token-1"}


async def test_azure_devops_commit_status_with_workload_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flux hands the Azure AD token to the SDK's PAT connection: basic auth, empty user."""
    token_file = tmp_path / "token"
    token_file.write_text("federated-jwt-devops")
    async with azure_ad() as aad, CaptureServer() as ado:
        ado.on("GET", r"/statuses$", Reply(body={"count": 0, "value": []}))
        aad_env(monkeypatch, aad, token_file)
        manifests = write_manifests(tmp_path, f"type: azuredevops\naddress: {ado.url}/org/proj/_git/repo\n")
        async with local_app(manifests) as app:
            await send(app, "deployed")
            listing, created = await ado.wait_for(2)
    [grant] = aad.requests
    assert form(grant)["scope"] == "499b84ac-1321-427f-aa17-267ca6975798/.default" == AZURE_SCOPE_DEVOPS
    assert form(grant)["client_assertion"] == "federated-jwt-devops"
    assert listing.method == "GET" and created.method == "POST"
    assert created.path == f"/org/proj/_apis/git/repositories/repo/commits/{SHA}/statuses"
    assert basic_password(listing) == basic_password(created) == "aad-access-token-1"
    assert created.json()["state"] == "succeeded"


async def test_gcp_metadata_token_publishes_to_pubsub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``token`` in the Secret: the metadata server's token, as Google's libraries do on GKE/GCE."""
    async with CaptureServer() as metadata, CaptureServer() as pubsub:
        metadata.on("GET", r"/service-accounts/default/token$", minting("gce-access-token"))
        monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{metadata.port}")
        monkeypatch.setenv("NC_GOOGLE_PUBSUB_API_URL", pubsub.url)
        manifests = write_manifests(
            tmp_path, "type: googlepubsub\naddress: my-project\nchannel: flux-events\n"
        )
        async with local_app(manifests) as app:
            await send(app, "one")
            await pubsub.wait_for(1)
            await send(app, "two")
            published = await pubsub.wait_for(2)
    [mint] = metadata.requests  # one mint for two deliveries
    assert mint.path == "/computeMetadata/v1/instance/service-accounts/default/token"
    assert mint.headers["Metadata-Flavor"] == "Google"
    assert mint.query == {"scopes": ",".join(GCP_SCOPES)}
    assert {p.path for p in published} == {"/v1/projects/my-project/topics/flux-events:publish"}
    assert {p.headers["Authorization"] for p in published} == {"Bearer gce-access-token-1"}
    data = published[0].json()["messages"][0]["data"]
    assert json.loads(base64.b64decode(data))["message"] == "one"


async def test_controller_identity_without_configuration_is_a_clear_error(tmp_path: Path) -> None:
    async with CaptureServer() as hub:
        manifests = write_manifests(tmp_path, f"type: azureeventhub\naddress: hub\nchannel: {hub.url}\n")
        async with local_app(manifests) as app:
            await send(app, "deployed")
            assert await app.dispatcher.wait_idle(10)
            for _ in range(100):
                if warnings(app):
                    break
                await app.dispatcher.wait_idle(0.05)
    assert hub.requests == []
    [message] = warnings(app)
    assert (
        "failed to create a eventhub using managed identity: failed to get token: failed to create provider "
        "access token for the controller: missing environment variables for workload identity "
        "(AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE)" in message
    )


SERVICE_ACCOUNT = """\
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: eh-writer
  namespace: flux-system
  annotations:
    azure.workload.identity/client-id: sa-client-id
    azure.workload.identity/tenant-id: sa-tenant
{token_file}
"""


async def test_local_mode_service_account_token_from_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Local mode has no API server to sign tokens: the ServiceAccount names a file holding one."""
    sa_token = jwt.encode({"aud": [AZURE_AUDIENCE], "exp": 4102444800}, "k" * 32, algorithm="HS256")
    token_path = tmp_path / "eh-writer.token"
    token_path.write_text(sa_token)
    manifests_dir = tmp_path / "manifests"
    manifests_dir.mkdir()
    async with azure_ad() as aad, CaptureServer() as hub:
        aad_env(monkeypatch, aad)  # the controller's own client/tenant must NOT be used
        sa = SERVICE_ACCOUNT.format(token_file=f"    {LOCAL_TOKEN_FILE_ANNOTATION}: {token_path}")
        manifests = write_manifests(
            manifests_dir,
            f"type: azureeventhub\naddress: hub\nchannel: {hub.url}\nserviceAccountName: eh-writer\n",
            sa,
        )
        async with local_app(manifests, gate=True) as app:
            await send(app, "deployed")
            [sent] = await hub.wait_for(1)
    [grant] = aad.requests
    assert grant.path == "/sa-tenant/oauth2/v2.0/token"
    assert form(grant)["client_id"] == "sa-client-id"
    assert form(grant)["client_assertion"] == sa_token
    assert sent.headers["Authorization"] == "Bearer aad-access-token-1"


async def test_local_mode_service_account_without_token_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with azure_ad() as aad, CaptureServer() as hub:
        aad_env(monkeypatch, aad)
        manifests = write_manifests(
            tmp_path,
            f"type: azureeventhub\naddress: hub\nchannel: {hub.url}\nserviceAccountName: eh-writer\n",
            SERVICE_ACCOUNT.format(token_file=""),
        )
        async with local_app(manifests, gate=True) as app:
            await send(app, "deployed")
            for _ in range(200):
                if warnings(app):
                    break
                await app.dispatcher.wait_idle(0.05)
    assert aad.requests == [] and hub.requests == []
    [message] = warnings(app)
    assert "failed to create kubernetes token for service account 'flux-system/eh-writer'" in message
    assert (
        f"local mode cannot issue ServiceAccount tokens; set the annotation {LOCAL_TOKEN_FILE_ANNOTATION}"
        in message
    )


async def test_service_account_name_without_the_gate_is_flux_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("federated-jwt")
    async with azure_ad() as aad, CaptureServer() as hub:
        aad_env(monkeypatch, aad, token_file)
        manifests = write_manifests(
            tmp_path,
            f"type: azureeventhub\naddress: hub\nchannel: {hub.url}\nserviceAccountName: eh-writer\n",
            SERVICE_ACCOUNT.format(token_file=""),
        )
        async with local_app(manifests, gate=False) as app:
            await send(app, "deployed")
            for _ in range(200):
                if warnings(app):
                    break
                await app.dispatcher.wait_idle(0.05)
    assert aad.requests == [] and hub.requests == []  # neither the controller's identity nor any send
    [message] = warnings(app)
    assert message.endswith(GATE_MESSAGE)


# --------------------------------------------------------------------------------------------------
# Harness 2: the Dispatcher over a recording Cluster (TokenRequest as the API server answers it)
# --------------------------------------------------------------------------------------------------


@dataclass
class Rig:
    store: ObjectStore
    cluster: RecordingCluster
    sink: LogSink
    dispatcher: Dispatcher

    def add(self, *docs: dict[str, Any]) -> None:
        for doc in docs:
            self.store.upsert(parse_object(doc))

    def service_account(self, name: str, **annotations: str) -> None:
        self.cluster.service_accounts[(NS, name)] = {
            "name": name,
            "namespace": NS,
            "annotations": annotations,
        }

    async def send(self, message: str = "Reconciliation finished") -> None:
        assert self.dispatcher.admit(flux_event(message)) == len(self.store.alerts())
        assert await self.dispatcher.wait_idle(20)

    def warnings(self) -> list[str]:
        return [message for _, type_, _, message in self.sink.events if type_ == "Warning"]


@asynccontextmanager
async def rig(*, gate: bool = True, default_sa: str = "") -> AsyncIterator[Rig]:
    store = ObjectStore()
    cluster = RecordingCluster(store)
    http = OutboundHTTP(RetryPolicy(max_attempts=2, wait_min=0.01, wait_max=0.02))
    await http.start()
    sink = LogSink()
    dispatcher = build(
        store,
        cluster,
        http,
        sink,
        EventMetrics(CollectorRegistry()),
        Settings(
            kube=KubeSettings(
                default_service_account=default_sa,
                workload_identity_custom_endpoints=True,  # the local servers stand in for Azure's hosts
            ),
            feature_gates={"ObjectLevelWorkloadIdentity": gate},
        ),
        tokens=TokenCache(),
    ).dispatcher
    try:
        yield Rig(store, cluster, sink, dispatcher)
    finally:
        await dispatcher.shutdown(1)
        await http.close()


def provider(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Provider",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def alert(name: str, provider_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Alert",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "providerRef": {"name": provider_name},
            "eventSources": [{"kind": "Kustomization", "name": "*"}],
        },
    }


def flux_event(message: str) -> Event:
    return Event.model_validate(json.loads(event_body(message)))


def claims(token: str) -> dict[str, Any]:
    decoded: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return decoded


async def test_service_account_token_request_and_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    """``spec.serviceAccountName`` + gate: TokenRequest for ``api://AzureADTokenExchange``, the
    ServiceAccount's tenant and client, the minted JWT as the client assertion; one mint per
    ServiceAccount, never shared between two of them."""
    async with rig() as r, azure_ad() as aad, CaptureServer() as hub:
        aad_env(monkeypatch, aad)
        r.service_account(
            "team-a",
            **{
                "azure.workload.identity/client-id": "a-client",
                "azure.workload.identity/tenant-id": "a-tenant",
            },
        )
        r.service_account(
            "team-b",
            **{
                "azure.workload.identity/client-id": "b-client",
                "azure.workload.identity/tenant-id": "b-tenant",
            },
        )
        for team in ("a", "b"):
            spec = {
                "type": "azureeventhub",
                "address": f"hub-{team}",
                "channel": hub.url,
                "serviceAccountName": f"team-{team}",
            }
            r.add(provider(f"eh-{team}", spec), alert(f"alert-{team}", f"eh-{team}"))
        await r.send("one")
        await r.send("two")
    assert r.warnings() == []
    assert sorted((ns, name, aud, secs) for ns, name, aud, secs in r.cluster.token_requests) == [
        (NS, "team-a", [AZURE_AUDIENCE], 3600),
        (NS, "team-b", [AZURE_AUDIENCE], 3600),
    ]
    grants = {form(g)["client_id"]: (g, form(g)) for g in aad.requests}
    assert sorted(grants) == ["a-client", "b-client"]  # one mint each for two events each
    for team in ("a", "b"):
        grant, fields = grants[f"{team}-client"]
        assert grant.path == f"/{team}-tenant/oauth2/v2.0/token"
        assert fields["scope"] == AZURE_SCOPE_EVENT_HUBS
        assertion = claims(fields["client_assertion"])
        assert assertion["aud"] == [AZURE_AUDIENCE]
        assert assertion["sub"] == f"system:serviceaccount:{NS}:team-{team}"
    by_hub: dict[str, set[str]] = {}
    for sent in hub.requests:
        by_hub.setdefault(sent.path, set()).add(sent.headers["Authorization"])
    assert len(hub.requests) == 4
    assert by_hub["/hub-a/messages"] != by_hub["/hub-b/messages"]
    assert all(len(tokens) == 1 for tokens in by_hub.values())


async def test_service_account_errors_carry_flux_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    async with rig() as r, azure_ad() as aad, CaptureServer() as hub:
        aad_env(monkeypatch, aad)
        r.service_account("no-annotations")
        for name, sa in (("missing", "ghost"), ("bare", "no-annotations")):
            spec = {"type": "azureeventhub", "address": "hub", "channel": hub.url, "serviceAccountName": sa}
            r.add(provider(name, spec), alert(name, name))
        await r.send()
    assert aad.requests == [] and hub.requests == [] and r.cluster.token_requests == []
    text = "\n".join(r.warnings())
    assert "failed to get service account 'flux-system/ghost': serviceaccounts \"ghost\" not found" in text
    assert (
        "failed to get provider identity from service account 'flux-system/no-annotations' annotations: "
        "azure tenant ID is not set in the service account annotation azure.workload.identity/tenant-id"
    ) in text


async def test_default_service_account_locks_down_providers_without_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--default-service-account``: a Provider without a token uses that ServiceAccount of its own
    namespace, never the controller's identity; a missing one gives Flux's lockdown message."""
    token_file = tmp_path / "controller-token"
    token_file.write_text("controller-federated-jwt")
    async with rig(default_sa="notifier") as r, azure_ad() as aad, CaptureServer() as hub:
        aad_env(monkeypatch, aad, token_file)
        r.add(
            provider("eh", {"type": "azureeventhub", "address": "hub", "channel": hub.url}), alert("a", "eh")
        )
        await r.send("before")
        assert (
            "the specified default service account does not exist in the object namespace" in r.warnings()[0]
        )
        assert aad.requests == []
        r.service_account(
            "notifier",
            **{
                "azure.workload.identity/client-id": "n-client",
                "azure.workload.identity/tenant-id": "n-tenant",
            },
        )
        await r.send("after")
    [grant] = aad.requests
    assert form(grant)["client_id"] == "n-client"
    assert claims(form(grant)["client_assertion"])["sub"] == f"system:serviceaccount:{NS}:notifier"
    assert [s.headers["Authorization"] for s in hub.requests] == ["Bearer aad-access-token-1"]


async def test_gcp_service_account_sts_exchange_and_impersonation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A workload identity pool provider (non-GKE): TokenRequest for ``//iam.googleapis.com/<provider>``,
    STS token exchange, then impersonation of the annotated Google service account."""
    async with rig() as r, CaptureServer() as google, CaptureServer() as pubsub:
        google.on("POST", r"^/v1/token$", minting("sts-token"))
        google.on("POST", r":generateAccessToken$", minting("gsa-token", camel=True))
        monkeypatch.setenv("NC_GOOGLE_STS_URL", google.url + "/v1/token")
        monkeypatch.setenv(
            "NC_GOOGLE_IAM_CREDENTIALS_URL",
            google.url + "/v1/projects/-/serviceAccounts/{email}:generateAccessToken",
        )
        monkeypatch.setenv("NC_GOOGLE_PUBSUB_API_URL", pubsub.url)
        r.service_account(
            "publisher",
            **{"gcp.auth.fluxcd.io/workload-identity-provider": WIP, "iam.gke.io/gcp-service-account": GSA},
        )
        spec = {
            "type": "googlepubsub",
            "address": "my-project",
            "channel": "flux-events",
            "serviceAccountName": "publisher",
        }
        r.add(provider("ps", spec), alert("a", "ps"))
        await r.send("one")
        await r.send("two")
    assert r.warnings() == []
    audience = f"//iam.googleapis.com/{WIP}"
    assert [(name, aud) for _, name, aud, _ in r.cluster.token_requests] == [("publisher", [audience])]
    sts, impersonation = google.requests
    fields = form(sts)
    assert fields.pop("subject_token") and claims(form(sts)["subject_token"])["aud"] == [audience]
    assert fields == {
        "audience": audience,
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "scope": "https://www.googleapis.com/auth/cloud-platform",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
    }
    assert impersonation.path == f"/v1/projects/-/serviceAccounts/{GSA}:generateAccessToken"
    assert impersonation.headers["Authorization"] == "Bearer sts-token-1"
    assert impersonation.json() == {"lifetime": "3600s", "scope": list(GCP_SCOPES)}
    assert [p.headers["Authorization"] for p in pubsub.requests] == ["Bearer gsa-token-1"] * 2


async def test_gcp_service_account_on_gke_uses_the_cluster_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """No pool provider annotation: the GKE metadata server names the pool and the STS audience; without
    a Google service account annotation the STS token is used directly (all scopes)."""
    async with rig() as r, CaptureServer() as metadata, CaptureServer() as google, CaptureServer() as pubsub:
        for path, value in (
            ("project/project-id", "my-project"),
            ("instance/attributes/cluster-location", "europe-west1"),
            ("instance/attributes/cluster-name", "prod"),
        ):
            metadata.on("GET", f"/computeMetadata/v1/{path}$", Reply(body=value))
        google.on("POST", r"^/v1/token$", minting("sts-token"))
        monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{metadata.port}")
        monkeypatch.setenv("NC_GOOGLE_STS_URL", google.url + "/v1/token")
        monkeypatch.setenv("NC_GOOGLE_PUBSUB_API_URL", pubsub.url)
        r.service_account("publisher")
        spec = {
            "type": "googlepubsub",
            "address": "my-project",
            "channel": "t",
            "serviceAccountName": "publisher",
        }
        r.add(provider("ps", spec), alert("a", "ps"))
        await r.send("one")
        await r.send("two")
    assert r.warnings() == []
    assert [aud for _, _, aud, _ in r.cluster.token_requests] == [["my-project.svc.id.goog"]]
    assert len(metadata.requests) == 3  # the cluster is looked up once, then remembered
    [sts] = google.requests
    assert form(sts)["audience"] == (
        "identitynamespace:my-project.svc.id.goog:"
        "https://container.googleapis.com/v1/projects/my-project/locations/europe-west1/clusters/prod"
    )
    assert form(sts)["scope"] == " ".join(GCP_SCOPES)
    assert [p.headers["Authorization"] for p in pubsub.requests] == ["Bearer sts-token-1"] * 2


async def test_no_secret_or_token_in_identity_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token endpoint echoes the client assertion in its error: the Warning masks it."""
    async with rig() as r, CaptureServer() as aad, CaptureServer() as hub:
        aad.on(
            "POST",
            r"/token$",
            lambda req: Reply(400, {"error": "invalid_client", "echo": form(req)["client_assertion"]}),
        )
        aad_env(monkeypatch, aad)
        r.service_account(
            "sa", **{"azure.workload.identity/client-id": "c", "azure.workload.identity/tenant-id": "t"}
        )
        r.add(
            provider(
                "eh",
                {"type": "azureeventhub", "address": "hub", "channel": hub.url, "serviceAccountName": "sa"},
            ),
            alert("a", "eh"),
        )
        await r.send()
    [assertion] = [form(g)["client_assertion"] for g in aad.requests][:1]
    [message] = r.warnings()
    assert "failed to create provider access token for service account 'flux-system/sa'" in message
    assert "request failed with status code 400" in message and "invalid_client" in message
    assert assertion not in message and assertion.split(".")[1] not in message
    assert hub.requests == []


async def test_local_cluster_checks_the_token_file_audience_and_expiry(tmp_path: Path) -> None:
    """A token issued for another audience is refused before it reaches the cloud; ``exp`` is honoured."""
    cluster = LocalCluster(ObjectStore())
    path = tmp_path / "sa.token"
    cluster.set_others(
        [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": "sa",
                    "namespace": NS,
                    "annotations": {LOCAL_TOKEN_FILE_ANNOTATION: str(path)},
                },
            }
        ]
    )
    path.write_text(jwt.encode({"aud": "sts.amazonaws.com", "exp": 4102444800}, "k" * 32, algorithm="HS256"))
    with pytest.raises(KubeError, match=r"do not include \['api://AzureADTokenExchange'\]"):
        await cluster.create_service_account_token(NS, "sa", [AZURE_AUDIENCE], 3600)
    good = jwt.encode({"aud": [AZURE_AUDIENCE], "exp": 4102444800}, "k" * 32, algorithm="HS256")
    path.write_text(good + "\n")
    assert await cluster.create_service_account_token(NS, "sa", [AZURE_AUDIENCE], 3600) == (
        good,
        4102444800.0,
    )
    assert (await cluster.get_service_account(NS, "sa"))["annotations"] == {
        LOCAL_TOKEN_FILE_ANNOTATION: str(path)
    }
    with pytest.raises(KubeError) as missing:
        await cluster.get_service_account(NS, "ghost")
    assert missing.value.not_found
