"""``sns`` and ``sqs`` (beyond Flux: Flux's CRD has neither): publish each notification to an Amazon SNS
topic or send it to an Amazon SQS queue, over their HTTP APIs, signed with AWS Signature Version 4
(``lib/sigv4.py``). docs/providers/sns.md and sqs.md are the user's side of this.

What is sent (the same for both): the message is Flux's event JSON, as ``generic`` and ``googlepubsub``
forward it; a pre-send stage's message (an Alert ``spec.template``, a group, a recovery) replaces the
event's ``message`` field, and its title is the SNS ``Subject`` (email subscribers see it). Message
attributes ``severity``, ``reason``, ``kind``, ``namespace`` and ``name`` (the involved object) let
subscribers filter (SNS subscription filter policies, SQS consumers) without parsing the body.

* SNS ``Publish`` in the query protocol (SNS has no other): ``POST /`` form
  ``Action=Publish&Version=2010-03-31&TopicArn=…&Message=…&Subject=…&MessageAttributes.entry.N…``. The
  topic ARN is ``spec.channel`` (or ``spec.address`` when that is an ARN); the region is the ARN's.
* SQS ``SendMessage`` in the JSON protocol (AWS JSON 1.0, what the current SDKs speak; SQS still takes the
  query protocol too): ``POST /`` with ``X-Amz-Target: AmazonSQS.SendMessage`` and
  ``{"QueueUrl", "MessageBody", "MessageAttributes"}``. The queue URL is ``spec.address``; the region is
  its host's (``sqs.<region>.amazonaws.com``, the legacy ``<region>.queue.amazonaws.com``, a VPC
  endpoint's ``…sqs.<region>.vpce.amazonaws.com``).
* FIFO (a topic ARN or queue URL ending in ``.fifo``): ``MessageGroupId`` is the involved object
  (``Kind/namespace/name``: one object's events stay in order) and ``MessageDeduplicationId`` the SHA-256
  of the Provider's uid, the event and the message: the same notification re-sent (the durable outbox)
  is dropped by AWS within its 5-minute window, two notifications never share one.

Where requests go: ``AWS_ENDPOINT_URL_SNS`` / ``AWS_ENDPOINT_URL_SQS`` / ``AWS_ENDPOINT_URL`` (the AWS
SDKs' variables, in the controller's environment: the operator's choice) win; else the endpoint the
tenant names (the SQS queue URL's origin, an SNS ``spec.address`` URL), which must be an AWS host
(``https://*.amazonaws.com``, ``*.amazonaws.com.cn``, ``*.api.aws``: VPC endpoints included) unless the
operator runs with ``--workload-identity-custom-endpoints``; else the regional endpoint. The check is at
delivery, before any credential is read, for both kinds of credentials (the controller's own must never
sign for a host a tenant picked; a tenant's static keys gain nothing there either, and one rule is easier
to state).

Credentials: the Secret's ``awsAccessKeyId`` + ``awsSecretAccessKey`` (+ ``awsSessionToken``), else a web
identity exchanged at STS and cached (``outbound/identity.py::aws_web_identity_credentials``): the
ServiceAccount's role (``spec.serviceAccountName`` or ``--default-service-account``, under the
``ObjectLevelWorkloadIdentity`` gate), else the controller's own (EKS IRSA). ``region`` in the Secret overrides the
ARN's or URL's region. Every Secret value, the STS credentials and the signature are masked in errors.

Failures: the outbound path decides by status (5xx, 429 retried in place; other 4xx permanent); an AWS
error code then refines it: the throttling and transient codes AWS's SDKs retry (botocore's standard retry
mode: ``Throttling``, ``ThrottlingException``, ``RequestThrottled``, ``ServiceUnavailable``…) become
retryable even on a 400 (the durable outbox retries them; the memory lanes, as for any error, give up
after the attempt), everything else (``AccessDenied``, ``InvalidParameter``, ``NotFound``,
``QueueDoesNotExist``, ``SignatureDoesNotMatch``…) stays permanent. The error text is
``<what>: <Code>: <AWS's message> (HTTP <status>)``.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import ClassVar
from urllib.parse import urlencode, urlsplit

from ..api.event import Event
from ..api.provider import ProviderType
from ..errors import (
    DeliveryError,
    FailureReason,
    PermanentDeliveryError,
    ProviderConfigError,
    RetryableDeliveryError,
)
from ..lib.sigv4 import Credentials, sign
from ..outbound import OutboundRequest
from ..outbound.identity import (
    CUSTOM_ENDPOINTS_FLAG,
    aws_endpoint,
    aws_error,
    aws_partition_suffix,
    aws_web_identity_credentials,
    origin,
)
from .base import DeliveryContext, HTTPNotifier, ProviderOptions
from .common import Caller
from .message import Message, with_text
from .validation import require_url

ACCESS_KEY_ID = "awsAccessKeyId"
SECRET_ACCESS_KEY = "awsSecretAccessKey"
SESSION_TOKEN = "awsSessionToken"
REGION = "region"
ENDPOINT_ENV = "AWS_ENDPOINT_URL"
SNS_VERSION = "2010-03-31"
SUBJECT_MAX = 99  # "must be less than 100 characters long"
GROUP_ID_MAX = 128

# botocore's standard retry mode (retries/standard.py): its throttling codes and transient codes, plus
# the service-specific ones of SNS (Throttled, KMSThrottling) and SQS (KmsThrottled).
RETRYABLE_CODES = frozenset(
    {
        "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
        "TooManyRequestsException", "RequestLimitExceeded", "RequestThrottled", "Throttled",
        "KMSThrottling", "KmsThrottled", "SlowDown", "BandwidthLimitExceeded", "LimitExceededException",
        "PriorRequestNotComplete", "RequestTimeout", "RequestTimeoutException", "ServiceUnavailable",
        "InternalError", "InternalFailure", "InternalServerError",
    }
)  # fmt: skip
THROTTLING_CODES = frozenset(
    c for c in RETRYABLE_CODES if "hrottl" in c or c in ("SlowDown", "RequestLimitExceeded")
)

_REGION = r"[a-z]{2}(?:-[a-z]+)+-\d{1,2}"
_TOPIC_ARN = re.compile(rf"^arn:aws[a-z-]*:sns:({_REGION}):\d{{12}}:[A-Za-z0-9_-]{{1,256}}(?:\.fifo)?$")
_QUEUE_PATH = re.compile(r"^/\d{12}/[A-Za-z0-9_-]{1,80}(?:\.fifo)?$")
_HOST_REGION = (
    re.compile(rf"(?:^|\.)sqs\.({_REGION})\.(?:vpce\.)?(?:amazonaws\.com(?:\.cn)?|api\.aws)$"),
    re.compile(rf"^({_REGION})\.queue\.amazonaws\.com(?:\.cn)?$"),
)
_REGION_VALUE = re.compile(rf"^{_REGION}$")


def message_attributes(event: Event) -> list[tuple[str, str]]:
    """The attributes subscribers filter on, in a fixed order (empty values are left out: AWS refuses them)."""
    obj = event.involved_object
    pairs = [
        ("severity", event.severity),
        ("reason", event.reason),
        ("kind", obj.kind),
        ("namespace", obj.namespace),
        ("name", obj.name),
    ]
    return [(name, value) for name, value in pairs if value]


def group_id(event: Event) -> str:
    """The FIFO message group: the involved object (one object's events stay in order)."""
    obj = event.involved_object
    text = f"{obj.kind}/{obj.namespace}/{obj.name}"
    if len(text) <= GROUP_ID_MAX:
        return text
    return text[: GROUP_ID_MAX - 17] + "-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def subject(title: str) -> str:
    """An SNS ``Subject``: printable ASCII on one line, under 100 characters."""
    text = "".join(c if " " <= c <= "~" else "?" for c in " ".join(title.split()))
    return text[:SUBJECT_MAX].strip() or "Flux notification"


class AWSNotifier(HTTPNotifier):
    """What SNS and SQS share: credentials, region, endpoint, signing, the failure vocabulary."""

    service: ClassVar[str]
    endpoint_env: ClassVar[str]
    uses_proxy: ClassVar[bool] = True
    uses_tls: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        data = opts.secret_data
        key_id = _secret_text(data, ACCESS_KEY_ID)
        secret = _secret_text(data, SECRET_ACCESS_KEY)
        token = _secret_text(data, SESSION_TOKEN)
        if (key_id and not secret) or (secret and not key_id):  # one without the other
            missing = ACCESS_KEY_ID if not key_id else SECRET_ACCESS_KEY
            raise ProviderConfigError(
                f"invalid AWS credentials in the Secret: '{missing}' is missing "
                f"(set both '{ACCESS_KEY_ID}' and '{SECRET_ACCESS_KEY}', or neither for web identity)"
            )
        if token and not key_id:
            raise ProviderConfigError(
                f"invalid AWS credentials in the Secret: '{SESSION_TOKEN}' needs '{ACCESS_KEY_ID}' "
                f"and '{SECRET_ACCESS_KEY}'"
            )
        self.credentials = Credentials(key_id, secret, token) if key_id else None
        if key_id and opts.provider is not None and opts.provider.spec.service_account_name:
            raise ProviderConfigError(
                f"invalid AWS credentials: spec.serviceAccountName and static keys ('{ACCESS_KEY_ID}') "
                "cannot be set at the same time"
            )
        self.region = _secret_text(data, REGION)
        if self.region and not _REGION_VALUE.match(self.region):
            raise ProviderConfigError(f"invalid 'region' in the Secret: {self.region!r} is not an AWS region")
        self.operator_endpoint = (
            os.environ.get(self.endpoint_env, "").strip() or os.environ.get(ENDPOINT_ENV, "").strip()
        )
        if self.operator_endpoint:
            _require_http_url(self.operator_endpoint, self.endpoint_env)

    # ---- what subclasses say ------------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def endpoint(self) -> str:
        """The service's URL for this Provider (the region's host, or the operator's endpoint)."""

    @property
    @abc.abstractmethod
    def what(self) -> str:
        """The start of an error message: what was being done (e.g. "error publishing to SNS topic ...")."""

    # ---- delivery -----------------------------------------------------------------------------------

    def require_endpoint(self, ctx: DeliveryContext) -> None:
        """A tenant-named endpoint off AWS's hosts needs the operator's flag (module docstring)."""
        url = self.endpoint
        if self.operator_endpoint or aws_endpoint(url):
            return
        if ctx.identity is not None and ctx.identity.custom_endpoints:
            return
        raise PermanentDeliveryError(
            f"{self.what}: refusing to sign a request for {origin(url)}: AWS requests go only to "
            "https://*.amazonaws.com, *.amazonaws.com.cn and *.api.aws; an emulator or another endpoint "
            f"needs {CUSTOM_ENDPOINTS_FLAG} on the controller",
            reason="invalid_config",
            failure=FailureReason.INVALID_CONFIG,
        )

    async def credentials_for(self, call: Caller) -> Credentials:
        if self.credentials is not None:
            return self.credentials
        minted = await aws_web_identity_credentials(call, self.region)
        return Credentials(
            minted.extra.get("accessKeyId", ""), minted.value, minted.extra.get("sessionToken", "")
        )

    def signed(self, request: OutboundRequest, credentials: Credentials, now: datetime) -> OutboundRequest:
        result = sign(
            request.method,
            request.url,
            request.headers,
            request.body,
            credentials=credentials,
            region=self.region,
            service=self.service,
            now=now,
        )
        return OutboundRequest(request.method, request.url, result.headers, request.body)

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        if not self.should_send(event):
            return
        request = self.build_request(event, self.message_for(ctx.message, ctx.templated))
        self.require_endpoint(ctx)
        call = Caller(ctx, self.opts)
        try:
            credentials = await self.credentials_for(call)
        except DeliveryError as exc:
            raise _rewrapped(exc, f"{self.what}: {exc}", call) from None
        signed = self.signed(request, credentials, datetime.now(UTC))
        call.add_mask(
            signed.headers["Authorization"].rsplit("Signature=", 1)[-1], credentials.secret_access_key
        )
        if credentials.session_token:
            call.add_mask(credentials.session_token)
        try:
            await call.send(signed, what=self.what, proxy=True, tls=True)
        except DeliveryError as exc:
            raise aws_failure(exc, self.what, call) from None


def aws_failure(exc: DeliveryError, what: str, call: Caller) -> DeliveryError:
    """``exc`` refined by the AWS error code in its body (module docstring)."""
    code, message = aws_error(exc.body)
    if not code:
        return exc
    text = (
        f"{what}: {code}: {message} (HTTP {exc.status})" if message else f"{what}: {code} (HTTP {exc.status})"
    )
    if code in RETRYABLE_CODES:
        failure = FailureReason.RATE_LIMITED if code in THROTTLING_CODES else FailureReason.SERVER_ERROR
        retry_after = exc.retry_after if isinstance(exc, RetryableDeliveryError) else None
        return RetryableDeliveryError(
            call.mask(text),
            reason=exc.reason,
            failure=failure,
            status=exc.status,
            body=exc.body,
            retry_after=retry_after,
        )
    return _rewrapped(exc, text, call)


def _rewrapped(exc: DeliveryError, text: str, call: Caller) -> DeliveryError:
    """``exc`` with the message ``text`` (masked), its kind and fields kept."""
    shown = call.mask(text)
    if isinstance(exc, RetryableDeliveryError):
        return RetryableDeliveryError(
            shown,
            reason=exc.reason,
            failure=exc.failure,
            status=exc.status,
            body=exc.body,
            retry_after=exc.retry_after,
        )
    cls = PermanentDeliveryError if isinstance(exc, PermanentDeliveryError) else DeliveryError
    return cls(shown, reason=exc.reason, failure=exc.failure, status=exc.status, body=exc.body)


class SNSNotifier(AWSNotifier):
    type: ClassVar[ProviderType] = ProviderType.SNS
    service: ClassVar[str] = "sns"
    endpoint_env: ClassVar[str] = "AWS_ENDPOINT_URL_SNS"

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        address = opts.address.strip()
        topic = opts.channel.strip() or (address if address.startswith("arn:") else "")
        if not topic:
            raise ProviderConfigError("SNS topic ARN cannot be empty (set spec.channel)")
        match = _TOPIC_ARN.match(topic)
        if match is None:
            raise ProviderConfigError(
                "invalid SNS topic ARN in spec.channel: expected arn:aws:sns:<region>:<account>:<topic>"
            )
        self.topic_arn = topic
        self.region = self.region or match.group(1)
        self.tenant_endpoint = ""
        if address and not address.startswith("arn:"):
            self.tenant_endpoint = _require_http_url(address, "spec.address")
        self.fifo = topic.endswith(".fifo")

    @property
    def endpoint(self) -> str:
        return (
            self.operator_endpoint
            or self.tenant_endpoint
            or f"https://sns.{self.region}.{aws_partition_suffix(self.region)}/"
        )

    @property
    def what(self) -> str:
        return f"error publishing to SNS topic {self.topic_arn}"

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        forwarded = with_text(event, message)
        body = forwarded.to_go_json()
        form: list[tuple[str, str]] = [
            ("Action", "Publish"),
            ("Version", SNS_VERSION),
            ("TopicArn", self.topic_arn),
            ("Message", body.decode("utf-8")),
            ("Subject", subject((message or Message.of(event)).title)),
        ]
        for n, (name, value) in enumerate(message_attributes(event), 1):
            prefix = f"MessageAttributes.entry.{n}"
            form += [
                (f"{prefix}.Name", name),
                (f"{prefix}.Value.DataType", "String"),
                (f"{prefix}.Value.StringValue", value),
            ]
        if self.fifo:
            form += [
                ("MessageGroupId", group_id(event)),
                ("MessageDeduplicationId", dedup_id(self.opts, body)),
            ]
        headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
        return OutboundRequest("POST", self.endpoint, headers, urlencode(form).encode("ascii"))


class SQSNotifier(AWSNotifier):
    type: ClassVar[ProviderType] = ProviderType.SQS
    service: ClassVar[str] = "sqs"
    endpoint_env: ClassVar[str] = "AWS_ENDPOINT_URL_SQS"

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        url = opts.address.strip()
        if not url:
            raise ProviderConfigError("SQS queue URL cannot be empty (set spec.address)")
        _require_http_url(url, "SQS queue URL in spec.address")
        parts = urlsplit(url)
        if parts.query or parts.fragment or _QUEUE_PATH.match(parts.path) is None:
            raise ProviderConfigError(
                "invalid SQS queue URL in spec.address: expected https://sqs.<region>.amazonaws.com/<account>/<queue>"
            )
        self.queue_url = url
        self.queue_name = parts.path.rsplit("/", 1)[-1]
        host = (parts.hostname or "").lower()
        if not self.region:
            if host == "queue.amazonaws.com":
                self.region = "us-east-1"
            for pattern in _HOST_REGION:
                if m := pattern.search(host):
                    self.region = m.group(1)
        if not self.region:
            raise ProviderConfigError(
                f"cannot tell the AWS region of the SQS queue URL's host {host}: set 'region' in the Secret"
            )
        self.tenant_endpoint = f"{parts.scheme}://{parts.netloc}/"
        self.fifo = self.queue_name.endswith(".fifo")

    @property
    def endpoint(self) -> str:
        return self.operator_endpoint or self.tenant_endpoint

    @property
    def what(self) -> str:
        return f"error sending to SQS queue {self.queue_name}"

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        body = with_text(event, message).to_go_json()
        payload: dict[str, object] = {
            "QueueUrl": self.queue_url,
            "MessageBody": body.decode("utf-8"),
            "MessageAttributes": {
                name: {"DataType": "String", "StringValue": value}
                for name, value in message_attributes(event)
            },
        }
        if self.fifo:
            payload["MessageGroupId"] = group_id(event)
            payload["MessageDeduplicationId"] = dedup_id(self.opts, body)
        headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"}
        data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return OutboundRequest("POST", self.endpoint, headers, data)


def dedup_id(opts: ProviderOptions, body: bytes) -> str:
    """FIFO ``MessageDeduplicationId``: the same notification (Provider, event, message) → the same id."""
    digest = hashlib.sha256()
    for part in (opts.uid.encode(), opts.namespace.encode(), opts.name.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def _secret_text(data: Mapping[str, bytes], key: str) -> str:
    raw = data.get(key)
    return raw.decode("utf-8", errors="replace").strip() if raw else ""


def _require_http_url(url: str, what: str) -> str:
    """``validation.require_url``, and no credentials in the URL (AWS signs; userinfo would only leak)."""
    parts = urlsplit(require_url(url, what=what))
    if parts.username is not None or parts.password is not None:
        raise ProviderConfigError(f"invalid {what}: credentials in the URL are not used by AWS")
    return url
