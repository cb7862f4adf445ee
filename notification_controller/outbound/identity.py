"""Workload identity: how ``azureeventhub``, ``azuredevops`` and ``googlepubsub`` get an access token when
their Secret gives none, as Flux's ``fluxcd/pkg/auth`` (``GetAccessToken``, ``auth/azure``, ``auth/gcp``)
does it. No static credential ever sits in a Secret.

Whose identity (Flux's order):

* **A Kubernetes ServiceAccount** — ``spec.serviceAccountName``, else ``--default-service-account`` (the
  multi-tenancy lockdown), under the ``ObjectLevelWorkloadIdentity`` feature gate. The ServiceAccount lives
  in the Provider's namespace; the controller asks the API server for a token of it (TokenRequest, with the
  audience the cloud expects) and exchanges that token:

  - Azure: the client-assertion grant at ``{AZURE_AUTHORITY_HOST}{tenant}/oauth2/v2.0/token`` with the
    tenant and client of the ServiceAccount's ``azure.workload.identity/tenant-id`` and ``/client-id``
    annotations; audience ``api://AzureADTokenExchange``.
  - GCP: Google's STS token exchange (RFC 8693) for the workload identity pool provider named by the
    ``gcp.auth.fluxcd.io/workload-identity-provider`` annotation (audience ``//iam.googleapis.com/<it>``),
    or, on GKE, for the cluster's own pool (``<project>.svc.id.goog``, learnt from the metadata server);
    with ``iam.gke.io/gcp-service-account`` the STS token then impersonates that Google service account
    (IAM Credentials ``generateAccessToken``), otherwise it is used directly.

* **The controller's own** otherwise:

  - Azure: the federated token that the Azure workload identity webhook projects into the pod
    (``AZURE_FEDERATED_TOKEN_FILE``, re-read at every mint since the kubelet rotates it), exchanged with
    the same grant for ``AZURE_CLIENT_ID`` in ``AZURE_TENANT_ID``.
  - GCP: the metadata server (``GCE_METADATA_HOST``, default ``metadata.google.internal``), as Google's
    client libraries do on GCE and GKE.

* **AWS** (``sns``, ``sqs``; beyond Flux): a web identity exchanged at STS with
  ``AssumeRoleWithWebIdentity`` (query protocol, unsigned; regional STS, ``AWS_ENDPOINT_URL_STS`` replaces
  it) for temporary credentials that sign the requests (``lib/sigv4.py``), cached until shortly before they
  expire: the ServiceAccount's token (audience ``sts.amazonaws.com``) for the role of its
  ``eks.amazonaws.com/role-arn`` annotation, as Flux's ``auth/aws``; else the controller's own, EKS IRSA's
  environment (``AWS_ROLE_ARN``, ``AWS_WEB_IDENTITY_TOKEN_FILE``, re-read at every mint). Where they may be
  sent is the provider's check (``providers/aws.py``: AWS hosts, or the operator's flag or endpoint
  variables).

Every request goes through the one outbound HTTP path (``Caller``) inside the delivery's time budget; the
token endpoints see the Provider's proxy (as in Flux), never its TLS settings; the metadata server sees
neither. Access tokens are reused from the dispatcher's ``TokenCache`` under Flux's key parts (cloud,
audiences, cloud identity, ServiceAccount name and namespace, scopes, proxy), so two ServiceAccounts never
share a token. Federated, ServiceAccount and access tokens are masked in every error. Errors carry Flux's
messages (``failed to get service account 'ns/name': ...``) and count under the ``workload_identity``
failure reason, except HTTP answers of the token endpoints, which keep their ``http_<status>`` reason.

Where an access token may go: an Azure token is minted for one service (its scope) and sent only to
that service's own hosts (``AZURE_HOSTS``: ``<namespace>.servicebus.windows.net`` and the China and US
Government clouds for Event Hubs, ``dev.azure.com`` and ``<org>.visualstudio.com`` for Azure DevOps),
whatever the Provider names: the destination is a tenant's choice, the token the controller's (or minted
with the controller's RBAC), so ``http://attacker:port`` as an Event Hubs namespace must never receive
it. ``azure_access_token`` takes the destination and checks it before anything is minted; an emulator
or test server is accepted only with the operator's ``--workload-identity-custom-endpoints`` (off by
default). Flux does not check (its AMQP SDK only speaks TLS to the name it is given, its Azure DevOps
client goes to the address host): a deliberate deviation. Google tokens go only to the Pub/Sub API that
the operator configures (``googlepubsub.py``), never to a URL of the Provider, so they need no check.

Why here and not among the providers: workload identity is an auth adapter of the outbound path shared by
three provider types (as ``fluxcd/pkg/auth`` sits beside Flux's HTTP clients, not in a notifier). It used to
live in ``providers/`` and closed a type-only import loop (``providers/base.py -> identity.py -> common.py ->
base.py``); it now needs only the ``Caller`` protocol below, which ``providers.common.Caller`` implements, and
``tests/unit/test_import_cycles.py`` keeps the graph acyclic counting ``TYPE_CHECKING`` imports (issue 24).

Tests: ``AZURE_AUTHORITY_HOST`` and ``GCE_METADATA_HOST`` point at local servers as they would at
sovereign clouds or a GKE metadata proxy; ``NC_GOOGLE_STS_URL`` and ``NC_GOOGLE_IAM_CREDENTIALS_URL`` (ours)
replace Google's STS and IAM Credentials endpoints.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlencode, urlsplit

from ..errors import (
    DeliveryError,
    FailureReason,
    KubeError,
    PermanentDeliveryError,
    RetryableDeliveryError,
    rewrap,
)
from ..lib.gojson import dumps as go_dumps
from .request import OutboundRequest, OutboundResponse, path_segment
from .tokens import CachedToken, TokenCache, cache_key, mint_or_cached

if TYPE_CHECKING:
    from ..api.provider import Provider
    from ..core.redact import SecretValue


class _Context(Protocol):
    @property
    def tokens(self) -> TokenCache | None: ...
    @property
    def identity(self) -> WorkloadIdentity | None: ...


class _Options(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def provider(self) -> Provider | None: ...
    @property
    def proxy(self) -> SecretValue | None: ...


class Caller(Protocol):
    """What minting needs of one delivery (``providers.common.Caller`` is one): the delivery's context (token
    cache, workload identity settings) and options (namespace, Provider, proxy), its budgeted and masked
    send, and a way to mask a credential minted on the way. A protocol, so this package never imports the
    providers (no import cycle, even counting type-only imports: tests/unit/test_import_cycles.py)."""

    @property
    def ctx(self) -> _Context: ...
    @property
    def opts(self) -> _Options: ...
    def add_mask(self, *values: str) -> None: ...
    async def send(
        self,
        request: OutboundRequest,
        *,
        what: str,
        proxy: bool = False,
        tls: bool = True,
        check: Callable[[OutboundResponse], None] | None = None,
    ) -> OutboundResponse: ...
    async def send_json(
        self, request: OutboundRequest, *, what: str, proxy: bool = False, tls: bool = True
    ) -> Any: ...


def str_field(item: Any, key: str) -> str | None:
    """A string field of a JSON object, or None when absent or not a string."""
    value = item.get(key) if isinstance(item, dict) else None
    return value if isinstance(value, str) else None


REASON = "workload_identity"
GATE = "ObjectLevelWorkloadIdentity"
SERVICE_ACCOUNT_TOKEN_SECONDS = 3600  # what the API server gives when Flux leaves expirationSeconds unset
SERVICE_ACCOUNT_CACHE_TTL = 30.0  # ServiceAccount annotations are re-read at most this often
SERVICE_ACCOUNT_CACHE_SIZE = 1024
DEFAULT_LIFETIME = 3600.0
FORM = "application/x-www-form-urlencoded"

# ---- Azure (fluxcd/pkg/auth/azure) ----------------------------------------------------------------------
AZURE_AUDIENCE = "api://AzureADTokenExchange"
AZURE_SCOPE_EVENT_HUBS = "https://eventhubs.azure.net//.default"  # sic: Flux's and the Azure SDK's scope
AZURE_SCOPE_DEVOPS = "499b84ac-1321-427f-aa17-267ca6975798/.default"
AZURE_DEFAULT_AUTHORITY = "https://login.microsoftonline.com/"
AZURE_TENANT_ANNOTATION = "azure.workload.identity/tenant-id"
AZURE_CLIENT_ANNOTATION = "azure.workload.identity/client-id"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
CUSTOM_ENDPOINTS_FLAG = "--workload-identity-custom-endpoints"
# The hosts an Azure token for a scope may be sent to: an exact host, or ``.suffix`` for one DNS label
# followed by the suffix. Public cloud, then China (21Vianet) and US Government (Azure docs: "Azure
# Government developer guide", "Azure China developer guide"); Azure DevOps Services is public only.
AZURE_HOSTS: Mapping[str, tuple[str, ...]] = {
    AZURE_SCOPE_EVENT_HUBS: (
        ".servicebus.windows.net",
        ".servicebus.chinacloudapi.cn",
        ".servicebus.usgovcloudapi.net",
    ),
    AZURE_SCOPE_DEVOPS: ("dev.azure.com", ".visualstudio.com"),
}
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", re.IGNORECASE)

# ---- GCP (fluxcd/pkg/auth/gcp, golang.org/x/oauth2/google/externalaccount) -------------------------------
GCP_SCOPES = (
    "https://www.googleapis.com/auth/cloud-platform",
    "https://www.googleapis.com/auth/userinfo.email",
)
GCP_DEFAULT_METADATA_HOST = "metadata.google.internal"
GCP_STS_URL = "https://sts.googleapis.com/v1/token"
GCP_IAM_CREDENTIALS_URL = (
    "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/{email}:generateAccessToken"
)
GCP_STS_URL_ENV = "NC_GOOGLE_STS_URL"
GCP_IAM_CREDENTIALS_URL_ENV = "NC_GOOGLE_IAM_CREDENTIALS_URL"
GCP_PROVIDER_ANNOTATION = "gcp.auth.fluxcd.io/workload-identity-provider"
GCP_EMAIL_ANNOTATION = "iam.gke.io/gcp-service-account"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
_EMAIL_PATTERN = r"^[a-zA-Z0-9-]{1,100}@[a-zA-Z0-9-]{1,100}\.iam\.gserviceaccount\.com$"
_PROVIDER_PATTERN = (
    r"^projects/\d{1,30}/locations/global/workloadIdentityPools/[^/]{1,100}/providers/[^/]{1,100}$"
)

DEFAULT_SA_NOT_FOUND = (
    "the specified default service account does not exist in the object namespace. your cluster is subject "
    "to multi-tenant workload identity lockdown, reach out to your cluster administrator for help"
)


class ServiceAccounts(Protocol):
    """The part of the ``Cluster`` port workload identity needs (``store.base.Cluster`` has it)."""

    async def get_service_account(self, namespace: str, name: str) -> dict[str, Any]: ...

    async def create_service_account_token(
        self, namespace: str, name: str, audiences: Sequence[str], expiration_seconds: int
    ) -> tuple[str, float]: ...


@dataclass(frozen=True)
class AccountRef:
    """The ServiceAccount whose identity a delivery uses; ``default`` when it came from the flag."""

    namespace: str
    name: str
    default: bool = False

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class GKECluster:
    """What the GKE metadata server says about the cluster (loaded once, as Flux's ``gkeMetadata``)."""

    project: str
    location: str
    name: str

    @property
    def pool(self) -> str:
        return f"{self.project}.svc.id.goog"

    @property
    def sts_audience(self) -> str:
        return (
            f"identitynamespace:{self.pool}:https://container.googleapis.com/v1/projects/{self.project}"
            f"/locations/{self.location}/clusters/{self.name}"
        )


def is_dns_label(text: str) -> bool:
    """One DNS label (RFC 1123): letters, digits and inner hyphens, at most 63 characters."""
    return _DNS_LABEL.fullmatch(text) is not None


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    """``host`` (lower case, no port) is one of ``allowed``: equal to an entry, or one DNS label followed
    by an entry that starts with ``.`` (``myns`` + ``.servicebus.windows.net``; never two labels, so
    ``evil.com.servicebus.windows.net`` is no more accepted than a name the label check refuses)."""
    for entry in allowed:
        if not entry.startswith("."):
            if host == entry:
                return True
        elif host.endswith(entry) and is_dns_label(host[: -len(entry)]):
            return True
    return False


def cloud_endpoint(url: str, allowed: Sequence[str]) -> bool:
    """``url`` is ``https://<allowed host>[:443]/...`` without userinfo (the only way a token may leave for a
    cloud service without the operator's flag)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    host = (parts.hostname or "").lower()
    return (
        parts.scheme.lower() == "https"
        and port in (None, 443)
        and "@" not in parts.netloc
        and host_allowed(host, allowed)
    )


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (never its userinfo, path or query), for error texts."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "an invalid URL"
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def fail(message: str) -> PermanentDeliveryError:
    return PermanentDeliveryError(message, reason=REASON, failure=FailureReason.AUTH)


def kube_failure(message: str, exc: KubeError) -> DeliveryError:
    """A Kubernetes API error as a delivery error (4xx: permanent; no answer, 5xx: may pass later)."""
    text = f"{message}: {exc}"
    if 400 <= exc.status < 500:
        return PermanentDeliveryError(text, reason=REASON, failure=FailureReason.AUTH)
    return RetryableDeliveryError(text, reason=REASON, failure=FailureReason.AUTH)


class WorkloadIdentity:
    """The controller-wide workload identity settings and what it learns while minting, owned by the
    dispatcher (never a module global: two apps in one process share nothing).

    ``accounts`` is the cluster (None: no ServiceAccount tokens); ``object_level`` is the
    ``ObjectLevelWorkloadIdentity`` gate; ``environ`` is read at every mint (``os.environ`` by default).
    """

    def __init__(
        self,
        accounts: ServiceAccounts | None = None,
        *,
        object_level: bool = False,
        default_service_account: str = "",
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        custom_endpoints: bool = False,
    ) -> None:
        self.accounts = accounts
        self.object_level = object_level
        self.custom_endpoints = custom_endpoints  # the operator's --workload-identity-custom-endpoints
        self.default_service_account = default_service_account
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self._clock = clock
        self._service_accounts: OrderedDict[tuple[str, str], tuple[float, dict[str, Any]]] = OrderedDict()
        self._gke: GKECluster | None = None

    def env(self, name: str) -> str:
        return self.environ.get(name, "").strip()

    def require_destination(self, url: str, allowed: Sequence[str], what: str) -> None:
        """Refuse (before any token is minted) to send a workload identity token to ``url`` unless it is one
        of the ``allowed`` cloud hosts over https, or the operator allowed custom endpoints."""
        if self.custom_endpoints or cloud_endpoint(url, allowed):
            return
        hosts = ", ".join("https://" + ("*" + h if h.startswith(".") else h) for h in allowed)
        raise fail(
            f"refusing to send a workload identity token to {origin(url)} ({what}): such tokens go only "
            f"to {hosts or 'no host'}; an emulator or test endpoint needs {CUSTOM_ENDPOINTS_FLAG} on the "
            "controller"
        )

    def account_for(self, opts: _Options) -> AccountRef | None:
        """``spec.serviceAccountName``, else the default ServiceAccount, else None (the controller's)."""
        explicit = opts.provider.spec.service_account_name if opts.provider is not None else ""
        if explicit:
            return AccountRef(opts.namespace, explicit)
        if self.default_service_account:
            return AccountRef(opts.namespace, self.default_service_account, default=True)
        return None

    async def service_account(self, ref: AccountRef) -> dict[str, Any]:
        """The ServiceAccount's metadata, re-read at most every ``SERVICE_ACCOUNT_CACHE_TTL`` seconds (a
        burst of events costs one GET, and an annotation change is seen within that time)."""
        key = (ref.namespace, ref.name)
        now = self._clock()
        cached = self._service_accounts.get(key)
        if cached is not None and now - cached[0] < SERVICE_ACCOUNT_CACHE_TTL:
            self._service_accounts.move_to_end(key)
            return cached[1]
        if self.accounts is None:
            raise fail(f"failed to get service account '{ref}': no Kubernetes API in this mode")
        try:
            metadata = await self.accounts.get_service_account(ref.namespace, ref.name)
        except KubeError as exc:
            if exc.not_found and ref.default:
                raise fail(f"failed to get service account '{ref}': {DEFAULT_SA_NOT_FOUND}") from None
            raise kube_failure(f"failed to get service account '{ref}'", exc) from None
        self._service_accounts[key] = (now, metadata)
        self._service_accounts.move_to_end(key)
        while len(self._service_accounts) > SERVICE_ACCOUNT_CACHE_SIZE:
            self._service_accounts.popitem(last=False)
        return metadata

    async def service_account_token(self, ref: AccountRef, audiences: Sequence[str]) -> str:
        """A Kubernetes token of ``ref`` for ``audiences`` (the gate is checked here, as Flux does)."""
        if not self.object_level:
            raise fail(f"{GATE} feature gate is not enabled")
        if self.accounts is None:
            raise fail(f"failed to create kubernetes token for service account '{ref}': no Kubernetes API")
        try:
            token, _ = await self.accounts.create_service_account_token(
                ref.namespace, ref.name, audiences, SERVICE_ACCOUNT_TOKEN_SECONDS
            )
        except KubeError as exc:
            raise kube_failure(
                f"failed to create kubernetes token for service account '{ref}'", exc
            ) from None
        return token

    async def gke_cluster(self, call: Caller) -> GKECluster:
        """The GKE cluster this controller runs in (metadata server; remembered once loaded)."""
        if self._gke is None:
            values = []
            for path, what in (
                ("project/project-id", "project ID"),
                ("instance/attributes/cluster-location", "location"),
                ("instance/attributes/cluster-name", "name"),
            ):
                prefix = f"failed to get GKE cluster {what} from the metadata service"
                response = await call.send(metadata_request(self, path), what=prefix, tls=False)
                value = response.text().strip()
                if not value:
                    raise fail(f"{prefix}: empty value")
                values.append(value)
            self._gke = GKECluster(*values)
        return self._gke


# ---- pure request builders ------------------------------------------------------------------------------


def azure_token_request(
    authority: str, tenant: str, client_id: str, assertion: str, scope: str
) -> OutboundRequest:
    """The client-assertion grant (Microsoft identity platform, v2.0 token endpoint)."""
    url = f"{authority.rstrip('/')}/{path_segment(tenant)}/oauth2/v2.0/token"
    body = urlencode(
        {
            "client_assertion": assertion,
            "client_assertion_type": CLIENT_ASSERTION_TYPE,
            "client_id": client_id,
            "grant_type": "client_credentials",
            "scope": scope,
        }
    ).encode()
    return OutboundRequest("POST", url, {"Content-Type": FORM, "Accept": "application/json"}, body)


def metadata_request(identity: WorkloadIdentity, path: str, query: str = "") -> OutboundRequest:
    host = identity.env("GCE_METADATA_HOST") or GCP_DEFAULT_METADATA_HOST
    url = f"http://{host}/computeMetadata/v1/{path}" + (f"?{query}" if query else "")
    return OutboundRequest("GET", url, {"Metadata-Flavor": "Google"})


def gcp_metadata_token_request(identity: WorkloadIdentity) -> OutboundRequest:
    return metadata_request(
        identity, "instance/service-accounts/default/token", urlencode({"scopes": ",".join(GCP_SCOPES)})
    )


def sts_request(url: str, audience: str, subject_token: str, scopes: Sequence[str]) -> OutboundRequest:
    """Google STS token exchange (``golang.org/x/oauth2/google/internal/stsexchange``; Go sorts the form)."""
    form = {
        "audience": audience,
        "grant_type": TOKEN_EXCHANGE,
        "requested_token_type": ACCESS_TOKEN_TYPE,
        "scope": " ".join(scopes),
        "subject_token": subject_token,
        "subject_token_type": JWT_TOKEN_TYPE,
    }
    return OutboundRequest(
        "POST", url, {"Content-Type": FORM, "Accept": "application/json"}, urlencode(form).encode()
    )


def impersonation_request(url: str, access_token: str) -> OutboundRequest:
    body = go_dumps({"lifetime": "3600s", "scope": list(GCP_SCOPES)})
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {access_token}"}
    return OutboundRequest("POST", url, headers, body)


def oauth_token(answer: Any, what: str, now: float, *, strict_expiry: bool = False) -> CachedToken:
    """``access_token`` and ``expires_in`` of an OAuth2 token answer."""
    value = str_field(answer, "access_token") if isinstance(answer, dict) else None
    if not value:
        raise PermanentDeliveryError(
            f"{what}: the answer has no access_token", reason="invalid_response", failure=FailureReason.AUTH
        )
    raw = answer.get("expires_in")
    try:
        lifetime = float(raw) if isinstance(raw, int | float | str) and not isinstance(raw, bool) else 0.0
    except ValueError:
        lifetime = 0.0
    if lifetime <= 0:
        if strict_expiry:  # externalaccount: "got invalid expiry from security token service"
            raise PermanentDeliveryError(
                f"{what}: got invalid expiry from security token service",
                reason="invalid_response",
                failure=FailureReason.AUTH,
            )
        lifetime = DEFAULT_LIFETIME
    return CachedToken(value, now + lifetime)


def require_http_url(url: str, what: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018
    except ValueError:
        raise fail(f"invalid {what}: not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise fail(f"invalid {what}: must be an absolute http or https URL")
    return url


def _annotations(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    value = metadata.get("annotations")
    return value if isinstance(value, dict) else {}


def azure_identity(metadata: Mapping[str, Any]) -> tuple[str, str]:
    """(tenant, client) from the ServiceAccount's annotations (Flux's ``getIdentity`` messages)."""
    annotations = _annotations(metadata)
    tenant, client = annotations.get(AZURE_TENANT_ANNOTATION), annotations.get(AZURE_CLIENT_ANNOTATION)
    if not isinstance(tenant, str):
        raise ValueError(
            f"azure tenant ID is not set in the service account annotation {AZURE_TENANT_ANNOTATION}"
        )
    if not isinstance(client, str):
        raise ValueError(
            f"azure client ID is not set in the service account annotation {AZURE_CLIENT_ANNOTATION}"
        )
    return tenant, client


def gcp_email(metadata: Mapping[str, Any]) -> str:
    email = str(_annotations(metadata).get(GCP_EMAIL_ANNOTATION) or "")
    if email and not re.match(_EMAIL_PATTERN, email):
        raise ValueError(f"invalid {GCP_EMAIL_ANNOTATION} annotation: '{email}'. must match {_EMAIL_PATTERN}")
    return email


def gcp_provider_audience(metadata: Mapping[str, Any]) -> str:
    provider = str(_annotations(metadata).get(GCP_PROVIDER_ANNOTATION) or "")
    if not provider:
        return ""
    if not re.match(_PROVIDER_PATTERN, provider):
        raise ValueError(
            f"invalid {GCP_PROVIDER_ANNOTATION} annotation: '{provider}'. must match {_PROVIDER_PATTERN}"
        )
    return f"//iam.googleapis.com/{provider}"


# ---- minting --------------------------------------------------------------------------------------------


def _cache(call: Caller) -> TokenCache | None:
    return call.ctx.tokens if isinstance(call.ctx.tokens, TokenCache) else None


def _identity(call: Caller) -> WorkloadIdentity:
    return call.ctx.identity if call.ctx.identity is not None else WorkloadIdentity()


def _proxy(call: Caller) -> str:
    return call.opts.proxy.reveal() if call.opts.proxy else ""


async def _cached(call: Caller, key: str, mint: Callable[[], Awaitable[CachedToken]]) -> str:
    token = await mint_or_cached(_cache(call), key, mint)
    call.add_mask(token.value)
    return token.value


async def azure_access_token(call: Caller, scope: str, destination: str, what: str) -> str:
    """An Azure AD access token for ``scope`` (the ServiceAccount's identity, else the controller's), to be
    sent to ``destination`` (``what`` names it in the error): refused unless that is one of the scope's
    ``AZURE_HOSTS`` or the operator allowed custom endpoints."""
    identity = _identity(call)
    identity.require_destination(destination, AZURE_HOSTS.get(scope, ()), what)
    authority = require_http_url(
        identity.env("AZURE_AUTHORITY_HOST") or AZURE_DEFAULT_AUTHORITY, "AZURE_AUTHORITY_HOST"
    )
    account = identity.account_for(call.opts)

    async def exchange(tenant: str, client: str, assertion: str, what: str) -> CachedToken:
        call.add_mask(assertion)
        now = time.time()
        request = azure_token_request(authority, tenant, client, assertion, scope)
        answer = await call.send_json(request, what=what, proxy=True, tls=False)
        return oauth_token(answer, what, now)

    if account is None:
        where = "failed to create provider access token for the controller"
        client, tenant = identity.env("AZURE_CLIENT_ID"), identity.env("AZURE_TENANT_ID")
        token_file = identity.env("AZURE_FEDERATED_TOKEN_FILE")
        missing = [
            name
            for name, value in (
                ("AZURE_CLIENT_ID", client),
                ("AZURE_TENANT_ID", tenant),
                ("AZURE_FEDERATED_TOKEN_FILE", token_file),
            )
            if not value
        ]
        if missing:
            raise fail(
                f"{where}: missing environment variables for workload identity ({', '.join(missing)}). "
                "Check webhook and pod configuration"
            )

        async def mint_controller() -> CachedToken:
            try:
                assertion = (await asyncio.to_thread(Path(token_file).read_text, encoding="utf-8")).strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise fail(
                    f"{where}: cannot read AZURE_FEDERATED_TOKEN_FILE: {exc.__class__.__name__}"
                ) from None
            if not assertion:
                raise fail(f"{where}: AZURE_FEDERATED_TOKEN_FILE is empty")
            return await exchange(tenant, client, assertion, where)

        key = cache_key("azure", "controller", authority, tenant, client, token_file, scope, _proxy(call))
        return await _cached(call, key, mint_controller)

    metadata = await identity.service_account(account)
    try:
        tenant, client = azure_identity(metadata)
    except ValueError as exc:
        raise fail(
            f"failed to get provider identity from service account '{account}' annotations: {exc}"
        ) from None

    async def mint_for_account() -> CachedToken:
        token = await identity.service_account_token(account, [AZURE_AUDIENCE])
        return await exchange(
            tenant, client, token, f"failed to create provider access token for service account '{account}'"
        )

    key = cache_key(
        "azure",
        f"audiences={AZURE_AUDIENCE}",
        f"providerIdentity={tenant}/{client}",
        f"serviceAccountName={account.name}",
        f"serviceAccountNamespace={account.namespace}",
        f"scopes={scope}",
        f"proxyURL={_proxy(call)}",
        authority,
    )
    return await _cached(call, key, mint_for_account)


async def gcp_access_token(call: Caller) -> str:
    """A Google OAuth2 access token (the ServiceAccount's identity, else the metadata server's)."""
    identity = _identity(call)
    account = identity.account_for(call.opts)
    if account is None:
        where = "failed to create provider access token for the controller"
        request = gcp_metadata_token_request(identity)

        async def mint_controller() -> CachedToken:
            now = time.time()
            answer = await call.send_json(request, what=where, tls=False)
            return oauth_token(answer, where, now)

        return await _cached(call, cache_key("gcp", "controller", request.url), mint_controller)

    metadata = await identity.service_account(account)
    try:
        provider_audience = gcp_provider_audience(metadata)
    except ValueError as exc:
        raise fail(f"failed to get provider audience: {exc}") from None
    gke: GKECluster | None = None
    if not provider_audience:  # not a workload identity pool provider: assume GKE, ask its metadata server
        try:
            gke = await identity.gke_cluster(call)
        except DeliveryError as exc:
            raise rewrap(exc, "failed to get provider audience") from None
    audiences = [provider_audience or (gke.pool if gke else "")]
    try:
        email = gcp_email(metadata)
    except ValueError as exc:
        raise fail(
            f"failed to get provider identity from service account '{account}' annotations: {exc}"
        ) from None
    sts_url = require_http_url(identity.env(GCP_STS_URL_ENV) or GCP_STS_URL, GCP_STS_URL_ENV)
    iam_url = require_http_url(
        identity.env(GCP_IAM_CREDENTIALS_URL_ENV) or GCP_IAM_CREDENTIALS_URL, GCP_IAM_CREDENTIALS_URL_ENV
    )
    where = f"failed to create provider access token for service account '{account}'"

    async def mint_for_account() -> CachedToken:
        subject = await identity.service_account_token(account, audiences)
        call.add_mask(subject)
        sts_audience = provider_audience or (gke.sts_audience if gke else "")
        # With impersonation, STS grants cloud-platform and the impersonated token gets the scopes.
        scopes = GCP_SCOPES[:1] if email else GCP_SCOPES
        now = time.time()
        answer = await call.send_json(
            sts_request(sts_url, sts_audience, subject, scopes), what=where, proxy=True, tls=False
        )
        federated = oauth_token(answer, where, now, strict_expiry=True)
        if not email:
            return federated
        call.add_mask(federated.value)
        url = iam_url.replace("{email}", path_segment(email))
        answer = await call.send_json(
            impersonation_request(url, federated.value), what=where, proxy=True, tls=False
        )
        value = str_field(answer, "accessToken") if isinstance(answer, dict) else None
        expire = str_field(answer, "expireTime") if isinstance(answer, dict) else None
        if not value or not expire:
            raise PermanentDeliveryError(
                f"{where}: the impersonation answer has no accessToken/expireTime",
                reason="invalid_response",
                failure=FailureReason.AUTH,
            )
        try:
            expires_at = datetime.fromisoformat(expire).timestamp()
        except ValueError:
            raise PermanentDeliveryError(
                f"{where}: unable to parse expiry", reason="invalid_response", failure=FailureReason.AUTH
            ) from None
        return CachedToken(value, expires_at)

    key = cache_key(
        "gcp",
        f"audiences={','.join(audiences)}",
        f"providerIdentity={email}",
        f"serviceAccountName={account.name}",
        f"serviceAccountNamespace={account.namespace}",
        f"proxyURL={_proxy(call)}",
        sts_url,
        iam_url,
    )
    return await _cached(call, key, mint_for_account)


# ---- AWS (IRSA: STS AssumeRoleWithWebIdentity, as the AWS SDKs' web identity provider) -------------------
AWS_ROLE_ARN_ENV = "AWS_ROLE_ARN"
AWS_TOKEN_FILE_ENV = "AWS_WEB_IDENTITY_TOKEN_FILE"
AWS_SESSION_NAME_ENV = "AWS_ROLE_SESSION_NAME"
AWS_STS_URL_ENV = "AWS_ENDPOINT_URL_STS"  # the SDKs' service-specific endpoint variable (the operator's)
AWS_DEFAULT_SESSION_NAME = "notification-controller"
AWS_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
AWS_AUDIENCE = "sts.amazonaws.com"  # what EKS's pod identity webhook projects the token for
STS_VERSION = "2011-06-15"
# The hosts AWS services answer on (commercial and GovCloud, China, the dual-stack api.aws names): where a
# tenant-named endpoint may be without the operator's flag, whichever credentials sign for it.
AWS_HOST_SUFFIXES = (".amazonaws.com", ".amazonaws.com.cn", ".api.aws")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_XML_DECLARATIONS = re.compile(rb"<!(?:DOCTYPE|ENTITY)", re.IGNORECASE)


def aws_endpoint(url: str) -> bool:
    """``url`` is ``https://<name>.amazonaws.com[.cn]`` (or ``.api.aws``) on port 443, without userinfo: a
    place an AWS request may go to without ``--workload-identity-custom-endpoints``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    host = (parts.hostname or "").lower()
    if parts.scheme.lower() != "https" or port not in (None, 443) or "@" in parts.netloc:
        return False
    for suffix in AWS_HOST_SUFFIXES:
        if host.endswith(suffix):
            labels = host[: -len(suffix)].split(".")
            return all(is_dns_label(label) for label in labels)
    return False


def aws_partition_suffix(region: str) -> str:
    """``amazonaws.com.cn`` for the China regions, else ``amazonaws.com``."""
    return "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"


def aws_error(body: str) -> tuple[str, str]:
    """(code, message) of an AWS error answer: the query protocol's XML ``<Error><Code>`` (SNS, STS) or the
    JSON protocol's ``__type`` (SQS: ``com.amazonaws.sqs#QueueDoesNotExist``); ("", "") when neither. The
    body is the bounded, masked excerpt a ``DeliveryError`` carries."""
    text = body.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return "", ""
        if not isinstance(data, dict):
            return "", ""
        kind = data.get("__type") or data.get("code") or ""
        message = data.get("message") or data.get("Message") or ""
        code = str(kind).rsplit("#", 1)[-1].split(":", 1)[0] if isinstance(kind, str) else ""
        return code, message if isinstance(message, str) else ""
    code = _xml_text(text, "Code")
    return code, _xml_text(text, "Message") if code else ""


def _xml_text(text: str, tag: str) -> str:
    """The first ``<tag>...</tag>`` of an AWS XML answer, found without an XML parser (error excerpts are
    cut at 1 KiB and need not be well formed)."""
    match = re.search(rf"<{tag}>([^<]{{0,512}})</{tag}>", text)
    return match.group(1).strip() if match else ""


def sts_web_identity_request(url: str, role_arn: str, session_name: str, token: str) -> OutboundRequest:
    """STS ``AssumeRoleWithWebIdentity`` in the query protocol (unsigned: the web identity token is the
    credential)."""
    form = {
        "Action": "AssumeRoleWithWebIdentity",
        "Version": STS_VERSION,
        "RoleArn": role_arn,
        "RoleSessionName": session_name,
        "WebIdentityToken": token,
    }
    return OutboundRequest(
        "POST",
        url,
        {"Content-Type": FORM + "; charset=utf-8", "Accept": "text/xml"},
        urlencode(form).encode(),
    )


def sts_credentials(body: bytes, what: str) -> CachedToken:
    """The temporary credentials of an ``AssumeRoleWithWebIdentity`` answer: the secret key as the token's
    value (masked wherever the cache's values are), the key id and session token in ``extra``."""
    import xml.etree.ElementTree as ET

    def invalid(why: str) -> PermanentDeliveryError:
        return PermanentDeliveryError(f"{what}: {why}", reason="invalid_response", failure=FailureReason.AUTH)

    if _XML_DECLARATIONS.search(body):  # no DTD, no entity: nothing for an expansion bomb to stand on
        raise invalid("the STS answer declares a DTD or entities")
    try:
        root = ET.fromstring(body)  # noqa: S314 (no DTD, checked above; at most the client's 64 KiB)
    except ET.ParseError:
        raise invalid("the STS answer is not XML") from None
    node = root.find(".//{*}Credentials")
    if node is None:
        raise invalid("the STS answer has no Credentials")
    values = {key: (node.findtext(f"{{*}}{key}") or "").strip() for key in (
        "AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration"
    )}  # fmt: skip
    if not all(values.values()):
        raise invalid("the STS answer lacks AccessKeyId, SecretAccessKey, SessionToken or Expiration")
    try:
        expires_at = datetime.fromisoformat(values["Expiration"].replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise invalid("unable to parse the credentials' Expiration") from None
    extra = {"accessKeyId": values["AccessKeyId"], "sessionToken": values["SessionToken"]}
    return CachedToken(values["SecretAccessKey"], expires_at, extra)


async def aws_web_identity_credentials(call: Caller, region: str) -> CachedToken:
    """Temporary AWS credentials from a web identity exchanged at STS (``AssumeRoleWithWebIdentity``),
    reused from the dispatcher's ``TokenCache`` until shortly before they expire:

    * a ServiceAccount's (``spec.serviceAccountName``, else ``--default-service-account``; the
      ``ObjectLevelWorkloadIdentity`` gate): its ``eks.amazonaws.com/role-arn`` annotation names the role,
      its token (TokenRequest, audience ``sts.amazonaws.com``, as EKS's pod identity webhook projects it)
      is the web identity, as Flux's ``fluxcd/pkg/auth/aws`` does;
    * else the controller's own: EKS IRSA's environment, ``AWS_ROLE_ARN`` and the projected token in
      ``AWS_WEB_IDENTITY_TOKEN_FILE`` (re-read at every mint: the kubelet rotates it).

    STS is regional (``AWS_REGION``/``AWS_DEFAULT_REGION``, else ``region``, the target's);
    ``AWS_ENDPOINT_URL_STS`` replaces it. The value is the secret key; ``extra`` holds ``accessKeyId`` and
    ``sessionToken``: every one of them, and the web identity token, is masked in this delivery's errors."""
    identity = _identity(call)
    sts_region = identity.env("AWS_REGION") or identity.env("AWS_DEFAULT_REGION") or region
    sts_url = require_http_url(
        identity.env(AWS_STS_URL_ENV) or f"https://sts.{sts_region}.{aws_partition_suffix(sts_region)}/",
        AWS_STS_URL_ENV,
    )
    session = identity.env(AWS_SESSION_NAME_ENV) or AWS_DEFAULT_SESSION_NAME

    async def exchange(role_arn: str, token: str, where: str) -> CachedToken:
        call.add_mask(token)
        try:
            response = await call.send(
                sts_web_identity_request(sts_url, role_arn, session, token), what=where, proxy=True, tls=False
            )
        except DeliveryError as exc:
            code, message = aws_error(exc.body)
            if code:  # STS's own words (IDPRejectedClaim, InvalidIdentityToken, AccessDenied...)
                raise type(exc)(
                    f"{where}: {code}: {message} (HTTP {exc.status})",
                    reason=exc.reason,
                    failure=FailureReason.AUTH,
                    status=exc.status,
                    body=exc.body,
                ) from None
            raise
        return sts_credentials(response.body, where)

    account = identity.account_for(call.opts)
    if account is not None:
        metadata = await identity.service_account(account)
        role = str(_annotations(metadata).get(AWS_ROLE_ANNOTATION) or "")
        if not _ROLE_ARN.match(role):
            raise fail(
                f"failed to get provider identity from service account '{account}' annotations: "
                f"{AWS_ROLE_ANNOTATION} is not set to an IAM role ARN"
            )
        where = f"failed to create provider access token for service account '{account}'"

        async def mint_for_account() -> CachedToken:
            token = await identity.service_account_token(account, [AWS_AUDIENCE])
            return await exchange(role, token, where)

        key = cache_key(
            "aws",
            f"roleARN={role}",
            f"serviceAccountName={account.name}",
            f"serviceAccountNamespace={account.namespace}",
            session,
            sts_url,
            f"proxyURL={_proxy(call)}",
        )
        minted = await mint_or_cached(_cache(call), key, mint_for_account)
    else:
        where = "failed to get AWS credentials for the controller's web identity"
        role_arn, token_file = identity.env(AWS_ROLE_ARN_ENV), identity.env(AWS_TOKEN_FILE_ENV)
        missing = [n for n, v in ((AWS_ROLE_ARN_ENV, role_arn), (AWS_TOKEN_FILE_ENV, token_file)) if not v]
        if missing:
            raise fail(
                f"{where}: no static keys in the Secret (awsAccessKeyId, awsSecretAccessKey) and missing "
                f"environment variables for web identity ({', '.join(missing)}): check the ServiceAccount's "
                "eks.amazonaws.com/role-arn annotation and the pod identity webhook"
            )
        if not _ROLE_ARN.match(role_arn):
            raise fail(f"{where}: {AWS_ROLE_ARN_ENV} is not an IAM role ARN")

        async def mint_controller() -> CachedToken:
            try:
                token = (await asyncio.to_thread(Path(token_file).read_text, encoding="utf-8")).strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise fail(f"{where}: cannot read {AWS_TOKEN_FILE_ENV}: {exc.__class__.__name__}") from None
            if not token:
                raise fail(f"{where}: {AWS_TOKEN_FILE_ENV} is empty")
            return await exchange(role_arn, token, where)

        key = cache_key("aws", "controller", role_arn, token_file, session, sts_url, _proxy(call))
        minted = await mint_or_cached(_cache(call), key, mint_controller)
    call.add_mask(minted.value, minted.extra.get("sessionToken", ""))
    return minted
