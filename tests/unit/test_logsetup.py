"""Logs as Flux's controllers write them: Flux's levels, structured keys, one JSON object per line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from notification_controller import logsetup
from notification_controller.core.redact import Redactor


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_warnings_are_errors_and_survive_log_level_error(restore_logging: None) -> None:
    """Flux has no warning level: --log-level=error must not hide a failed delivery logged as a warning."""
    stream = io.StringIO()
    logsetup.configure("error", "json", Redactor(), stream)
    log = logging.getLogger("notification_controller.test")
    log.info("hidden at error")
    log.warning("delivery failed")
    log.error("reconcile failed")
    assert [(r["level"], r["msg"]) for r in records(stream)] == [
        ("error", "delivery failed"),
        ("error", "reconcile failed"),
    ]


def test_structured_keys_as_flux(restore_logging: None) -> None:
    stream = io.StringIO()
    logsetup.configure("info", "json", Redactor(), stream)
    logging.getLogger("x").error(
        "Reconciler error",
        extra=logsetup.fields(
            name="on-call", namespace="apps", error="boom", empty="", **{"reconciler kind": "Alert"}
        ),
    )
    [record] = records(stream)
    assert record["name"] == "on-call" and record["namespace"] == "apps"
    assert record["reconciler kind"] == "Alert" and record["error"] == "boom"
    assert "empty" not in record
    assert record["logger"] == "x"  # a field never overwrites the record's own keys


def test_console_encoding_uses_the_same_levels(restore_logging: None) -> None:
    stream = io.StringIO()
    logsetup.configure("info", "console", Redactor(), stream)
    logging.getLogger("x").warning("provider down")
    assert " ERROR " in stream.getvalue() and "WARNING" not in stream.getvalue()


async def test_a_reconcile_error_is_logged_with_fluxs_keys(restore_logging: None) -> None:
    """Issue 16: a failed reconcile logs at error with name, namespace, "reconciler kind" and error."""
    from notification_controller.api.objects import parse_object
    from notification_controller.controllers.manager import ControllerManager
    from notification_controller.errors import KubeError
    from notification_controller.lib.clock import ManualClock
    from notification_controller.objects.base import ObjectStore
    from tests.support.recording_cluster import RecordingCluster

    stream = io.StringIO()
    logsetup.configure("error", "json", Redactor(), stream)
    store = ObjectStore()
    cluster = RecordingCluster(store)
    store.upsert(
        parse_object(
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Provider",
                "metadata": {"name": "webhook", "namespace": "apps"},
                "spec": {"type": "generic", "address": "https://example.com/hook"},
            }
        )
    )
    cluster.fail_next.append(KubeError("PATCH /apis/...: HTTP 500 boom", status=500))
    manager = ControllerManager(store, cluster, ManualClock())
    await manager.process("Provider", ("apps", "webhook"))
    [record] = [r for r in records(stream) if str(r["msg"]).startswith("Reconciler error")]
    assert record["level"] == "error"
    assert (record["name"], record["namespace"], record["reconciler kind"]) == ("webhook", "apps", "Provider")
    assert "HTTP 500 boom" in str(record["error"])


def test_object_keys_as_controller_runtime_and_flux(restore_logging: None) -> None:
    """Issue 25 item 5: a line about an object carries controller-runtime's reconciler keys and Flux's
    ``reconciler kind`` as JSON keys (not inside ``msg``); secrets in them are masked too."""
    stream = io.StringIO()
    logsetup.configure("info", "json", Redactor(["s3cr3t-token"]), stream)
    log = logging.getLogger("x")
    log.info(
        "sent",
        extra=logsetup.fields(**logsetup.object_fields("Alert", "apps", "on-call", error="s3cr3t-token")),
    )
    logsetup.ObjectLog(log, "Provider", "apps", "slack", provider="apps/slack").info("ready")
    first, second = records(stream)
    assert first["kind"] == first["controllerKind"] == first["reconciler kind"] == "Alert"
    assert first["controller"] == "alert" and first["controllerGroup"] == "notification.toolkit.fluxcd.io"
    assert first["Alert"] == {"name": "on-call", "namespace": "apps"}
    assert (first["name"], first["namespace"]) == ("on-call", "apps")
    assert "s3cr3t" not in json.dumps(first)
    assert (second["kind"], second["name"], second["provider"]) == ("Provider", "slack", "apps/slack")
    assert second["Provider"] == {"name": "slack", "namespace": "apps"}


def test_log_context_puts_the_keys_and_a_reconcile_id_on_every_line(restore_logging: None) -> None:
    stream = io.StringIO()
    logsetup.configure("info", "json", Redactor(), stream)
    log = logging.getLogger("x")
    with logsetup.log_context("Receiver", "apps", "gh") as reconcile_id:
        log.info("one")
        log.info("two", extra=logsetup.fields(name="explicit"))  # an explicit key wins
    log.info("after")
    one, two, after = records(stream)
    assert one["reconcileID"] == two["reconcileID"] == reconcile_id and len(reconcile_id) == 36
    assert (one["kind"], one["name"], two["name"]) == ("Receiver", "gh", "explicit")
    assert "reconcileID" not in after and "kind" not in after
