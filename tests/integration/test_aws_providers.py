"""``sns`` and ``sqs`` against moto's real server (a local AWS API emulator), through the real controller.

moto runs as ``python -m moto.server`` on 127.0.0.1 (``tests/support/aws.py``); topics, queues, users and
roles are made with boto3, and messages are read back with boto3. The controller runs in local mode with
``--workload-identity-custom-endpoints`` (moto is not an AWS host) and sends with its own code: our SigV4,
our SNS query and SQS JSON requests.

* a Kustomization event reaches an SQS queue and, through an SNS topic subscribed by another queue, the
  same event JSON with its message attributes; a FIFO queue gets the group and deduplication ids;
* with moto's IAM checks on (every request's signature recomputed with botocore, the key's policy
  consulted), the right key delivers, a wrong secret key is answered ``SignatureDoesNotMatch``: permanent,
  a dead letter at once with the durable store, and the key never appears in what is recorded;
* a delivery while moto cannot be reached is retried by the durable outbox and arrives once it can;
* the controller's web identity (``AWS_ROLE_ARN``, ``AWS_WEB_IDENTITY_TOKEN_FILE``) is exchanged at moto's
  STS for temporary credentials that moto accepts (session token checked), and they are reused.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from notification_controller.app import App
from notification_controller.deadletters import main as dead_letters
from notification_controller.settings import KubeSettings, ServerSettings, Settings, StoreSettings
from tests.integration.appkit import FAST_RETRY, metric, post_event
from tests.support.aws import MotoServer
from tests.support.controllers import event

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
POLICY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["sqs:*", "sns:*"], "Resource": "*"}],
    }
)


@asynccontextmanager
async def controller(manifests: Path, store: StoreSettings | None = None) -> AsyncIterator[App]:
    settings = Settings(
        server=ServerSettings(
            events_addr="127.0.0.1:0",
            receiver_addr="127.0.0.1:0",
            metrics_addr="127.0.0.1:0",
            health_addr="127.0.0.1:0",
            shutdown_grace=5.0,
        ),
        store=store or StoreSettings(),
        kube=KubeSettings(workload_identity_custom_endpoints=True),
        manifests=manifests,
        manifests_poll_interval=0.1,
    )
    app = App(settings, retry=FAST_RETRY)
    await app.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not app.ready():  # a durable store opens in the background
            assert loop.time() < deadline, "the controller never got ready"
            await asyncio.sleep(0.02)
        yield app
    finally:
        await app.stop()


def write_manifests(
    directory: Path, providers: list[tuple[str, str, dict[str, str], dict[str, str]]]
) -> Path:
    """One Alert per Provider (name, type, spec, Secret stringData) on every Kustomization."""
    directory.mkdir(parents=True, exist_ok=True)
    docs = []
    for name, ptype, spec, secret in providers:
        ref = ""
        if secret:
            docs.append(
                json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": f"{name}-aws", "namespace": "flux-system"},
                        "stringData": secret,
                    }
                )
            )
            ref = f"{name}-aws"
        provider_spec: dict[str, Any] = {"type": ptype, "timeout": "10s", **spec}
        if ref:
            provider_spec["secretRef"] = {"name": ref}
        docs.append(
            json.dumps(
                {
                    "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                    "kind": "Provider",
                    "metadata": {"name": name, "namespace": "flux-system"},
                    "spec": provider_spec,
                }
            )
        )
        docs.append(
            json.dumps(
                {
                    "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                    "kind": "Alert",
                    "metadata": {"name": f"to-{name}", "namespace": "flux-system"},
                    "spec": {
                        "providerRef": {"name": name},
                        "eventSeverity": "info",
                        "eventSources": [{"kind": "Kustomization", "name": "*"}],
                    },
                }
            )
        )
    (directory / "manifests.yaml").write_text("\n---\n".join(docs), encoding="utf-8")
    return directory


async def until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``check`` (run in a thread: boto3 blocks) until it returns something truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await asyncio.to_thread(check)
        if value:
            return value
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def receive(sqs: Any, url: str) -> list[dict[str, Any]]:
    answer = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=0
    )
    return list(answer.get("Messages", []))


async def send(app: App, name: str, message: str = "Reconciliation finished") -> None:
    resp = await post_event(app, json.dumps(event(name, message)).encode())
    assert resp.status == 202


def dead_letter_rows(db: Path) -> list[dict[str, Any]]:
    out = io.StringIO()
    assert dead_letters(["list", "--store", f"sqlite:{db}", "-o", "json"], out) == 0
    rows = json.loads(out.getvalue())
    return rows if isinstance(rows, list) else list(rows.get("items", []))


async def test_sqs_sns_and_fifo_through_the_controller(tmp_path: Path) -> None:
    async with MotoServer() as moto:
        sqs, sns = moto.client("sqs"), moto.client("sns")

        def setup() -> tuple[str, str, str, str]:
            queue = sqs.create_queue(QueueName="flux-events")["QueueUrl"]
            fifo = sqs.create_queue(QueueName="flux-events.fifo", Attributes={"FifoQueue": "true"})[
                "QueueUrl"
            ]
            fanout = sqs.create_queue(QueueName="from-sns")["QueueUrl"]
            topic = sns.create_topic(Name="flux")["TopicArn"]
            arn = sqs.get_queue_attributes(QueueUrl=fanout, AttributeNames=["QueueArn"])["Attributes"][
                "QueueArn"
            ]
            sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
            return queue, fifo, fanout, topic

        queue, fifo, fanout, topic = await asyncio.to_thread(setup)
        keys = {
            "awsAccessKeyId": "AKIAIOSFODNN7EXAMPLE",
            "awsSecretAccessKey": "moto-accepts-any-key",
            "region": REGION,
        }
        manifests = write_manifests(
            tmp_path / "m",
            [
                ("queue", "sqs", {"address": queue}, keys),
                ("fifo", "sqs", {"address": fifo}, keys),
                ("topic", "sns", {"channel": topic, "address": moto.url}, keys),
            ],
        )
        async with controller(manifests) as app:
            await send(app, "webapp", "Applied revision main@sha1:0c9c2e41")

            [got] = await until(lambda: receive(sqs, queue), "the SQS message")
            body = json.loads(got["Body"])
            assert body["involvedObject"]["name"] == "webapp"
            assert body["message"] == "Applied revision main@sha1:0c9c2e41"
            assert body["reason"] == "ReconciliationSucceeded"
            attributes = {k: v["StringValue"] for k, v in got["MessageAttributes"].items()}
            assert attributes == {
                "severity": "info",
                "reason": "ReconciliationSucceeded",
                "kind": "Kustomization",
                "namespace": "flux-system",
                "name": "webapp",
            }

            [ordered] = await until(
                lambda: sqs.receive_message(
                    QueueUrl=fifo, AttributeNames=["All"], MessageSystemAttributeNames=["All"]
                ).get("Messages"),
                "the FIFO message",
            )
            assert ordered["Attributes"]["MessageGroupId"] == "Kustomization/flux-system/webapp"
            assert len(ordered["Attributes"]["MessageDeduplicationId"]) == 64
            assert json.loads(ordered["Body"]) == body

            [envelope] = await until(lambda: receive(sqs, fanout), "the SNS message in its subscribed queue")
            notification = json.loads(envelope["Body"])  # SNS's envelope around our message
            assert notification["TopicArn"] == topic
            assert notification["Subject"] == "kustomization/webapp.flux-system"
            assert json.loads(notification["Message"]) == body
            assert notification["MessageAttributes"]["severity"] == {"Type": "String", "Value": "info"}
            assert metric(app, "notification_delivery_failed_total") == 0


class Gate:
    """A TCP forwarder on 127.0.0.1 in front of moto: ``open`` False drops every connection unanswered (the
    endpoint is down: a transport error the outbound path calls retryable), True pipes the bytes through
    unchanged (the signed ``Host`` is the gate's, as moto sees it)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.open = True
        self.dropped = 0
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            self.dropped += 1
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def __aenter__(self) -> Gate:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def test_signatures_checked_wrong_key_dead_lettered_and_down_then_retried(tmp_path: Path) -> None:
    """moto checks every signature (botocore) and the key's IAM policy: the right key delivers, a wrong one is
    answered SignatureDoesNotMatch, a dead letter at once; an endpoint that is down is retried until it is up."""
    db = tmp_path / "state.db"
    store = StoreSettings(url=f"sqlite:{db}", retry_base=0.2, retry_cap=0.5, breaker_threshold=1000)
    async with MotoServer() as moto, Gate(moto.port) as gate:
        iam, sqs = moto.client("iam"), moto.client("sqs")
        queue = f"{gate.url}/{ACCOUNT}/checked"

        def setup() -> dict[str, str]:
            iam.create_user(UserName="flux")
            iam.put_user_policy(UserName="flux", PolicyName="send", PolicyDocument=POLICY)
            key = iam.create_access_key(UserName="flux")["AccessKey"]
            sqs.create_queue(QueueName="checked")
            return {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}

        right = await asyncio.to_thread(setup)
        await asyncio.to_thread(moto.require_auth)
        good = {"awsAccessKeyId": right["id"], "awsSecretAccessKey": right["secret"], "region": REGION}
        wrong = "wrong-secret-canary-7Qx/9Zz+AbCdEf"
        bad = {**good, "awsSecretAccessKey": wrong}
        manifests = write_manifests(
            tmp_path / "m",
            [("good", "sqs", {"address": queue}, good), ("bad", "sqs", {"address": queue}, bad)],
        )
        reader = moto.client("sqs", aws_access_key_id=right["id"], aws_secret_access_key=right["secret"])
        async with controller(manifests, store) as app:
            await send(app, "signed")
            [got] = await until(lambda: receive(reader, queue), "the message signed with the right key")
            assert json.loads(got["Body"])["involvedObject"]["name"] == "signed"

            rows = await until(lambda: dead_letter_rows(db), "the dead letter of the wrong key")
            assert len(rows) == 1
            text = json.dumps(rows)
            assert "SignatureDoesNotMatch" in text
            assert wrong not in text and right["secret"] not in text
            assert metric(app, "notification_dead_letters_total", reason="permanent") == 1

            # the endpoint is down: the attempts fail (no answer) and the outbox retries until it is up
            gate.open = False
            failed = metric(app, "notification_delivery_failed_total")
            await send(app, "while-down")
            await until(
                lambda: metric(app, "notification_delivery_failed_total") >= failed + 4, "failed attempts"
            )
            assert gate.dropped >= 2
            gate.open = True
            late = await until(lambda: receive(reader, queue), "the retried message")
            assert [json.loads(m["Body"])["involvedObject"]["name"] for m in late] == ["while-down"]
            rows = await until(
                lambda: len(dead_letter_rows(db)) == 2 and dead_letter_rows(db), "the second dead letter"
            )
            assert all("SignatureDoesNotMatch" in row["error"] for row in rows), rows  # nothing else died


async def test_web_identity_against_moto_sts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """IRSA: the projected token exchanged at moto's STS; the SQS requests are then signed with the temporary
    credentials and checked by moto (signature, session token, the role's policy); one exchange serves both."""
    async with MotoServer() as moto:
        iam, sqs = moto.client("iam"), moto.client("sqs")
        trust = json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Federated": f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.example"},
                        "Action": "sts:AssumeRoleWithWebIdentity",
                    }
                ],
            }
        )

        def setup() -> tuple[str, dict[str, str]]:
            iam.create_role(RoleName="flux-notifier", AssumeRolePolicyDocument=trust)
            iam.put_role_policy(RoleName="flux-notifier", PolicyName="send", PolicyDocument=POLICY)
            iam.create_user(UserName="reader")
            iam.put_user_policy(UserName="reader", PolicyName="read", PolicyDocument=POLICY)
            key = iam.create_access_key(UserName="reader")["AccessKey"]
            queue = str(sqs.create_queue(QueueName="irsa")["QueueUrl"])
            return queue, {
                "aws_access_key_id": key["AccessKeyId"],
                "aws_secret_access_key": key["SecretAccessKey"],
            }

        queue, reader_key = await asyncio.to_thread(setup)
        token_file = tmp_path / "token"
        token_file.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6Zmx1eCJ9.c2ln\n")
        monkeypatch.setenv("AWS_ROLE_ARN", f"arn:aws:iam::{ACCOUNT}:role/flux-notifier")
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto.url)
        monkeypatch.setenv("AWS_REGION", REGION)
        manifests = write_manifests(tmp_path / "m", [("irsa", "sqs", {"address": queue}, {"region": REGION})])
        async with controller(manifests) as app:
            # the next action (the controller's STS exchange) is free, every one after it is checked
            await asyncio.to_thread(moto.require_auth, 1)
            await send(app, "first")
            reader = moto.client("sqs", **reader_key)
            got: list[dict[str, Any]] = []

            def read() -> list[dict[str, Any]]:
                got.extend(receive(reader, queue))
                return got if len(got) >= 2 else []

            attempts = ("notification_delivered_total", "notification_delivery_failed_total")
            # the first delivery (its STS exchange took the free action) before anything else is sent
            await until(lambda: sum(metric(app, name) for name in attempts) >= 1, "the first delivery")
            await send(app, "second")
            await until(read, "both messages sent with the web identity's credentials")
            assert sorted(json.loads(m["Body"])["involvedObject"]["name"] for m in got) == ["first", "second"]
            assert metric(app, "notification_delivery_failed_total") == 0
            tokens = app.pipeline.deliverer.tokens
            assert tokens is not None
            assert (tokens.misses, tokens.hits) == (1, 1)  # one STS exchange, its credentials reused
