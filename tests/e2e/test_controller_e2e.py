"""The controller against a real kube-apiserver (issue 3's required e2e tests).

The controller runs as a subprocess with the ServiceAccount token of ``config/rbac`` (not admin), so
every test here also proves the least-privilege RBAC is enough. Reference §6 (reconcilers), §5.1
(webhook path), §3 (event path with Alerts that exist only in the API server).
"""

from __future__ import annotations

import functools
import hashlib
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import (
    NS,
    ROOT,
    Controller,
    ThreadedSink,
    apply,
    flux_event,
    get,
    post_event,
    ready,
    wait_for,
)

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "flux-doc-examples"


@pytest.fixture(scope="module")
def controller(installed: KubeTestServer, sa_kubeconfig: Path) -> Iterator[Controller]:
    ctl = Controller(installed, sa_kubeconfig, name="main")
    try:
        ctl.wait_ready()
        yield ctl
    finally:
        code = ctl.stop()
        assert code == 0, ctl.log()[-3000:]


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    server = ThreadedSink()
    yield server
    server.close()


def test_config_default_installs(installed: KubeTestServer) -> None:
    for crd in ("alerts", "providers", "receivers"):
        assert get(installed, "crd", "", f"{crd}.notification.toolkit.fluxcd.io") is not None
    assert get(installed, "clusterrole", "", "notification-controller") is not None
    deployment = get(installed, "deployment", NS, "notification-controller")
    assert deployment is not None
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_receiver_webhook_path_token_change_and_finalizer(
    installed: KubeTestServer, controller: Controller, namespace: str
) -> None:
    """§5.1 + §6.3: webhookPath per the formula; a new token changes it; deletion runs the finalizer."""
    apply(
        installed,
        textwrap.dedent(
            f"""\
            apiVersion: v1
            kind: Secret
            metadata: {{name: token, namespace: {namespace}}}
            stringData: {{token: first-token}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1
            kind: Receiver
            metadata: {{name: gh, namespace: {namespace}}}
            spec:
              type: github
              secretRef: {{name: token}}
              resources: [{{kind: GitRepository, name: app}}]
            """
        ),
    )

    def path_for(token: str) -> str:
        return "/hook/" + hashlib.sha256(f"{token}gh{namespace}".encode()).hexdigest()

    def status() -> dict[str, object]:
        obj = get(installed, "receiver", namespace, "gh") or {}
        return obj.get("status") or {}

    wait_for(lambda: status().get("webhookPath") == path_for("first-token"), what="webhookPath")
    obj = get(installed, "receiver", namespace, "gh")
    assert ready(obj) == ("True", "Succeeded", f"Receiver initialized for path: {path_for('first-token')}")
    assert "finalizers.fluxcd.io" in obj["metadata"]["finalizers"]  # type: ignore[index]
    apply(
        installed,
        f"apiVersion: v1\nkind: Secret\nmetadata: {{name: token, namespace: {namespace}}}\nstringData: {{token: second-token}}\n",
    )
    wait_for(lambda: status().get("webhookPath") == path_for("second-token"), what="path after token change")
    installed.kubectl("delete", "receiver", "gh", "-n", namespace, "--wait=false", check=True)
    wait_for(
        lambda: get(installed, "receiver", namespace, "gh") is None,
        what="receiver deletion (finalizer removed)",
    )


def test_provider_missing_secret_then_ready_and_alert_follows(
    installed: KubeTestServer, controller: Controller, namespace: str
) -> None:
    apply(
        installed,
        textwrap.dedent(
            f"""\
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Provider
            metadata: {{name: slack, namespace: {namespace}}}
            spec: {{type: slack, secretRef: {{name: slack-url}}}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Alert
            metadata: {{name: a, namespace: {namespace}}}
            spec:
              providerRef: {{name: slack}}
              eventSources: [{{kind: Kustomization, name: '*'}}]
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Alert
            metadata: {{name: orphan, namespace: {namespace}}}
            spec:
              providerRef: {{name: does-not-exist}}
              eventSources: [{{kind: Kustomization, name: '*'}}]
            """
        ),
    )
    status, reason, message = wait_for(
        lambda: ready(get(installed, "provider", namespace, "slack")), what="provider status"
    )
    assert (status, reason) == ("False", "SecretNotFound")
    assert "slack-url" in message
    orphan = wait_for(lambda: ready(get(installed, "alert", namespace, "orphan")), what="orphan alert status")
    assert orphan[:2] == ("False", "ProviderNotFound")
    apply(
        installed,
        f"apiVersion: v1\nkind: Secret\nmetadata: {{name: slack-url, namespace: {namespace}}}\n"
        "stringData: {address: 'https://hooks.slack.com/services/T0/B0/canary-e2e-secret'}\n",
    )
    wait_for(
        lambda: (ready(get(installed, "provider", namespace, "slack")) or ("",))[0] == "True",
        what="provider ready",
    )
    wait_for(
        lambda: (ready(get(installed, "alert", namespace, "a")) or ("",))[0] == "True",
        what="alert follows provider",
    )
    events = installed.kubectl("get", "events", "-n", namespace, "-o", "yaml").stdout
    assert "canary-e2e-secret" not in events


def test_events_follow_alerts_in_the_api_server(
    installed: KubeTestServer, controller: Controller, namespace: str, sink: ThreadedSink
) -> None:
    """An event is delivered per Alerts that exist only in the API server; edits and deletes apply within seconds."""
    alert = textwrap.dedent(
        f"""\
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: sink, namespace: {namespace}}}
        spec: {{type: generic, address: "{sink.url}/e2e"}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {{name: apps, namespace: {namespace}}}
        spec:
          providerRef: {{name: sink}}
          eventSources: [{{kind: Kustomization, name: '*'}}]
          EXCLUSION
        """
    )
    apply(installed, alert.replace("EXCLUSION", ""))
    wait_for(
        lambda: (ready(get(installed, "alert", namespace, "apps")) or ("",))[0] == "True", what="alert ready"
    )
    assert post_event(controller, flux_event(namespace, "app", "first")) == 202
    wait_for(lambda: "first" in sink.messages(), what="first delivery")

    apply(installed, alert.replace("EXCLUSION", 'exclusionList: ["^second"]'))

    def excluded() -> bool:
        assert post_event(controller, flux_event(namespace, "app", "second")) in (202, 429)
        return True

    wait_for(
        lambda: (get(installed, "alert", namespace, "apps") or {}).get("metadata", {}).get("generation") == 2
    )
    import time

    time.sleep(2)  # let the watch event reach the controller's cache
    excluded()
    assert post_event(controller, flux_event(namespace, "app", "third")) == 202
    wait_for(lambda: "third" in sink.messages(), what="third delivery")
    assert "second" not in sink.messages()

    installed.kubectl("delete", "alert", "apps", "-n", namespace, "--wait=false", check=True)
    wait_for(lambda: get(installed, "alert", namespace, "apps") is None, what="alert deleted")
    time.sleep(2)
    assert post_event(controller, flux_event(namespace, "app", "fourth")) == 202
    time.sleep(2)
    assert "fourth" not in sink.messages()


def test_apiserver_restart_is_survived(
    installed: KubeTestServer, controller: Controller, namespace: str, sink: ThreadedSink
) -> None:
    """Watch resilience: restart the apiserver mid-test; the controller re-lists and keeps working."""
    installed.stop_apiserver()
    try:
        assert (
            post_event(controller, flux_event(namespace, "app", "during outage")) == 202
        )  # served from cache
    finally:
        installed.start_apiserver()
    apply(
        installed,
        textwrap.dedent(
            f"""\
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Provider
            metadata: {{name: sink, namespace: {namespace}}}
            spec: {{type: generic, address: "{sink.url}/after"}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Alert
            metadata: {{name: after, namespace: {namespace}}}
            spec:
              providerRef: {{name: sink}}
              eventSources: [{{kind: Kustomization, name: '*'}}]
            """
        ),
    )
    wait_for(
        lambda: (ready(get(installed, "alert", namespace, "after")) or ("",))[0] == "True",
        timeout=90,
        what="reconciled after restart",
    )

    def delivered() -> bool:
        post_event(controller, flux_event(namespace, "app", "after restart"))
        return "after restart" in sink.messages()

    wait_for(delivered, timeout=60, interval=1, what="delivery after restart")


def test_flux_doc_examples_apply_unchanged_and_reconcile(
    installed: KubeTestServer, controller: Controller
) -> None:
    """Flux's own documentation examples apply to our CRDs unchanged and reach a Ready condition."""
    docs: list[dict[str, object]] = []
    for name in ("alerts.yaml", "providers.yaml", "receivers.yaml"):
        docs.extend(d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d)
    namespaces = sorted({str(d["metadata"]["namespace"]) for d in docs})  # type: ignore[index]
    for ns in namespaces:
        installed.kubectl("create", "namespace", ns)
    for doc in docs:
        # Secrets best effort: one of Flux's examples is a kubernetes.io/tls Secret without tls.crt,
        # which Kubernetes itself refuses. Every Alert, Provider and Receiver must apply.
        installed.kubectl(
            "apply", "--validate=false", "-f", "-", input=yaml.safe_dump(doc), check=doc["kind"] != "Secret"
        )
    ours = {
        (str(d["kind"]), str(d["metadata"]["namespace"]), str(d["metadata"]["name"]))  # type: ignore[index]
        for d in docs
        if d["kind"] in ("Alert", "Provider", "Receiver")
    }

    def ready_of(kind: str, ns: str, name: str) -> tuple[str, str, str] | None:
        return ready(get(installed, kind.lower(), ns, name))

    results: dict[tuple[str, str, str], tuple[str, str, str]] = {}
    for kind, ns, name in sorted(ours):
        results[(kind, ns, name)] = wait_for(
            functools.partial(ready_of, kind, ns, name), timeout=60, what=f"{kind} {ns}/{name}"
        )
    for key, (status, reason, message) in results.items():
        assert status in ("True", "False"), key
        assert reason, key
        if status == "False":
            assert message, key
    # With its Secret present, the slack Provider of the docs is Ready.
    assert results[("Provider", "default", "slack")][0] == "True"
    assert "Traceback" not in controller.log()


def _annotation(kube: KubeTestServer, namespace: str, name: str) -> str | None:
    obj = get(kube, "gitrepositories.source.toolkit.fluxcd.io", namespace, name) or {}
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get("reconcile.fluxcd.io/requestedAt")
    return str(value) if value is not None else None


def _signed_push(controller: Controller, path: str, token: str, delivery: str) -> int:
    import hmac
    import json
    import urllib.error
    import urllib.request

    body = json.dumps(
        {"ref": "refs/heads/main", "after": "0" * 40, "repository": {"full_name": "org/app"}}
    ).encode()
    signature = "sha256=" + hmac.new(token.encode(), body, hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        controller.url("receiver", path),
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": signature,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_signed_github_push_annotates_exactly_the_listed_objects(
    installed: KubeTestServer, controller: Controller, namespace: str
) -> None:
    """Issue 4 e2e: by name, by labels filtered by CEL, nothing else; replay does not patch; suspend → 503."""
    repos = "".join(
        textwrap.dedent(
            f"""\
            ---
            apiVersion: source.toolkit.fluxcd.io/v1
            kind: GitRepository
            metadata: {{name: {name}, namespace: {namespace}, labels: {labels}}}
            spec: {{url: https://example.com/{name}}}
            """
        )
        for name, labels in (
            ("app-a", "{team: a}"),
            ("app-b", "{team: a, env: prod}"),
            ("app-c", "{team: b, env: prod}"),
            ("unlisted", "{team: c}"),
        )
    )
    receiver = textwrap.dedent(
        f"""\
        ---
        apiVersion: v1
        kind: Secret
        metadata: {{name: gh-token, namespace: {namespace}}}
        stringData: {{token: e2e-github-secret}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1
        kind: Receiver
        metadata: {{name: gh, namespace: {namespace}}}
        spec:
          type: github
          events: [push]
          suspend: SUSPEND
          secretRef: {{name: gh-token}}
          resources:
            - {{apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: app-a}}
            - apiVersion: source.toolkit.fluxcd.io/v1
              kind: GitRepository
              name: '*'
              matchLabels: {{team: a}}
              filter: "'env' in res.metadata.labels && res.metadata.labels['env'] == 'prod'"
        """
    )
    apply(installed, repos + receiver.replace("SUSPEND", "false"))
    path = "/hook/" + hashlib.sha256(f"e2e-github-secretgh{namespace}".encode()).hexdigest()
    wait_for(
        lambda: (ready(get(installed, "receiver", namespace, "gh")) or ("",))[0] == "True", what="receiver"
    )
    wait_for(
        lambda: _signed_push(controller, path, "e2e-github-secret", "warmup") != 404, what="path indexed"
    )
    # "warmup" was a real delivery: app-a and app-b are annotated now.
    first_a, first_b = _annotation(installed, namespace, "app-a"), _annotation(installed, namespace, "app-b")
    assert first_a and first_b
    assert _annotation(installed, namespace, "app-c") is None
    assert _annotation(installed, namespace, "unlisted") is None

    assert _signed_push(controller, path, "wrong-secret", "d-bad") == 400
    assert _signed_push(controller, path, "e2e-github-secret", "d-1") == 200
    second_a = _annotation(installed, namespace, "app-a")
    assert second_a and second_a != first_a
    # A replayed delivery id is acknowledged without patching again.
    assert _signed_push(controller, path, "e2e-github-secret", "d-1") == 200
    assert _annotation(installed, namespace, "app-a") == second_a

    apply(installed, receiver.replace("SUSPEND", "true"))
    wait_for(
        lambda: _signed_push(controller, path, "e2e-github-secret", f"d-s-{time_ns()}") == 503, what="503"
    )
    assert _annotation(installed, namespace, "app-c") is None
    assert _annotation(installed, namespace, "unlisted") is None


def time_ns() -> int:
    import time

    return time.time_ns()


def test_flux_reconcile_shows_a_fresh_event(
    installed: KubeTestServer, controller: Controller, namespace: str
) -> None:
    """`flux reconcile` = annotate reconcile.fluxcd.io/requestedAt: the repeated Succeeded Event must show up
    (count/lastTimestamp bumped on the same Event, as client-go's correlator does), not vanish."""
    apply(
        installed,
        textwrap.dedent(
            f"""\
            apiVersion: v1
            kind: Secret
            metadata: {{name: token, namespace: {namespace}}}
            stringData: {{token: event-token}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1
            kind: Receiver
            metadata: {{name: gh, namespace: {namespace}}}
            spec:
              type: github
              secretRef: {{name: token}}
              resources: [{{kind: GitRepository, name: app}}]
            """
        ),
    )

    def succeeded() -> list[dict[str, Any]]:
        out = installed.kubectl("get", "events", "-n", namespace, "-o", "json", check=True).stdout
        items = yaml.safe_load(out)["items"]
        return [
            e
            for e in items
            if e["involvedObject"].get("name") == "gh"
            and e["reason"] == "Succeeded"
            and e["type"] == "Normal"
        ]

    first = wait_for(lambda: succeeded() or None, what="the first Succeeded event")
    assert len(first) == 1
    count = int(first[0].get("count") or 1)
    for attempt in range(2):
        installed.kubectl(
            "annotate",
            "receiver",
            "gh",
            "-n",
            namespace,
            f"reconcile.fluxcd.io/requestedAt=now-{attempt}",
            "--overwrite",
            check=True,
        )
        bumped = wait_for(
            functools.partial(
                lambda seen: [e for e in succeeded() if int(e.get("count") or 1) > seen] or None, count
            ),
            what=f"the Succeeded event bumped after reconcile request {attempt}",
        )
        assert len(succeeded()) == 1  # the same Event object, not a new one per reconcile
        count = int(bumped[0]["count"])


def test_documented_install_commands_work_on_an_api_server_without_crd_cel(
    installed: KubeTestServer,
) -> None:
    """README "Run in a cluster": the one command for API servers < 1.25 (this one is 1.20, which knows no
    x-kubernetes-validations) installs everything, and `kubectl apply -f crds/` applies the CRDs alone."""
    installed.kubectl("apply", "--validate=false", "-f", str(ROOT / "crds") + "/", check=True)
    result = installed.kubectl(
        "apply", "--validate=false", "-k", str(ROOT / "config" / "default"), check=True
    )
    applied = result.stdout
    for what in (
        "customresourcedefinition.apiextensions.k8s.io/alerts.notification.toolkit.fluxcd.io",
        "clusterrole.rbac.authorization.k8s.io/notification-controller",
        "deployment.apps/notification-controller",
        "service/webhook-receiver",
        "networkpolicy.networking.k8s.io/",
    ):
        assert what in applied, applied
    for crd in ("alerts", "providers", "receivers"):
        installed.kubectl(
            "wait",
            "--for=condition=Established",
            f"crd/{crd}.notification.toolkit.fluxcd.io",
            "--timeout=30s",
            check=True,
        )


def test_a_provider_breaking_a_crd_rule_is_stalled(
    installed: KubeTestServer, controller: Controller, namespace: str
) -> None:
    """The 1.20 server ignores the CRD's CEL rules: the controller reports the Provider as docs/status.md says,
    Ready=False and Stalled=True, reason ValidationFailed, with Flux's terminal-error prefix."""
    apply(
        installed,
        textwrap.dedent(
            f"""\
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Provider
            metadata: {{name: bad, namespace: {namespace}}}
            spec: {{type: slack, address: "https://hooks.slack.com/services/x", commitStatusExpr: "'x'"}}
            """
        ),
    )

    def conditions() -> dict[str, tuple[str, str, str]] | None:
        obj = get(installed, "provider", namespace, "bad") or {}
        found = {
            c["type"]: (c["status"], c["reason"], c.get("message", ""))
            for c in (obj.get("status") or {}).get("conditions") or []
        }
        return found if {"Ready", "Stalled"} <= set(found) else None

    found = wait_for(conditions, what="Ready and Stalled on the invalid Provider")
    assert found["Ready"][:2] == ("False", "ValidationFailed")
    assert found["Stalled"][:2] == ("True", "ValidationFailed")
    assert found["Ready"][2].startswith("Reconciliation failed terminally due to configuration error: ")
    assert "commitStatusExpr is only supported" in found["Ready"][2]
