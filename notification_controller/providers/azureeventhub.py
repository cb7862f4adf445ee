"""``azureeventhub``: send the event JSON to an Azure Event Hub (reference §4.1, §4.5).

Two configurations, as in Flux:

* **SAS connection string** — the address is ``Endpoint=sb://<ns>.servicebus.windows.net/;
  SharedAccessKeyName=<name>;SharedAccessKey=<key>;EntityPath=<hub>`` (the Secret's ``address``); the
  Secret must then have no ``token`` and the Provider no ``serviceAccountName``. Each request carries a
  SAS token (``SharedAccessSignature sr=..&sig=..&se=..&skn=..``, HMAC-SHA256 with the key, valid one hour).
* **Static JWT** (deprecated in Flux) — the address is the hub name, ``spec.channel`` the namespace
  (``.servicebus.windows.net`` appended unless it contains ``.servicebus.``; the China and US Government
  clouds are chosen with ``AZURE_AUTHORITY_HOST``), and the Secret's ``token`` is sent as a bearer token.

* **Workload identity** (Flux's fallback when the address is no SAS string and there is no ``token``) —
  the address is the hub name and ``spec.channel`` the namespace as above; the bearer token is an Azure AD
  token for Event Hubs minted by ``outbound/identity.py``: from ``spec.serviceAccountName`` (or
  ``--default-service-account``) under the ``ObjectLevelWorkloadIdentity`` gate, else from the controller's
  own federated token (``AZURE_FEDERATED_TOKEN_FILE``, ``AZURE_CLIENT_ID``, ``AZURE_TENANT_ID``).

Flux uses the AMQP SDK; we use the Event Hubs REST API (``POST https://<ns>/<hub>/messages``), which
delivers one event with the same body.

Where the bearer goes (``outbound/identity.py``, "Where an access token may go"): a workload identity token is
the controller's (or minted with its RBAC), so ``spec.channel`` must then be a namespace name (one DNS
label, the cloud's suffix appended as Flux does) or ``<name>.servicebus.windows.net`` (or the China / US
Government suffix); anything else (``localhost:8080/``, ``evil.com``, ``a.servicebus.evil.com``) makes the
Provider not Ready, and an ``http(s)://`` URL is refused at delivery, before any token is minted, unless
the operator runs the controller with ``--workload-identity-custom-endpoints``. A credential that the
tenant supplied (the SAS connection string, a static ``token``) goes where the tenant says, as in Flux.

Local emulators and tests: an ``Endpoint=http://host:port/`` in the connection string, or a
``http(s)://host:port`` URL as the namespace, is used as given (plain HTTP for ``http://``); with
workload identity, only under ``--workload-identity-custom-endpoints``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import quote, quote_plus, urlsplit

from ..api.event import Event
from ..api.provider import ProviderType
from ..errors import DeliveryError, ProviderConfigError, rewrap
from ..outbound import OutboundRequest
from ..outbound.identity import (
    AZURE_HOSTS,
    AZURE_SCOPE_EVENT_HUBS,
    CUSTOM_ENDPOINTS_FLAG,
    azure_access_token,
    host_allowed,
    is_dns_label,
)
from .base import DeliveryContext, ProviderOptions
from .common import Caller, path_segment
from .message import with_text

API_VERSION = "2014-01"
SAS_LIFETIME = 3600
CONTENT_TYPE = "application/atom+xml;type=entry;charset=utf-8"


def eventhub_suffix() -> str:
    authority = os.environ.get("AZURE_AUTHORITY_HOST", "")
    if "chinacloudapi.cn" in authority:
        return ".servicebus.chinacloudapi.cn"
    if "microsoftonline.us" in authority:
        return ".servicebus.usgovcloudapi.net"
    return ".servicebus.windows.net"


def require_cloud_namespace(namespace: str) -> None:
    """With workload identity, ``spec.channel`` names an Event Hubs namespace of Azure's own domains: a
    namespace name, or a fully qualified ``<name>.servicebus.<cloud suffix>`` (any case). An http(s) URL
    passes here and is checked against the operator's flag at delivery (``identity.require_destination``)."""
    if namespace.startswith(("http://", "https://")):
        return
    if is_dns_label(namespace) or host_allowed(namespace.lower(), AZURE_HOSTS[AZURE_SCOPE_EVENT_HUBS]):
        return
    raise ProviderConfigError(
        f"invalid Event Hubs namespace {namespace!r} in spec.channel: with workload identity it must be a "
        "namespace name (mynamespace) or its fully qualified name (mynamespace.servicebus.windows.net, "
        ".servicebus.chinacloudapi.cn or .servicebus.usgovcloudapi.net); an emulator URL needs "
        f"{CUSTOM_ENDPOINTS_FLAG} on the controller"
    )


def namespace_base(namespace: str) -> str:
    """``https://<fully qualified namespace>`` (or the given http(s) URL, for emulators and tests)."""
    if namespace.startswith(("http://", "https://")):
        return namespace.rstrip("/")
    host = namespace if ".servicebus." in namespace.lower() else namespace + eventhub_suffix()
    return f"https://{host}"


@dataclass(frozen=True)
class ConnectionString:
    """The parts of an Event Hubs SAS connection string."""

    base: str  # scheme://host[:port]
    key_name: str
    key: str
    entity: str

    def __repr__(self) -> str:
        return f"ConnectionString(base={self.base!r}, key_name={self.key_name!r}, entity={self.entity!r})"

    @classmethod
    def parse(cls, text: str) -> ConnectionString:
        fields: dict[str, str] = {}
        for part in text.split(";"):
            name, sep, value = part.strip().partition("=")
            if sep:
                fields[name.strip().lower()] = value.strip()
        endpoint = fields.get("endpoint", "")
        if not endpoint:
            raise ProviderConfigError(
                "failed to create a eventhub using SAS: connection string has no Endpoint"
            )
        try:
            parts = urlsplit(endpoint)
            parts.port  # noqa: B018
        except ValueError as exc:
            raise ProviderConfigError("failed to create a eventhub using SAS: invalid Endpoint") from exc
        if not parts.hostname or parts.scheme not in ("sb", "amqps", "https", "http"):
            raise ProviderConfigError(
                "failed to create a eventhub using SAS: Endpoint must be sb://<namespace>/ (or http(s)://host for emulators)"
            )
        scheme = (
            "http" if parts.scheme == "http" or fields.get("usedevelopmentemulator") == "true" else "https"
        )
        key_name, key = fields.get("sharedaccesskeyname", ""), fields.get("sharedaccesskey", "")
        if not key_name or not key:
            raise ProviderConfigError(
                "failed to create a eventhub using SAS: connection string needs SharedAccessKeyName and SharedAccessKey"
            )
        entity = fields.get("entitypath", "")
        if not entity:
            raise ProviderConfigError(
                "failed to create a eventhub using SAS: connection string does not contain an EntityPath. "
                "eventHub cannot be an empty string"
            )
        return cls(f"{scheme}://{parts.netloc.rpartition('@')[2]}", key_name, key, entity)


def sas_token(resource_uri: str, key_name: str, key: str, now: float) -> str:
    """An Azure Service Bus SAS token for ``resource_uri``, valid ``SAS_LIFETIME`` seconds from ``now``."""
    encoded_uri = quote_plus(resource_uri)
    expiry = str(int(now) + SAS_LIFETIME)
    digest = hmac.new(key.encode(), f"{encoded_uri}\n{expiry}".encode(), hashlib.sha256).digest()
    signature = quote(base64.b64encode(digest).decode("ascii"), safe="")
    return (
        f"SharedAccessSignature sr={encoded_uri}&sig={signature}&se={expiry}&skn={quote(key_name, safe='')}"
    )


class AzureEventHubNotifier:
    type: ClassVar[ProviderType] = ProviderType.AZURE_EVENT_HUB
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = False  # the proxy is used for workload identity tokens only (as in Flux)

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        address, token = opts.address, opts.token_text
        account = (opts.provider.spec.service_account_name or "") if opts.provider else ""
        prefix = "invalid authentication options"
        if not address:
            raise ProviderConfigError(f"{prefix}: endpoint URL cannot be empty")
        self.sas: ConnectionString | None = None
        if "SharedAccessKey" in address:
            if account:
                raise ProviderConfigError(
                    f"{prefix}: serviceAccountName and SAS authentication cannot be set at the same time"
                )
            if token:
                raise ProviderConfigError(
                    f"{prefix}: jwt token and SAS authentication cannot be set at the same time"
                )
            self.sas = ConnectionString.parse(address)
            self.base, self.hub = self.sas.base, self.sas.entity
        else:
            if account and token:
                raise ProviderConfigError(
                    f"{prefix}: serviceAccountName and jwt token authentication cannot be set at the same time"
                )
            if not opts.channel:
                raise ProviderConfigError(
                    "failed to create a eventhub using authentication token: the Event Hubs namespace "
                    "(spec.channel) cannot be empty"
                )
            if not token:  # workload identity: the controller's token, Azure's hosts only
                require_cloud_namespace(opts.channel)
            self.base, self.hub = namespace_base(opts.channel), address
        self.resource_uri = f"{self.base}/{self.hub}"

    @property
    def uses_workload_identity(self) -> bool:
        return self.sas is None and not self.opts.token_text

    def authorization(self, now: float, bearer: str = "") -> str:
        if self.sas is not None:
            resource = "https://" + self.resource_uri.split("://", 1)[1]
            return sas_token(resource, self.sas.key_name, self.sas.key, now)
        return f"Bearer {bearer or self.opts.token_text}"

    def build_request(self, event: Event, now: float | None = None, bearer: str = "") -> OutboundRequest:
        """The send request; ``bearer`` is the workload identity token (else the SAS or static JWT)."""
        url = f"{self.base}/{path_segment(self.hub)}/messages?timeout=60&api-version={API_VERSION}"
        headers = {
            "Content-Type": CONTENT_TYPE,
            "Authorization": self.authorization(time.time() if now is None else now, bearer),
        }
        return OutboundRequest("POST", url, headers, event.to_go_json())

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        call = Caller(ctx, self.opts)
        bearer = ""
        if self.uses_workload_identity:
            try:
                bearer = await azure_access_token(
                    call, AZURE_SCOPE_EVENT_HUBS, self.base, "the Event Hubs namespace in spec.channel"
                )
            except DeliveryError as exc:
                raise rewrap(
                    exc, "failed to create a eventhub using managed identity: failed to get token"
                ) from None
        request = self.build_request(with_text(event, ctx.template), bearer=bearer)
        call.add_mask(request.headers["Authorization"].split(" ", 1)[1])
        if self.sas is not None:
            call.add_mask(self.sas.key)
        await call.send(request, what="failed to send msg", tls=False)
