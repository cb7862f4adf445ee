"""A rotated receiver token stops working at once, on every replica, without waiting for a reconcile.

Issue 11 item 9. The receiver server finds a Receiver by ``status.webhookPath``, which only the leader's
reconcile rewrites; a standby (or the leader before its queue reaches the Receiver) still holds the old
status. The server therefore recomputes ``sha256(token + name + namespace)`` from the Secret as the store
holds it *now* and answers a path that no longer matches exactly like an unknown path (404).

Two set-ups prove it: the receiver app over an ``ObjectStore`` whose Secret is replaced while the Receiver's
status is left alone (what a standby's informers do), for every type with ``spec.secretRef``; and the real
``App`` in local mode with its reconcilers stopped, the Secret rewritten on disk.
"""

from __future__ import annotations

import asyncio
import logging
import textwrap
from pathlib import Path

import aiohttp
import pytest

from notification_controller.api import RECONCILE_REQUEST_ANNOTATION
from notification_controller.api.common import Secret
from notification_controller.api.receiver import ReceiverStatus, ReceiverType
from notification_controller.app import App
from notification_controller.core.webhook import webhook_path
from notification_controller.server.receivers import ReceiverServerSettings
from tests.integration.appkit import local_cluster, running_app
from tests.receivers.case import Env
from tests.receivers.cases import CASES
from tests.support.receiver_kit import TOKEN, Harness, LocalIssuer, make_receiver, ready_status

ROTATED = "rotated-receiver-token"
SECRET_TYPES = sorted(t for t in CASES if t != ReceiverType.GENERIC_OIDC.value)


def rotated(secret: Secret | None, token: str = ROTATED) -> Secret:
    assert secret is not None
    return secret.model_copy(update={"data": {**secret.data, "token": token.encode()}})


@pytest.mark.parametrize("type_", SECRET_TYPES)
async def test_old_path_is_unknown_once_the_secret_is_rotated(type_: str) -> None:
    """Every type with ``secretRef``: after the rotation the old path is 404, whatever the request carries."""
    case = CASES[type_]
    async with LocalIssuer() as issuer:
        h = Harness()
        env = Env(TOKEN, issuer, h.clock.now())
        if case.settings is not None:
            h.settings = ReceiverServerSettings(**case.settings(env))
        receiver, secret = make_receiver(type_, secret_data=case.secret_data)
        old_path = h.add(receiver, secret)
        h.add_targets()
        async with h:
            headers, body = case.valid(env)
            assert (await h.post(old_path, body, headers))[0] == 200
            calls = len(h.cluster.annotate_calls)

            h.store.upsert(rotated(secret))  # the informer's update; the Receiver's status is untouched
            assert h.store.receiver_by_path(old_path) is not None
            for token in (TOKEN, ROTATED):  # signed with the old or the new token: the path is refused
                headers, body = case.valid(Env(token, issuer, h.clock.now()))
                status, answer, _ = await h.post(old_path, body, headers)
                assert (status, answer) == (404, b""), token
            new_path = webhook_path(ROTATED.encode(), "receiver", "default")
            assert (await h.post(new_path, body, headers))[0] == 404  # not published yet: unknown
            assert len(h.cluster.annotate_calls) == calls
            assert h.metric("notification_receiver_requests_total", type=type_, outcome="not_found") == 2


async def test_the_path_follows_the_secret_both_ways(caplog: pytest.LogCaptureFixture) -> None:
    """Rotating back revives the old path; publishing the new path (the reconcile) serves the new token."""
    caplog.set_level(logging.DEBUG)
    h = Harness()
    receiver, secret = make_receiver("generic")
    old_path = h.add(receiver, secret)
    h.add_targets()
    async with h:
        assert (await h.post(old_path, b"{}"))[0] == 200
        h.store.upsert(rotated(secret))
        assert (await h.post(old_path, b"{}"))[0] == 404
        h.store.upsert(rotated(secret, TOKEN))  # rotated back: the old path is current again
        assert (await h.post(old_path, b"{}"))[0] == 200

        h.store.upsert(rotated(secret))
        new_path = webhook_path(ROTATED.encode(), "receiver", "default")
        published = ReceiverStatus.model_validate(ready_status(new_path))  # what the reconcile writes
        h.store.upsert(receiver.model_copy(update={"status": published}))
        assert (await h.post(new_path, b"{}"))[0] == 200
        assert (await h.post(old_path, b"{}"))[0] == 404
        assert len(h.cluster.annotate_calls) == 3

    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "path not derived from the current secret token" in logged
    for value in (TOKEN, ROTATED, old_path.removeprefix("/hook/"), new_path.removeprefix("/hook/")):
        assert value not in logged


async def test_spec_without_secret_ref_is_not_served() -> None:
    """A spec an API server < 1.25 let through (``generic`` without ``secretRef``) under a Ready status from
    its previous generation would authenticate nothing: it has no current path."""
    h = Harness()
    receiver, secret = make_receiver("generic")
    path = h.add(receiver, secret)
    h.add_targets()
    broken = receiver.model_copy(update={"spec": receiver.spec.model_copy(update={"secret_ref": None})})
    assert broken.spec.validation_errors() == ["secretRef is required when type is not generic-oidc"]
    h.store.upsert(broken)
    async with h:
        assert (await h.post(path, b"{}"))[0] == 404
        assert h.cluster.annotate_calls == []


async def test_generic_oidc_path_is_still_served() -> None:
    """generic-oidc has no Secret: its path is computed from the empty token, and stays current."""
    receiver, _ = make_receiver(
        "generic-oidc",
        oidc_providers=[
            {"issuerURL": "https://issuer.example", "validations": [{"expression": "true", "message": "m"}]}
        ],
    )
    h = Harness()
    path = h.add(receiver, None)
    async with h:
        # past the path check: the bearer token is what fails (400), not the lookup (404)
        assert (await h.post(path, b"{}"))[0] == 400


# ---- local mode: the real App, reconcilers stopped (a standby), the Secret rewritten on disk ----------

NS = "flux-system"


def manifests(token: str) -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: Secret
        metadata: {{name: hook-token, namespace: {NS}}}
        stringData: {{token: {token}}}
        """
    )


RECEIVER = textwrap.dedent(
    f"""\
    apiVersion: notification.toolkit.fluxcd.io/v1
    kind: Receiver
    metadata: {{name: hook, namespace: {NS}}}
    spec:
      type: generic
      secretRef: {{name: hook-token}}
      resources: [{{kind: GitRepository, name: webapp}}]
    ---
    apiVersion: source.toolkit.fluxcd.io/v1
    kind: GitRepository
    metadata: {{name: webapp, namespace: {NS}}}
    spec: {{url: 'https://example.com/webapp'}}
    """
)


def requested_at(app: App) -> str | None:
    obj = local_cluster(app).others[("GitRepository", NS, "webapp")]
    value = (obj["metadata"].get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
    return None if value is None else str(value)


async def test_local_mode_rotation_without_a_reconcile(tmp_path: Path) -> None:
    (tmp_path / "secret.yaml").write_text(manifests("first-token"))
    (tmp_path / "receiver.yaml").write_text(RECEIVER)
    old_path = webhook_path(b"first-token", "hook", NS)
    async with running_app(tmp_path) as app:

        def status_path() -> str | None:
            obj = app.store.receiver(NS, "hook")
            return None if obj is None else obj.status.webhook_path

        async with asyncio.timeout(10):
            while status_path() != old_path:
                await asyncio.sleep(0.05)
        url = f"http://127.0.0.1:{app.ports['receiver']}"
        async with aiohttp.ClientSession() as session:

            async def post(path: str) -> int:
                async with session.post(url + path, data=b"{}") as resp:
                    return resp.status

            assert await post(old_path) == 200
            annotation = requested_at(app)
            assert annotation is not None
            await app.controllers.stop(deadline=2.0)  # from here on nothing reconciles, as on a standby

            (tmp_path / "secret.yaml").write_text(manifests("second-token"))
            async with asyncio.timeout(10):
                while (s := app.store.secret(NS, "hook-token")) is None or s.data["token"] != b"second-token":
                    await asyncio.sleep(0.05)
            assert await post(old_path) == 404
            assert status_path() == old_path  # no reconcile happened: the status still names the old path
            assert await post(webhook_path(b"second-token", "hook", NS)) == 404
            assert requested_at(app) == annotation  # nothing was triggered
