"""Amazon SQS (beyond Flux): its conformance case and the pure tests of its request.

The case is a FIFO queue (group and deduplication ids), sent to the kit's capture server through
``AWS_ENDPOINT_URL_SQS`` and checked with botocore's signature, as AWS would. What SNS and SQS share (the
failure vocabulary, the endpoint rule) is tested in ``test_sns.py``;
``tests/integration/test_aws_providers.py`` sends to moto's SQS for real and reads the message back.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.aws import SQSNotifier
from notification_controller.providers.message import Message
from tests.providers.build import SAMPLE_EVENT
from tests.providers.case import ProviderCase
from tests.providers.support import SAMPLE_GO_JSON, construction_error, one, opts
from tests.support.aws import verify_sigv4
from tests.support.capture import CapturedRequest

QUEUE = "https://sqs.ap-southeast-2.amazonaws.com/123456789012/flux-events.fifo"
SECRET_KEY = "sqs-canary-secret/Key+abcdefghij0123456789"

# ---- conformance case ----------------------------------------------------------------------------


def expect_sqs(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.method == "POST"
    assert req.path == "/"
    assert req.headers["Content-Type"] == "application/x-amz-json-1.0"
    assert req.headers["X-Amz-Target"] == "AmazonSQS.SendMessage"
    body = req.json()
    assert body.pop("MessageBody").encode() == SAMPLE_GO_JSON
    dedup = body.pop("MessageDeduplicationId")
    assert len(dedup) == 64
    assert body == {
        "QueueUrl": QUEUE,
        "MessageAttributes": {
            "severity": {"DataType": "String", "StringValue": "info"},
            "reason": {"DataType": "String", "StringValue": "ReconciliationSucceeded"},
            "kind": {"DataType": "String", "StringValue": "GitRepository"},
            "namespace": {"DataType": "String", "StringValue": "gitops-system"},
            "name": {"DataType": "String", "StringValue": "webapp"},
        },
        "MessageGroupId": "GitRepository/gitops-system/webapp",
    }
    parts = verify_sigv4(req, SECRET_KEY)
    assert (parts["access_key"], parts["region"], parts["service"]) == (
        "AKIASQSEXAMPLEKEYID1",
        "ap-southeast-2",
        "sqs",
    )
    assert parts["SignedHeaders"] == "content-type;host;x-amz-date;x-amz-target"
    assert "X-Amz-Security-Token" not in req.headers


CASES: list[ProviderCase] = [
    ProviderCase(
        type="sqs",
        spec={"address": QUEUE},
        secret={"awsAccessKeyId": "AKIASQSEXAMPLEKEYID1", "awsSecretAccessKey": SECRET_KEY},
        env={"AWS_ENDPOINT_URL_SQS": "{url}/"},
        expect=expect_sqs,
        canaries=[SECRET_KEY],
    ),
]

# ---- construction ---------------------------------------------------------------------------------

KEYS = {"awsAccessKeyId": b"AKIAEXAMPLE", "awsSecretAccessKey": b"secret-key-value"}


def sqs(address: str, **kw: Any) -> SQSNotifier:
    kw.setdefault("secret_data", KEYS)
    return SQSNotifier(opts(ProviderType.SQS, address=address, **kw))


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("", "SQS queue URL cannot be empty"),
        ("sqs://queue", "invalid SQS queue URL in spec.address: must be an absolute http"),
        (
            "https://sqs.eu-west-1.amazonaws.com/flux",
            "expected https://sqs.<region>.amazonaws.com/<account>/<queue>",
        ),
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/a/b", "expected https://sqs"),
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/q?x=1", "expected https://sqs"),
        ("https://k:s@sqs.eu-west-1.amazonaws.com/123456789012/q", "credentials in the URL"),
        ("http://127.0.0.1:4566/000000000000/q", "cannot tell the AWS region"),
    ],
)
def test_constructor_errors(address: str, message: str) -> None:
    assert message in construction_error(SQSNotifier, ProviderType.SQS, address=address, secret_data=KEYS)


@pytest.mark.parametrize(
    ("address", "region"),
    [
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/q", "eu-west-1"),
        ("https://sqs.cn-northwest-1.amazonaws.com.cn/123456789012/q", "cn-northwest-1"),
        ("https://us-gov-west-1.queue.amazonaws.com/123456789012/q", "us-gov-west-1"),
        ("https://queue.amazonaws.com/123456789012/q", "us-east-1"),
        ("https://vpce-0123-abcd.sqs.eu-west-3.vpce.amazonaws.com/123456789012/q", "eu-west-3"),
        ("https://sqs.us-east-1.api.aws/123456789012/q", "us-east-1"),
    ],
)
def test_region_from_the_queue_url(address: str, region: str) -> None:
    notifier = sqs(address)
    assert notifier.region == region
    assert notifier.endpoint == address.rsplit("/", 2)[0] + "/"


def test_region_from_the_secret_for_an_emulator() -> None:
    notifier = sqs("http://127.0.0.1:4566/000000000000/q", secret_data={**KEYS, "region": b"eu-north-1"})
    assert notifier.region == "eu-north-1"


def test_standard_queue_and_a_stage_message() -> None:
    notifier = sqs("https://sqs.eu-west-1.amazonaws.com/123456789012/flux")
    plain = json.loads(notifier.build_request(SAMPLE_EVENT).body)
    assert "MessageGroupId" not in plain and "MessageDeduplicationId" not in plain
    assert plain["MessageBody"].encode() == SAMPLE_GO_JSON
    templated = json.loads(notifier.build_request(SAMPLE_EVENT, Message("T", "Déployé ✓", "info")).body)
    assert json.loads(templated["MessageBody"])["message"] == "Déployé ✓"
