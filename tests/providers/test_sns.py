"""Amazon SNS (beyond Flux): its conformance case and the pure tests of its request and its failures.

The case sends to the kit's capture server through ``AWS_ENDPOINT_URL_SNS`` (the operator's endpoint
variable) and checks the signature with botocore, as AWS would. ``tests/integration/test_aws_providers.py``
publishes to moto's SNS for real (and reads the message back from an SQS subscription).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.errors import (
    DeliveryError,
    FailureReason,
    PermanentDeliveryError,
    RetryableDeliveryError,
)
from notification_controller.outbound import OutboundHTTP
from notification_controller.outbound.identity import WorkloadIdentity, aws_endpoint, aws_error
from notification_controller.providers.aws import SNSNotifier, aws_failure, group_id, subject
from notification_controller.providers.base import DeliveryContext
from notification_controller.providers.common import Caller
from notification_controller.providers.message import Message
from tests.providers.build import SAMPLE_EVENT
from tests.providers.case import ProviderCase
from tests.providers.support import SAMPLE_GO_JSON, construction_error, one, opts
from tests.support.aws import verify_sigv4
from tests.support.capture import CapturedRequest

TOPIC = "arn:aws:sns:eu-west-1:123456789012:flux-events"
SECRET_KEY = "sns-canary-secret/Key+0123456789abcdefXYZ"
SESSION_TOKEN = "sns-canary-session-token-FwoGZXIvYXdz"

# ---- conformance case ----------------------------------------------------------------------------


def expect_sns(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.method == "POST"
    assert req.path == "/"
    assert req.headers["Content-Type"] == "application/x-www-form-urlencoded; charset=utf-8"
    form = {k: v[0] for k, v in parse_qs(req.body.decode("ascii"), strict_parsing=True).items()}
    assert form.pop("Message").encode() == SAMPLE_GO_JSON
    assert form == {
        "Action": "Publish",
        "Version": "2010-03-31",
        "TopicArn": TOPIC,
        "Subject": "gitrepository/webapp.gitops-system",
        "MessageAttributes.entry.1.Name": "severity",
        "MessageAttributes.entry.1.Value.DataType": "String",
        "MessageAttributes.entry.1.Value.StringValue": "info",
        "MessageAttributes.entry.2.Name": "reason",
        "MessageAttributes.entry.2.Value.DataType": "String",
        "MessageAttributes.entry.2.Value.StringValue": "ReconciliationSucceeded",
        "MessageAttributes.entry.3.Name": "kind",
        "MessageAttributes.entry.3.Value.DataType": "String",
        "MessageAttributes.entry.3.Value.StringValue": "GitRepository",
        "MessageAttributes.entry.4.Name": "namespace",
        "MessageAttributes.entry.4.Value.DataType": "String",
        "MessageAttributes.entry.4.Value.StringValue": "gitops-system",
        "MessageAttributes.entry.5.Name": "name",
        "MessageAttributes.entry.5.Value.DataType": "String",
        "MessageAttributes.entry.5.Value.StringValue": "webapp",
    }
    parts = verify_sigv4(req, SECRET_KEY, SESSION_TOKEN)
    assert (parts["access_key"], parts["region"], parts["service"]) == (
        "AKIASNSEXAMPLEKEYID1",
        "eu-west-1",
        "sns",
    )
    assert parts["SignedHeaders"] == "content-type;host;x-amz-date;x-amz-security-token"
    assert req.headers["X-Amz-Security-Token"] == SESSION_TOKEN


CASES: list[ProviderCase] = [
    ProviderCase(
        type="sns",
        spec={"channel": TOPIC},
        secret={
            "awsAccessKeyId": "AKIASNSEXAMPLEKEYID1",
            "awsSecretAccessKey": SECRET_KEY,
            "awsSessionToken": SESSION_TOKEN,
        },
        env={"AWS_ENDPOINT_URL_SNS": "{url}/"},
        expect=expect_sns,
        canaries=[SECRET_KEY, SESSION_TOKEN],
    ),
]

# ---- construction ---------------------------------------------------------------------------------

KEYS = {"awsAccessKeyId": b"AKIAEXAMPLE", "awsSecretAccessKey": b"secret-key-value"}


def sns(**kw: Any) -> SNSNotifier:
    kw.setdefault("secret_data", KEYS)
    return SNSNotifier(opts(ProviderType.SNS, **kw))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "SNS topic ARN cannot be empty"),
        ({"channel": "flux-events"}, "invalid SNS topic ARN in spec.channel"),
        ({"channel": "arn:aws:sqs:eu-west-1:123456789012:q"}, "invalid SNS topic ARN"),
        ({"channel": TOPIC, "address": "ftp://x"}, "invalid spec.address: must be an absolute http"),
        ({"channel": TOPIC, "secret_data": {"awsAccessKeyId": b"AKIA"}}, "'awsSecretAccessKey' is missing"),
        ({"channel": TOPIC, "secret_data": {"awsSecretAccessKey": b"s"}}, "'awsAccessKeyId' is missing"),
        ({"channel": TOPIC, "secret_data": {"awsSessionToken": b"t0ken"}}, "'awsSessionToken' needs"),
        ({"channel": TOPIC, "secret_data": {**KEYS, "region": b"moon-1"}}, "is not an AWS region"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], message: str) -> None:
    kw.setdefault("secret_data", KEYS)
    assert message in construction_error(SNSNotifier, ProviderType.SNS, **kw)


def test_the_region_is_a_name_not_a_mask_and_the_keys_are() -> None:
    masks = sns(channel=TOPIC, secret_data={**KEYS, "region": b"eu-central-1"}).masks()
    assert "eu-central-1" not in masks
    assert all(value.decode() in masks for key, value in KEYS.items() if len(value) >= 4)


def test_static_keys_and_a_service_account_are_exclusive() -> None:
    from notification_controller.api.provider import Provider

    provider = Provider.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"type": "sns", "channel": TOPIC, "serviceAccountName": "tenant-a"},
        }
    )
    message = construction_error(
        SNSNotifier, ProviderType.SNS, channel=TOPIC, secret_data=KEYS, provider=provider
    )
    assert (
        "spec.serviceAccountName and static keys ('awsAccessKeyId') cannot be set at the same time" in message
    )
    assert sns(channel=TOPIC, secret_data={}, provider=provider).credentials is None


def test_region_and_endpoint() -> None:
    assert sns(channel=TOPIC).endpoint == "https://sns.eu-west-1.amazonaws.com/"
    assert sns(address=TOPIC).topic_arn == TOPIC  # the ARN in the address, no channel
    china = sns(channel="arn:aws-cn:sns:cn-north-1:123456789012:t")
    assert china.endpoint == "https://sns.cn-north-1.amazonaws.com.cn/"
    vpce = "https://vpce-0a1b2c3d-4e5f.sns.eu-west-1.vpce.amazonaws.com/"
    assert sns(channel=TOPIC, address=vpce).endpoint == vpce
    assert sns(channel=TOPIC, secret_data={**KEYS, "region": b"eu-central-1"}).region == "eu-central-1"
    assert sns(channel=TOPIC).credentials is not None
    assert sns(channel=TOPIC, secret_data={}).credentials is None  # web identity at delivery


def test_operator_endpoint_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    assert sns(channel=TOPIC).endpoint == "http://127.0.0.1:4566"
    monkeypatch.setenv("AWS_ENDPOINT_URL_SNS", "http://127.0.0.1:5000/")
    assert (
        sns(channel=TOPIC, address="https://sns.eu-west-1.amazonaws.com/").endpoint
        == "http://127.0.0.1:5000/"
    )


# ---- the request ---------------------------------------------------------------------------------


def form_of(body: bytes) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(body.decode("ascii")).items()}


def test_template_text_and_title() -> None:
    """A stage's message replaces the event's message in the JSON, and its title is the Subject."""
    request = sns(channel=TOPIC).build_request(SAMPLE_EVENT, Message("Deployed\tprod ✓", "all good", "info"))
    form = form_of(request.body)
    assert form["Subject"] == "Deployed prod ?"
    assert '"message":"all good"' in form["Message"]


def test_fifo_topic_carries_group_and_deduplication() -> None:
    notifier = sns(channel=TOPIC + ".fifo")
    first = form_of(notifier.build_request(SAMPLE_EVENT).body)
    again = form_of(notifier.build_request(SAMPLE_EVENT).body)
    other = form_of(notifier.build_request(SAMPLE_EVENT, Message("t", "other text", "info")).body)
    assert first["MessageGroupId"] == "GitRepository/gitops-system/webapp"
    assert first["MessageDeduplicationId"] == again["MessageDeduplicationId"]  # stable per notification
    assert other["MessageDeduplicationId"] != first["MessageDeduplicationId"]
    assert len(first["MessageDeduplicationId"]) == 64
    assert "MessageGroupId" not in form_of(sns(channel=TOPIC).build_request(SAMPLE_EVENT).body)


def test_subject_and_group_bounds() -> None:
    assert subject("x" * 300) == "x" * 99
    assert subject("\n\n") == "Flux notification"
    long_name = SAMPLE_EVENT.model_copy(
        update={"involved_object": SAMPLE_EVENT.involved_object.model_copy(update={"name": "n" * 200})}
    )
    gid = group_id(long_name)
    assert len(gid) == 128 and gid.startswith("GitRepository/gitops-system/nnn")


# ---- endpoints and failures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://sns.eu-west-1.amazonaws.com/", True),
        ("https://sqs.cn-north-1.amazonaws.com.cn/", True),
        ("https://sqs.us-east-1.api.aws/", True),
        ("https://vpce-1.sqs.us-east-1.vpce.amazonaws.com/", True),
        ("http://sns.eu-west-1.amazonaws.com/", False),
        ("https://sns.eu-west-1.amazonaws.com:8443/", False),
        ("https://amazonaws.com.evil.example/", False),
        ("https://evil.example/.amazonaws.com", False),
        ("https://user:pw@sns.eu-west-1.amazonaws.com/", False),
        ("http://127.0.0.1:5000/", False),
    ],
)
def test_aws_hosts(url: str, allowed: bool) -> None:
    assert aws_endpoint(url) is allowed


async def test_a_tenant_endpoint_off_aws_needs_the_operator_flag() -> None:
    """Refused before any credential is read or any request is made; accepted with the flag."""
    notifier = sns(channel=TOPIC, address="http://127.0.0.1:9/", secret_data={})
    http = OutboundHTTP()
    with pytest.raises(PermanentDeliveryError) as info:
        await notifier.post(SAMPLE_EVENT, DeliveryContext(http=http))
    assert "--workload-identity-custom-endpoints" in str(info.value)
    assert info.value.failure is FailureReason.INVALID_CONFIG
    assert http.attempts == 0
    # with the flag, delivery goes on: here to web identity, which has no environment in this process
    flagged = DeliveryContext(http=http, identity=WorkloadIdentity(custom_endpoints=True, environ={}))
    with pytest.raises(PermanentDeliveryError, match="AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE"):
        await notifier.post(SAMPLE_EVENT, flagged)
    assert http.attempts == 0


XML_ERROR = (
    '<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><Error><Type>Sender</Type>'
    "<Code>{code}</Code><Message>{message}</Message></Error><RequestId>r-1</RequestId></ErrorResponse>"
)


async def refine(exc: DeliveryError) -> DeliveryError:
    call = Caller(DeliveryContext(http=OutboundHTTP()), opts(ProviderType.SNS, secret_data=KEYS))
    return aws_failure(exc, "error publishing to SNS topic t", call)


@pytest.mark.parametrize(
    ("status", "code", "retry", "failure"),
    [
        (400, "Throttling", True, FailureReason.RATE_LIMITED),
        (429, "Throttled", True, FailureReason.RATE_LIMITED),
        (400, "KMSThrottling", True, FailureReason.RATE_LIMITED),
        (503, "ServiceUnavailable", True, FailureReason.SERVER_ERROR),
        (500, "InternalError", True, FailureReason.SERVER_ERROR),
        (403, "AuthorizationError", False, FailureReason.CLIENT_ERROR),
        (403, "AccessDenied", False, FailureReason.CLIENT_ERROR),
        (400, "InvalidParameter", False, FailureReason.CLIENT_ERROR),
        (404, "NotFound", False, FailureReason.CLIENT_ERROR),
        (403, "SignatureDoesNotMatch", False, FailureReason.CLIENT_ERROR),
    ],
)
async def test_aws_error_codes_decide(status: int, code: str, retry: bool, failure: FailureReason) -> None:
    body = XML_ERROR.format(code=code, message="what AWS says")
    cls = RetryableDeliveryError if status >= 500 or status == 429 else PermanentDeliveryError
    base_failure = FailureReason.CLIENT_ERROR if cls is PermanentDeliveryError else FailureReason.SERVER_ERROR
    exc = cls("x: request failed", reason=f"http_{status}", failure=base_failure, status=status, body=body)
    refined = await refine(exc)
    assert isinstance(refined, RetryableDeliveryError) is retry
    assert isinstance(refined, PermanentDeliveryError) is not retry
    assert refined.failure is failure
    assert refined.reason == f"http_{status}"  # the metric's label stays the status
    assert str(refined) == f"error publishing to SNS topic t: {code}: what AWS says (HTTP {status})"


async def test_an_answer_without_an_aws_code_is_left_as_it_is() -> None:
    exc = PermanentDeliveryError(
        "x", reason="http_400", failure=FailureReason.CLIENT_ERROR, status=400, body="{}"
    )
    assert await refine(exc) is exc


def test_error_bodies() -> None:
    assert aws_error(XML_ERROR.format(code="NotFound", message="Topic does not exist")) == (
        "NotFound",
        "Topic does not exist",
    )
    sqs_json = (
        '{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."}'
    )
    assert aws_error(sqs_json) == ("QueueDoesNotExist", "The specified queue does not exist.")
    assert aws_error('{"__type":"ThrottlingException:http://internal"}') == ("ThrottlingException", "")
    assert aws_error("<html>502 Bad Gateway</html>") == ("", "")
    assert aws_error("[1, 2]") == ("", "")
    assert aws_error("{not json") == ("", "")


# ---- web identity and what errors may show ------------------------------------------------------

STS_SECRET = "sts-issued-secret/Key+ZYXWVUT9876543210"
STS_TOKEN = "sts-issued-session-token-IQoJb3JpZ2luX2VjEXAMPLE"
WEB_IDENTITY_TOKEN = "eyJhbGciOiJSUzI1NiJ9.web-identity-canary.c2lnbmF0dXJl"
STS_ANSWER = (
    '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
    "<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIAEXAMPLESTSKEY001</AccessKeyId>"
    f"<SecretAccessKey>{STS_SECRET}</SecretAccessKey><SessionToken>{STS_TOKEN}</SessionToken>"
    "<Expiration>2099-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
    "</AssumeRoleWithWebIdentityResponse>"
)


async def test_web_identity_signs_with_sts_credentials_reused_and_never_shown(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IRSA: the projected token is exchanged at STS once; both deliveries are signed with the temporary
    credentials (checked with botocore); an answer that echoes every header sent (a proxy, a misbehaving
    endpoint) shows neither the secret key, the session token, the web identity token nor the signature."""
    from notification_controller.outbound.tokens import TokenCache
    from tests.support.capture import CaptureServer, Reply

    token_file = tmp_path / "token"
    token_file.write_text(WEB_IDENTITY_TOKEN + "\n")
    async with CaptureServer() as srv:
        srv.on("POST", "^/sts/", Reply(200, STS_ANSWER, headers={"Content-Type": "text/xml"}))
        echoed: list[str] = []

        def publish(req: CapturedRequest) -> Reply:
            if not echoed and len([r for r in srv.requests if r.path.startswith("/sns/")]) <= 2:
                return Reply(200, "<PublishResponse/>", headers={"Content-Type": "text/xml"})
            text = " ".join(f"{k}: {v}" for k, v in req.headers.items())
            text += " signature " + req.headers["Authorization"].rsplit("Signature=", 1)[1]  # on its own too
            echoed.append(text)
            return Reply(403, XML_ERROR.format(code="AuthorizationError", message=text))

        srv.on("POST", "^/sns/", publish)
        monkeypatch.setenv("AWS_ENDPOINT_URL_SNS", f"{srv.url}/sns/")
        notifier = sns(channel=TOPIC, secret_data={})
        environ = {
            "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/flux-notifier",
            "AWS_WEB_IDENTITY_TOKEN_FILE": str(token_file),
            "AWS_ENDPOINT_URL_STS": f"{srv.url}/sts/",
        }
        http = OutboundHTTP()
        await http.start()
        try:
            tokens = TokenCache()
            ctx = DeliveryContext(http=http, tokens=tokens, identity=WorkloadIdentity(environ=environ))
            await notifier.post(SAMPLE_EVENT, ctx)
            await notifier.post(SAMPLE_EVENT, ctx)
            assert (tokens.misses, tokens.hits) == (1, 1)
            sts = [r for r in srv.requests if r.path.startswith("/sts/")]
            assert len(sts) == 1
            assert "Authorization" not in sts[0].headers  # the token is the credential: unsigned
            form = form_of(sts[0].body)
            assert form["Action"] == "AssumeRoleWithWebIdentity" and form["Version"] == "2011-06-15"
            assert form["RoleArn"] == environ["AWS_ROLE_ARN"]
            assert form["WebIdentityToken"] == WEB_IDENTITY_TOKEN
            publishes = [r for r in srv.requests if r.path.startswith("/sns/")]
            for req in publishes:
                parts = verify_sigv4(req, STS_SECRET, STS_TOKEN)
                assert parts["access_key"] == "ASIAEXAMPLESTSKEY001"
            with pytest.raises(PermanentDeliveryError) as info:
                await notifier.post(SAMPLE_EVENT, ctx)
        finally:
            await http.close()
    signature = publishes[-1].headers["Authorization"].rsplit("Signature=", 1)[1]
    assert signature in echoed[0] and STS_TOKEN in echoed[0]  # the answer did carry them...
    text = f"{info.value} {info.value!r} {info.value.body}"
    assert "AuthorizationError" in text
    for secret in (STS_SECRET, STS_TOKEN, WEB_IDENTITY_TOKEN, signature):
        assert secret not in text  # ...the error does not


async def test_an_sts_refusal_never_shows_the_web_identity_token(tmp_path: Any) -> None:
    """STS's own words (its code and message) make the error, and an answer that echoes the request's form
    does not show the projected token."""
    from tests.support.capture import CaptureServer, Reply

    token_file = tmp_path / "token"
    token_file.write_text(WEB_IDENTITY_TOKEN)
    async with CaptureServer() as srv:
        srv.on(
            "POST",
            "^/sts/",
            lambda req: Reply(400, XML_ERROR.format(code="InvalidIdentityToken", message=req.body.decode())),
        )
        environ = {
            "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/flux-notifier",
            "AWS_WEB_IDENTITY_TOKEN_FILE": str(token_file),
            "AWS_ENDPOINT_URL_STS": f"{srv.url}/sts/",
        }
        http = OutboundHTTP()
        await http.start()
        try:
            ctx = DeliveryContext(http=http, identity=WorkloadIdentity(environ=environ))
            with pytest.raises(PermanentDeliveryError) as info:
                await sns(channel=TOPIC, secret_data={}).post(SAMPLE_EVENT, ctx)
        finally:
            await http.close()
    assert WEB_IDENTITY_TOKEN in srv.requests[0].body.decode().replace("%2F", "/")  # it was sent...
    text = f"{info.value} {info.value!r} {info.value.body}"
    assert "failed to get AWS credentials for the controller's web identity: InvalidIdentityToken" in text
    assert info.value.failure is FailureReason.AUTH
    assert "web-identity-canary" not in text  # ...and is not shown


def test_sts_answers_that_are_refused() -> None:
    from notification_controller.outbound.identity import sts_credentials

    bomb = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>'
    for body, why in [
        (bomb, "declares a DTD"),
        (b"not xml", "not XML"),
        (b"<Response/>", "no Credentials"),
        (STS_ANSWER.replace(STS_TOKEN, "").encode(), "lacks"),
        (STS_ANSWER.replace("2099-01-01T00:00:00Z", "soon").encode(), "Expiration"),
    ]:
        with pytest.raises(PermanentDeliveryError, match=why):
            sts_credentials(body, "sts")
    good = sts_credentials(STS_ANSWER.encode(), "sts")
    assert good.value == STS_SECRET and good.extra["sessionToken"] == STS_TOKEN
    assert STS_SECRET not in repr(good)


async def test_a_service_accounts_role_under_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--default-service-account`` (or ``spec.serviceAccountName``): the ServiceAccount's token, for the
    audience EKS uses, exchanged for the role of its ``eks.amazonaws.com/role-arn`` annotation, as Flux's
    ``auth/aws``; never the controller's own identity; without the gate, nothing is asked of anyone."""
    from notification_controller.objects.base import ObjectStore
    from tests.support.capture import CaptureServer, Reply
    from tests.support.recording_cluster import RecordingCluster

    role = "arn:aws:iam::123456789012:role/tenant-a-notifier"
    cluster = RecordingCluster(ObjectStore())
    cluster.service_accounts[("ns", "tenant-a")] = {"annotations": {"eks.amazonaws.com/role-arn": role}}
    async with CaptureServer() as srv:
        srv.on("POST", "^/sts/", Reply(200, STS_ANSWER, headers={"Content-Type": "text/xml"}))
        srv.on("POST", "^/sns/", Reply(200, "<PublishResponse/>", headers={"Content-Type": "text/xml"}))
        monkeypatch.setenv("AWS_ENDPOINT_URL_SNS", f"{srv.url}/sns/")
        notifier = sns(channel=TOPIC, secret_data={})
        environ = {  # the controller's own IRSA is there too: the ServiceAccount's role must win
            "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/the-controllers-own",
            "AWS_WEB_IDENTITY_TOKEN_FILE": "/nonexistent",
            "AWS_ENDPOINT_URL_STS": f"{srv.url}/sts/",
        }
        http = OutboundHTTP()
        await http.start()
        try:
            off = WorkloadIdentity(cluster, default_service_account="tenant-a", environ=environ)
            with pytest.raises(PermanentDeliveryError, match="ObjectLevelWorkloadIdentity feature gate"):
                await notifier.post(SAMPLE_EVENT, DeliveryContext(http=http, identity=off))
            assert srv.requests == [] and cluster.token_requests == []
            on = WorkloadIdentity(
                cluster, object_level=True, default_service_account="tenant-a", environ=environ
            )
            await notifier.post(SAMPLE_EVENT, DeliveryContext(http=http, identity=on))
        finally:
            await http.close()
    assert [(ns, name, aud) for ns, name, aud, _ in cluster.token_requests] == [
        ("ns", "tenant-a", ["sts.amazonaws.com"])
    ]
    sts, publish = srv.requests
    form = form_of(sts.body)
    assert form["RoleArn"] == role
    assert form["WebIdentityToken"].count(".") == 2  # the ServiceAccount's JWT
    verify_sigv4(publish, STS_SECRET, STS_TOKEN)


async def test_a_service_account_without_a_role_annotation_is_refused() -> None:
    from notification_controller.objects.base import ObjectStore
    from tests.support.recording_cluster import RecordingCluster

    cluster = RecordingCluster(ObjectStore())
    cluster.service_accounts[("ns", "plain")] = {"annotations": {}}
    identity = WorkloadIdentity(cluster, object_level=True, default_service_account="plain", environ={})
    with pytest.raises(
        PermanentDeliveryError, match=r"eks\.amazonaws\.com/role-arn is not set to an IAM role ARN"
    ):
        await sns(channel=TOPIC, secret_data={}).post(
            SAMPLE_EVENT, DeliveryContext(http=OutboundHTTP(), identity=identity)
        )
    assert cluster.token_requests == []
