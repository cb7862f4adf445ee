"""The Kubernetes layer (``notification_controller.kube``) against a real kube-apiserver, plus fault injection.

Part 1 runs against the real API server of ``tests/e2e`` (kube-apiserver v1.20 + etcd): informers
list+watch Alerts/Providers/Receivers/Secrets into an ``ObjectStore`` (reference §6), survive an API
server restart and converge after a deletion made while they could not watch (checklist D2),
``KubeCluster`` reads metadata, merge-patches and records Events (reference §5.4, §6.4), stale writes get
409, leader election follows Flux's Lease semantics (reference §7, checklist H2-H4), and a rotated
token is reloaded on 401 (D8).

Part 2 drives the same code against a scripted API server (aiohttp on 127.0.0.1) for faults a real
server cannot be made to produce on demand: ``ERROR 410`` mid-stream (D1), watch errors and backoff
(D4), a silent stream (D5), bookmarks (D6), ``429 Retry-After`` (D7), 401 (D8), an unreachable server at
startup (D10), client throttling and request timeouts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from notification_controller.api import GROUP
from notification_controller.errors import KubeError
from notification_controller.kube.client import ConfigSource, KubeClient, resolve_config_source
from notification_controller.kube.cluster import KubeCluster
from notification_controller.kube.informer import (
    PROVIDERS,
    Backoff,
    Informer,
    Informers,
    InvalidEntry,
    InvalidKey,
)
from notification_controller.kube.leader import LeaderElector
from notification_controller.objects.base import Change, ObjectRef, ObjectStore
from tests.e2e.apiserver import KubeTestServer

REPO = Path(__file__).resolve().parents[2]
SOURCE_GROUP = "source.toolkit.fluxcd.io"
GITREPO_CRD = f"""\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gitrepositories.{SOURCE_GROUP}
spec:
  group: {SOURCE_GROUP}
  scope: Namespaced
  names: {{kind: GitRepository, listKind: GitRepositoryList, plural: gitrepositories, singular: gitrepository}}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {{status: {{}}}}
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"""
OUR_CRDS = [f"alerts.{GROUP}", f"providers.{GROUP}", f"receivers.{GROUP}"]


def fast_backoff() -> Backoff:
    return Backoff(initial=0.2, cap=1.0)


async def eventually(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll ``check`` until it holds (deadline ``timeout`` seconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running(coro_factory: Callable[[], Any]) -> AsyncIterator[asyncio.Task[Any]]:
    task = asyncio.create_task(coro_factory())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# ==================================================================================================
# Part 1: the real API server
# ==================================================================================================
async def kubectl(kube: KubeTestServer, *args: str, input: str | None = None) -> str:
    proc = await asyncio.to_thread(kube.kubectl, *args, input=input, check=True)
    return proc.stdout


async def apply(kube: KubeTestServer, *objects: dict[str, Any]) -> None:
    await kubectl(
        kube, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )


def _crd_documents() -> list[str]:
    files = sorted(p for p in (REPO / "crds").glob("*.yaml") if p.name != "kustomization.yaml")
    if files:
        return [p.read_text() for p in files]
    from notification_controller.api import crdgen

    return [text for name, text in crdgen.generate().items() if name != "kustomization.yaml"]


@pytest.fixture(scope="module")
def crds(kube: KubeTestServer) -> None:
    """Our three CRDs (``crds/``; ``--validate=false`` because kubectl 1.20's client-side schema does not
    know ``x-kubernetes-validations``, which the 1.20 server drops) and a GitRepository CRD as a target."""
    for text in _crd_documents():
        kube.kubectl("apply", "--validate=false", "-f", "-", input=text, check=True)
    kube.kubectl("apply", "-f", "-", input=GITREPO_CRD, check=True)
    names = [*OUR_CRDS, f"gitrepositories.{SOURCE_GROUP}"]
    kube.kubectl(
        "wait", "--for=condition=established", "--timeout=60s", *[f"crd/{n}" for n in names], check=True
    )


@pytest.fixture
async def client(kube: KubeTestServer) -> AsyncIterator[KubeClient]:
    kube_client = await KubeClient.connect(str(kube.kubeconfig))
    try:
        yield kube_client
    finally:
        await kube_client.close()


def provider(ns: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta3",
        "kind": "Provider",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "slack", "channel": "general", **spec},
    }


def alert(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta3",
        "kind": "Alert",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"providerRef": {"name": "slack"}, "eventSources": [{"kind": "GitRepository", "name": "*"}]},
    }


def receiver(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Receiver",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "type": "generic",
            "resources": [{"kind": "GitRepository", "name": "app"}],
            "secretRef": {"name": "token"},
        },
    }


def secret(ns: str, name: str, type_: str = "Opaque", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": type_,
        "metadata": {"name": name, "namespace": ns},
        "stringData": data,
    }


def gitrepository(ns: str, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{SOURCE_GROUP}/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": {"url": "https://example.com/repo.git", "interval": "1m"},
    }


class Recorder:
    """Collects store changes and invalid-object notifications."""

    def __init__(self, store: ObjectStore) -> None:
        self.changes: list[Change] = []
        self.invalid: list[tuple[InvalidKey, InvalidEntry | None]] = []
        store.subscribe(self.changes.append)

    def on_invalid(self, key: InvalidKey, entry: InvalidEntry | None) -> None:
        self.invalid.append((key, entry))

    def deleted(self, kind: str, name: str) -> bool:
        return any(c.kind == kind and c.name == name and c.obj is None for c in self.changes)


@pytest.mark.usefixtures("crds")
async def test_informers_list_then_watch_all_four_kinds(
    kube: KubeTestServer, namespace: str, client: KubeClient
) -> None:
    """Reference §6: the cache the servers read follows create/update/delete of every kind within seconds."""
    await apply(
        kube,
        provider(namespace, "slack", secretRef={"name": "slack-token"}),
        secret(namespace, "slack-token", address="https://hooks.example.com/one"),
        secret(namespace, "helm-release", "helm.sh/release.v1", release="big"),
    )
    store = ObjectStore()
    informers = Informers(client, store, namespace=namespace, backoff_factory=fast_backoff)
    async with running(informers.run):
        await asyncio.wait_for(store.wait_synced(), 30)
        # listed before the watch started
        assert store.provider(namespace, "slack") is not None
        token = store.secret(namespace, "slack-token")
        assert token is not None and token.data["address"] == b"https://hooks.example.com/one"
        assert store.secret(namespace, "helm-release") is None  # field selector keeps Helm releases out

        await apply(
            kube,
            alert(namespace, "on-git"),
            receiver(namespace, "hook"),
            secret(namespace, "token", token="t"),
        )
        await eventually(lambda: store.alert(namespace, "on-git") is not None, "Alert ADDED")
        await eventually(lambda: store.receiver(namespace, "hook") is not None, "Receiver ADDED")
        await eventually(lambda: store.secret(namespace, "token") is not None, "Secret ADDED")

        await apply(
            kube,
            provider(namespace, "slack", channel="ops", secretRef={"name": "slack-token"}),
            secret(namespace, "slack-token", address="https://hooks.example.com/two"),
        )

        def updated() -> bool:
            p, s = store.provider(namespace, "slack"), store.secret(namespace, "slack-token")
            return (
                p is not None
                and p.spec.channel == "ops"
                and s is not None
                and s.data["address"].endswith(b"two")
            )

        await eventually(updated, "Provider and Secret MODIFIED")

        await kubectl(kube, "-n", namespace, "delete", f"alerts.{GROUP}/on-git", "secret/token")
        await eventually(
            lambda: store.alert(namespace, "on-git") is None and store.secret(namespace, "token") is None,
            "Alert and Secret DELETED",
        )
        assert store.provider(namespace, "slack") is not None
        assert all(i.lists == 1 for i in informers.all)  # no relist was needed
        assert informers.invalid == {}


@pytest.mark.usefixtures("crds")
async def test_namespace_scope_follows_watch_all_namespaces(kube: KubeTestServer, client: KubeClient) -> None:
    """Reference §7 ``--watch-all-namespaces``: false → only RUNTIME_NAMESPACE is listed and watched."""
    suffix = uuid.uuid4().hex[:6]
    ns_a, ns_b = f"scope-a-{suffix}", f"scope-b-{suffix}"
    for ns in (ns_a, ns_b):
        await kubectl(kube, "create", "namespace", ns)
    try:
        await apply(kube, provider(ns_a, "p"), provider(ns_b, "p"))
        everywhere, only_a = ObjectStore(), ObjectStore()
        all_informers = Informers(client, everywhere, namespace=None, backoff_factory=fast_backoff)
        a_informers = Informers(client, only_a, namespace=ns_a, backoff_factory=fast_backoff)
        async with running(all_informers.run), running(a_informers.run):
            await asyncio.wait_for(asyncio.gather(everywhere.wait_synced(), only_a.wait_synced()), 30)
            await apply(kube, provider(ns_a, "q"), provider(ns_b, "q"))
            await eventually(lambda: everywhere.provider(ns_b, "q") is not None, "q in ns B (all namespaces)")
            await eventually(lambda: only_a.provider(ns_a, "q") is not None, "q in ns A (one namespace)")
            assert everywhere.provider(ns_a, "p") is not None and everywhere.provider(ns_b, "p") is not None
            assert {ns for ns, _ in only_a.keys("Provider")} == {ns_a}
    finally:
        for ns in (ns_a, ns_b):
            await kubectl(kube, "delete", "namespace", ns, "--wait=false")


def _etcd_delete(kube: KubeTestServer, key: str) -> int:
    """Delete a key straight from etcd (v3 JSON gateway), behind the API server's back."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    request = urllib.request.Request(f"{kube.etcd_url}/v3/kv/deleterange", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(json.loads(response.read()).get("deleted", 0))


@pytest.mark.usefixtures("crds")
async def test_object_deleted_while_the_api_server_is_down_is_tombstoned_and_informers_recover(
    kube: KubeTestServer, namespace: str, client: KubeClient
) -> None:
    """Checklist D2 + D10 + apiserver restart: the relist removes what vanished; the cache is served meanwhile."""
    await apply(kube, provider(namespace, "keep"), provider(namespace, "doomed"))
    store = ObjectStore()
    recorder = Recorder(store)
    informers = Informers(client, store, namespace=namespace, backoff_factory=fast_backoff)
    async with running(informers.run) as task:
        await asyncio.wait_for(store.wait_synced(), 30)
        assert store.provider(namespace, "doomed") is not None
        await asyncio.to_thread(kube.stop_apiserver)
        try:
            # The deletion cannot reach any watch: the API server is down while it happens.
            assert (
                await asyncio.to_thread(_etcd_delete, kube, f"/registry/{GROUP}/providers/{namespace}/doomed")
                == 1
            )
            await eventually(lambda: informers.providers.errors > 0, "a failed reconnect while down")
            assert store.synced and store.provider(namespace, "doomed") is not None  # last good cache served
        finally:
            await asyncio.to_thread(kube.start_apiserver)
        await eventually(
            lambda: store.provider(namespace, "doomed") is None, "the relist tombstone", timeout=60
        )
        assert recorder.deleted("Provider", "doomed")
        assert store.provider(namespace, "keep") is not None
        assert informers.providers.lists >= 2  # the old resourceVersion was gone: relisted
        # ...and the informers keep working after the restart
        await apply(kube, provider(namespace, "after"), secret(namespace, "after", k="v"))
        await eventually(
            lambda: (
                store.provider(namespace, "after") is not None
                and store.secret(namespace, "after") is not None
            ),
            "objects created after the restart",
            timeout=30,
        )
        assert not task.done()


@pytest.mark.usefixtures("crds")
async def test_invalid_custom_resource_is_reported_not_indexed(
    kube: KubeTestServer, namespace: str, client: KubeClient
) -> None:
    """Checklist D9: a Provider the 1.20 server accepts (it ignores CEL rules) but our model rejects."""
    await apply(kube, provider(namespace, "good"), provider(namespace, "bad", commitStatusExpr="'x'"))
    store = ObjectStore()
    recorder = Recorder(store)
    informers = Informers(client, store, namespace=namespace, on_invalid=recorder.on_invalid)
    async with running(informers.run):
        await asyncio.wait_for(store.wait_synced(), 30)
        key = ("Provider", namespace, "bad")
        assert store.provider(namespace, "bad") is None
        assert store.provider(namespace, "good") is not None
        raw, error = informers.invalid[key]
        assert raw["metadata"]["name"] == "bad" and "commitStatusExpr is only supported" in error
        assert recorder.invalid == [(key, (raw, error))]

        await apply(kube, provider(namespace, "bad"))  # fixed by the user
        await eventually(lambda: store.provider(namespace, "bad") is not None, "the fixed Provider indexed")
        assert key not in informers.invalid and recorder.invalid[-1] == (key, None)


# ---- KubeCluster ---------------------------------------------------------------------------------
@pytest.mark.usefixtures("crds")
async def test_cluster_metadata_reads(kube: KubeTestServer, namespace: str, client: KubeClient) -> None:
    """Reference §5.4: GET / LIST PartialObjectMetadata of Flux kinds, 404 as KubeError."""
    await apply(
        kube,
        gitrepository(namespace, "app", {"team": "a", "tier": "web"}),
        gitrepository(namespace, "lib", {"team": "a"}),
        gitrepository(namespace, "other", {"team": "b"}),
    )
    cluster = KubeCluster(client)
    meta = await cluster.get_metadata(f"{SOURCE_GROUP}/v1", "GitRepository", namespace, "app")
    assert meta["apiVersion"] == f"{SOURCE_GROUP}/v1" and meta["kind"] == "GitRepository"
    assert meta["metadata"]["labels"] == {"team": "a", "tier": "web"}
    assert "spec" not in meta

    # no apiVersion: the §5.4 default for the kind
    assert (await cluster.get_metadata("", "GitRepository", namespace, "lib"))["metadata"]["name"] == "lib"

    names = sorted(
        m["metadata"]["name"]
        for m in await cluster.list_metadata(f"{SOURCE_GROUP}/v1", "GitRepository", namespace, {"team": "a"})
    )
    assert names == ["app", "lib"]
    both = await cluster.list_metadata(
        f"{SOURCE_GROUP}/v1", "GitRepository", namespace, {"team": "a", "tier": "web"}
    )
    assert [m["metadata"]["name"] for m in both] == ["app"]
    assert len(await cluster.list_metadata(f"{SOURCE_GROUP}/v1", "GitRepository", namespace, {})) == 3

    with pytest.raises(KubeError) as caught:
        await cluster.get_metadata(f"{SOURCE_GROUP}/v1", "GitRepository", namespace, "missing")
    assert caught.value.not_found

    # a kind outside the static table goes through API discovery (a CRD of another group)
    widget_crd = (
        GITREPO_CRD.replace(f"gitrepositories.{SOURCE_GROUP}", "widgets.e2e.example.com")
        .replace(f"group: {SOURCE_GROUP}", "group: e2e.example.com")
        .replace(
            "{kind: GitRepository, listKind: GitRepositoryList, plural: gitrepositories, singular: gitrepository}",
            "{kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}",
        )
    )
    await kubectl(kube, "apply", "-f", "-", input=widget_crd)
    await kubectl(kube, "wait", "--for=condition=established", "--timeout=60s", "crd/widgets.e2e.example.com")
    await apply(
        kube,
        {
            "apiVersion": "e2e.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": namespace},
        },
    )
    widget = await cluster.get_metadata("e2e.example.com/v1", "Widget", namespace, "w")
    assert widget["metadata"]["name"] == "w"
    with pytest.raises(KubeError) as caught:
        await cluster.get_metadata("e2e.example.com/v1", "Nope", namespace, "w")
    assert caught.value.not_found
    # Kubernetes' own groups (RBAC, core Secrets...) are refused like a missing object (core.apiref)
    with pytest.raises(KubeError) as caught:
        await cluster.get_metadata("rbac.authorization.k8s.io/v1", "Role", namespace, "r")
    assert caught.value.not_found


@pytest.mark.usefixtures("crds")
async def test_cluster_annotate_never_conflicts(
    kube: KubeTestServer, namespace: str, client: KubeClient
) -> None:
    """Checklist B14: the reconcile-request annotation is a merge patch without resourceVersion."""
    await apply(kube, gitrepository(namespace, "app", {"team": "a"}))
    cluster = KubeCluster(client)
    for value in ("2024-01-01 00:00:00 +0000 UTC m=+1", "2024-01-01 00:00:01 +0000 UTC m=+2"):
        await cluster.annotate(
            f"{SOURCE_GROUP}/v1",
            "GitRepository",
            namespace,
            "app",
            {"reconcile.fluxcd.io/requestedAt": value},
        )
    obj = json.loads(
        await kubectl(kube, "-n", namespace, "get", f"gitrepositories.{SOURCE_GROUP}/app", "-o", "json")
    )
    assert (
        obj["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
        == "2024-01-01 00:00:01 +0000 UTC m=+2"
    )
    assert obj["metadata"]["labels"] == {"team": "a"}  # merge patch: nothing else touched
    assert obj["spec"]["url"] == "https://example.com/repo.git"
    with pytest.raises(KubeError) as caught:
        await cluster.annotate(f"{SOURCE_GROUP}/v1", "GitRepository", namespace, "missing", {"a": "b"})
    assert caught.value.not_found


@pytest.mark.usefixtures("crds")
async def test_cluster_patch_status_and_finalizers(
    kube: KubeTestServer, namespace: str, client: KubeClient
) -> None:
    """Reference §6.3 status patch on the /status subresource; finalizers with optimistic concurrency (409)."""
    await apply(kube, receiver(namespace, "hook"))
    current = json.loads(await kubectl(kube, "-n", namespace, "get", f"receivers.{GROUP}/hook", "-o", "json"))
    ref = ObjectRef(f"{GROUP}/v1", "Receiver", namespace, "hook", current["metadata"]["uid"])
    cluster = KubeCluster(client)
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Succeeded",
        "message": "Receiver initialized for path: /hook/abc",
        "lastTransitionTime": "2024-01-01T00:00:00Z",
        "observedGeneration": 1,
    }
    await cluster.patch_status(
        ref, {"conditions": [condition], "webhookPath": "/hook/abc", "observedGeneration": 1}
    )
    after = json.loads(await kubectl(kube, "-n", namespace, "get", f"receivers.{GROUP}/hook", "-o", "json"))
    assert after["status"]["webhookPath"] == "/hook/abc"
    assert after["status"]["conditions"][0]["reason"] == "Succeeded"
    assert after["spec"] == current["spec"]
    assert after["metadata"]["generation"] == current["metadata"]["generation"]  # status is a subresource

    rv = after["metadata"]["resourceVersion"]
    await cluster.set_finalizers(ref, ["finalizers.fluxcd.io"], rv)
    with_finalizer = json.loads(
        await kubectl(kube, "-n", namespace, "get", f"receivers.{GROUP}/hook", "-o", "json")
    )
    assert with_finalizer["metadata"]["finalizers"] == ["finalizers.fluxcd.io"]

    with pytest.raises(KubeError) as caught:
        await cluster.set_finalizers(ref, [], rv)  # rv is stale now
    assert caught.value.conflict and caught.value.status == 409
    await cluster.set_finalizers(ref, [], with_finalizer["metadata"]["resourceVersion"])
    cleared = json.loads(await kubectl(kube, "-n", namespace, "get", f"receivers.{GROUP}/hook", "-o", "json"))
    assert "finalizers" not in cleared["metadata"]


@pytest.mark.usefixtures("crds")
async def test_cluster_emit_event(kube: KubeTestServer, namespace: str, client: KubeClient) -> None:
    """Reference §6.4: core/v1 Events on the named object, component notification-controller."""
    await apply(kube, alert(namespace, "on-git"))
    current = json.loads(await kubectl(kube, "-n", namespace, "get", f"alerts.{GROUP}/on-git", "-o", "json"))
    ref = ObjectRef(f"{GROUP}/v1beta3", "Alert", namespace, "on-git", current["metadata"]["uid"])
    cluster = KubeCluster(client, instance="pod-1")
    message = "metadata key conflicts detected (please refer to the Alert API docs and Flux RFC 0008 for more information)"
    await cluster.emit_event(ref, "Warning", "MetadataAppendFailed", message, {"env": "GitRepository/ns/app"})
    await cluster.emit_event(ref, "Warning", "MetadataAppendFailed", message, {"env": "GitRepository/ns/app"})
    await cluster.emit_event(
        ref, "Normal", "Migration", "removed finalizer from Alert to migrate to static Alert", None
    )

    events = json.loads(await kubectl(kube, "-n", namespace, "get", "events", "-o", "json"))["items"]
    by_reason = {e["reason"]: e for e in events}
    assert set(by_reason) == {"MetadataAppendFailed", "Migration"}
    warning = by_reason["MetadataAppendFailed"]
    assert warning["count"] == 2  # the repeat updated the first Event
    assert warning["type"] == "Warning" and warning["message"] == message
    assert warning["involvedObject"] == {
        "apiVersion": f"{GROUP}/v1beta3",
        "kind": "Alert",
        "namespace": namespace,
        "name": "on-git",
        "uid": current["metadata"]["uid"],
    }
    assert warning["source"] == {"component": "notification-controller"}
    assert warning["reportingComponent"] == "notification-controller"
    assert warning["reportingInstance"] == "pod-1"
    assert warning["metadata"]["annotations"] == {"env": "GitRepository/ns/app"}
    assert warning["metadata"]["name"].startswith("on-git.")
    assert warning["firstTimestamp"] and warning["lastTimestamp"]
    assert by_reason["Migration"]["type"] == "Normal" and by_reason["Migration"]["count"] == 1


# ---- leader election -----------------------------------------------------------------------------
def _elector(client: KubeClient, namespace: str, identity: str, **kwargs: Any) -> LeaderElector:
    return LeaderElector(
        client,
        namespace=namespace,
        identity=identity,
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.5,
        **kwargs,
    )


def leads(elector: LeaderElector) -> bool:
    return elector.is_leader


async def _lease(kube: KubeTestServer, namespace: str) -> dict[str, Any]:
    out = await kubectl(
        kube, "-n", namespace, "get", "lease", "notification-controller-leader-election", "-o", "json"
    )
    spec: dict[str, Any] = json.loads(out)["spec"]
    return spec


async def test_leader_election_one_leads_and_release_hands_over_quickly(
    kube: KubeTestServer, namespace: str, client: KubeClient
) -> None:
    """H2 and ``--leader-election-release-on-cancel``: the standby takes over well within the lease duration."""
    loop = asyncio.get_running_loop()
    a, b = _elector(client, namespace, "replica-a"), _elector(client, namespace, "replica-b")
    await a.__aenter__()
    try:
        await asyncio.wait_for(a.wait_leading(), 10)
        async with b:
            await eventually(
                lambda: b.observed_holder == "replica-a" and a.renewals >= 4, "b to observe a renewing"
            )
            assert leads(a) and not leads(b)
            spec = await _lease(kube, namespace)
            assert spec["holderIdentity"] == "replica-a" and spec["leaseDurationSeconds"] == 3
            transitions = spec.get("leaseTransitions", 0)

            started = loop.time()
            await a.__aexit__(None, None, None)  # cancel → release
            await asyncio.wait_for(b.wait_leading(), 3)
            assert loop.time() - started < 3.0  # within the lease duration: the release was seen
            assert not leads(a)
            spec = await _lease(kube, namespace)
            assert spec["holderIdentity"] == "replica-b"
            assert spec["leaseTransitions"] == transitions + 1
        released = await _lease(kube, namespace)
        assert released["holderIdentity"] == "" and released["leaseDurationSeconds"] == 1
    finally:
        await a.__aexit__(None, None, None)


async def test_leader_killed_without_release_is_replaced_after_the_lease_expires(
    kube: KubeTestServer, namespace: str, client: KubeClient
) -> None:
    """H4: no release → the standby waits out the lease (by its own clock), then takes over."""
    loop = asyncio.get_running_loop()
    a = _elector(client, namespace, "replica-a", release_on_cancel=False)
    b = _elector(client, namespace, "replica-b")
    # a must lead first: start it alone, then the standby (entering both at once races for the lease).
    async with a:
        await asyncio.wait_for(a.wait_leading(), 10)
        await b.__aenter__()
        try:
            await eventually(lambda: b.observed_holder == "replica-a", "b to observe a")
        except BaseException:
            await b.__aexit__(None, None, None)
            raise
    try:
        stopped = loop.time()
        assert (await _lease(kube, namespace))["holderIdentity"] == "replica-a"
        await asyncio.wait_for(b.wait_leading(), 10)
        elapsed = loop.time() - stopped
        assert 3.0 - 2 * 0.5 * 2.2 <= elapsed <= 3.0 + 2.5  # lease duration ± what b saw before a stopped
    finally:
        await b.__aexit__(None, None, None)


async def test_leadership_is_lost_when_the_api_server_is_gone_past_the_renew_deadline(
    kube: KubeTestServer, namespace: str, client: KubeClient
) -> None:
    """H3: ``lost`` fires once renewals fail for the renew deadline; the other replica then leads, not a."""
    loop = asyncio.get_running_loop()
    a = _elector(client, namespace, "replica-a")
    async with a:
        await asyncio.wait_for(a.wait_leading(), 10)
        await asyncio.to_thread(kube.stop_apiserver)
        stopped = loop.time()
        try:
            await asyncio.wait_for(a.wait_lost(), 10)
            assert loop.time() - stopped <= 2.0 + 1.0  # renew deadline (+ scheduling slack)
            assert not a.is_leader
        finally:
            await asyncio.to_thread(kube.start_apiserver)
        b = _elector(client, namespace, "replica-b")
        async with b:
            await asyncio.wait_for(b.wait_leading(), 15)
            assert (await _lease(kube, namespace))["holderIdentity"] == "replica-b"
            assert not a.is_leader and a.lost.is_set()


# ---- credentials -----------------------------------------------------------------------------------
async def test_rotated_service_account_token_is_reloaded_on_401(kube: KubeTestServer, tmp_path: Path) -> None:
    """D8, in-cluster config: the token file is re-read after a 401 and the request retried once."""
    token_file = tmp_path / "token"
    token_file.write_text("stale-token")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(kube.port)}
    source = resolve_config_source(None, environ=env, token_file=str(token_file), ca_file=str(kube.ca_file))
    assert source.kind == "in-cluster"
    async with await KubeClient.from_source(source) as kube_client:
        token_file.write_text(kube.token)  # the kubelet rotated the projected token
        answer = await kube_client.request("GET", "/api/v1/namespaces/default")
        assert answer["metadata"]["name"] == "default"
        assert kube_client.credential_reloads == 1
        token_file.write_text("revoked")
        answer = await kube_client.request("GET", "/api/v1/namespaces/default")  # cached token still valid
        assert kube_client.credential_reloads == 1


async def test_kubeconfig_credentials_are_reloaded_on_401_and_retried_once(
    kube: KubeTestServer, tmp_path: Path
) -> None:
    """D8, kubeconfig: a rewritten kubeconfig is picked up; a token that stays bad fails after one retry."""
    config = yaml.safe_load(kube.kubeconfig.read_text())
    good = config["users"][0]["user"]["token"]
    path = tmp_path / "kubeconfig"

    def write(token: str) -> None:
        config["users"][0]["user"]["token"] = token
        path.write_text(yaml.safe_dump(config))

    write("stale")
    async with await KubeClient.connect(str(path)) as kube_client:
        write(good)
        assert (await kube_client.request("GET", "/api/v1/namespaces/default"))["kind"] == "Namespace"
        assert kube_client.credential_reloads == 1

    write("stale")
    async with await KubeClient.connect(str(path)) as kube_client:
        with pytest.raises(KubeError) as caught:
            await kube_client.request("GET", "/api/v1/namespaces/default")
        assert caught.value.status == 401 and kube_client.credential_reloads == 1
        assert "stale" not in str(caught.value)


# ---- RBAC ----------------------------------------------------------------------------------------
def rbac_manifests(name: str, namespace: str, sa_namespace: str) -> list[dict[str, Any]]:
    """The permissions docs/kubernetes.md documents (ClusterRole + the leader-election Role)."""
    rules = [
        {
            "apiGroups": [GROUP],
            "resources": ["alerts", "providers", "receivers"],
            "verbs": ["get", "list", "watch", "patch", "update"],
        },
        {
            "apiGroups": [GROUP],
            "resources": ["alerts/status", "providers/status", "receivers/status"],
            "verbs": ["get", "patch", "update"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {
            "apiGroups": [
                SOURCE_GROUP,
                "kustomize.toolkit.fluxcd.io",
                "helm.toolkit.fluxcd.io",
                "image.toolkit.fluxcd.io",
                "source.extensions.fluxcd.io",
            ],
            "resources": ["*"],
            "verbs": ["get", "list", "watch", "patch"],
        },
    ]
    subject = [{"kind": "ServiceAccount", "name": "notification-controller", "namespace": sa_namespace}]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subject,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "leader-election", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "leader-election", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leader-election"},
            "subjects": subject,
        },
    ]


@pytest.mark.usefixtures("crds")
async def test_documented_rbac_is_enough_for_the_whole_kube_layer(
    kube: KubeTestServer, namespace: str
) -> None:
    """docs/kubernetes.md RBAC: a service account with exactly those rules can run every part."""
    name = f"nc-{namespace}"[:63]
    await apply(
        kube,
        *rbac_manifests(name, namespace, namespace),
        gitrepository(namespace, "app"),
        receiver(namespace, "hook"),
    )
    kubeconfig = await asyncio.to_thread(
        kube.create_service_account_kubeconfig, namespace, "notification-controller"
    )
    try:
        async with await KubeClient.connect(str(kubeconfig)) as sa_client:
            store = ObjectStore()
            informers = Informers(sa_client, store, namespace=None, backoff_factory=fast_backoff)
            async with running(informers.run):  # the authorizer learns new bindings asynchronously: retried
                await asyncio.wait_for(store.wait_synced(), 30)
                assert store.receiver(namespace, "hook") is not None
            cluster = KubeCluster(sa_client)
            await cluster.annotate(f"{SOURCE_GROUP}/v1", "GitRepository", namespace, "app", {"k": "v"})
            assert (await cluster.list_metadata(f"{SOURCE_GROUP}/v1", "GitRepository", namespace, {}))[0][
                "metadata"
            ]["name"] == "app"
            hook = ObjectRef(f"{GROUP}/v1", "Receiver", namespace, "hook")
            await cluster.patch_status(hook, {"webhookPath": "/hook/x"})
            await cluster.emit_event(
                hook, "Normal", "Succeeded", "Reconciliation finished, next run in 10m0s", None
            )
            async with _elector(sa_client, namespace, "sa-replica") as elector:
                await asyncio.wait_for(elector.wait_leading(), 10)
            # and nothing more: Secrets cannot be written
            with pytest.raises(KubeError) as caught:
                await sa_client.request("DELETE", f"/api/v1/namespaces/{namespace}/secrets/any")
            assert caught.value.status == 403
    finally:
        await kubectl(kube, "delete", "clusterrole,clusterrolebinding", name, "--ignore-not-found")


# ==================================================================================================
# Part 2: a scripted API server for faults
# ==================================================================================================
@dataclass
class Seen:
    at: float
    method: str
    path: str
    query: dict[str, str]
    authorization: str


@dataclass
class WatchReply:
    """What one watch request gets: an error status, or events followed by close or silence."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    then: str = "close"  # "close" | "stall"
    before_events: Callable[[], None] | None = None  # changes the server state as the watch starts


@dataclass
class PlainReply:
    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def status_body(code: int, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


class ScriptedAPI:
    """Serves ``/apis/.../providers`` list and watch from a script, records every request."""

    def __init__(self, token: str = "good") -> None:  # noqa: S107 - a test token
        self.token = token
        self.items: list[dict[str, Any]] = []
        self.list_rv = "100"
        self.list_replies: list[PlainReply] = []  # answered before the real list, in order
        self.watch_replies: list[WatchReply] = []  # default when empty: silence until shutdown
        self.plain: dict[str, list[PlainReply]] = {}  # other paths
        self.requests: list[Seen] = []
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> ScriptedAPI:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        assert self._runner is not None
        await self._runner.cleanup()

    def kubeconfig(self, path: Path, token: str | None = None) -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "u", "user": {"token": token or self.token}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    def watches(self) -> list[Seen]:
        return [r for r in self.requests if r.query.get("watch") == "1"]

    def lists(self) -> list[Seen]:
        return [r for r in self.requests if r.path.endswith("/providers") and "watch" not in r.query]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            Seen(
                asyncio.get_running_loop().time(),
                request.method,
                request.path,
                dict(request.query),
                request.headers.get("Authorization", ""),
            )
        )
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response(status_body(401, "Unauthorized", "Unauthorized"), status=401)
        if request.query.get("watch") == "1":
            return await self._watch(request)
        if self.plain.get(request.path):
            reply = self.plain[request.path].pop(0)
            if reply.delay:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), reply.delay)
            return web.json_response(reply.body, status=reply.status, headers=reply.headers)
        if request.path.endswith("/providers"):
            if self.list_replies:
                reply = self.list_replies.pop(0)
                return web.json_response(reply.body, status=reply.status, headers=reply.headers)
            return web.json_response(
                {
                    "kind": "ProviderList",
                    "apiVersion": f"{GROUP}/v1beta3",
                    "metadata": {"resourceVersion": self.list_rv},
                    "items": self.items,
                }
            )
        return web.json_response(status_body(404, "NotFound", "not scripted"), status=404)

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        reply = self.watch_replies.pop(0) if self.watch_replies else WatchReply(then="stall")
        if reply.status != 200:
            return web.json_response(
                status_body(reply.status, "Scripted", "scripted failure"),
                status=reply.status,
                headers=reply.headers,
            )
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if reply.before_events is not None:
            reply.before_events()
        for event in reply.events:
            await response.write(json.dumps(event).encode() + b"\n")
        if reply.then == "stall":
            await self._closing.wait()
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response


def fake_provider(name: str, rv: str, channel: str = "general") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta3",
        "kind": "Provider",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        "spec": {"type": "slack", "channel": channel},
    }


@contextlib.asynccontextmanager
async def scripted(tmp_path: Path, **client_kwargs: Any) -> AsyncIterator[tuple[ScriptedAPI, KubeClient]]:
    async with ScriptedAPI() as api:
        kube_client = await KubeClient.connect(str(api.kubeconfig(tmp_path / "kubeconfig")), **client_kwargs)
        try:
            yield api, kube_client
        finally:
            await kube_client.close()


def provider_informer(client: KubeClient, store: ObjectStore, **kwargs: Any) -> Informer:
    kwargs.setdefault("backoff", Backoff(initial=0.1, cap=1.0))
    kwargs.setdefault("watch_timeout_jitter", 0)
    return Informer(client, store, PROVIDERS, namespace="ns", **kwargs)


def server_state_moves_on(api: ScriptedAPI) -> None:
    """Between the two lists: b is deleted and a changes again."""
    api.items, api.list_rv = [fake_provider("a", "9", "second")], "9"


async def test_error_410_mid_stream_relists_and_converges_to_server_state(tmp_path: Path) -> None:
    """D1: after ERROR 410 the cache equals the new list: a deletion missed meanwhile is a tombstone."""
    async with scripted(tmp_path) as (api, kube_client):
        api.items = [fake_provider("a", "1"), fake_provider("b", "2")]
        api.watch_replies = [
            WatchReply(
                events=[
                    {"type": "MODIFIED", "object": fake_provider("a", "5", "first")},
                    {
                        "type": "ERROR",
                        "object": status_body(410, "Expired", "too old resource version: 5 (9)"),
                    },
                ],
                before_events=lambda: server_state_moves_on(api),
            )
        ]
        store = ObjectStore()
        recorder = Recorder(store)
        informer = provider_informer(kube_client, store)
        async with running(informer.run):
            await eventually(lambda: len(api.watches()) == 2, "the watch after the relist")
            assert len(api.lists()) == 2
            assert store.keys("Provider") == [("ns", "a")]
            a = store.provider("ns", "a")
            assert a is not None and a.spec.channel == "second"
            assert recorder.deleted("Provider", "b")
            assert api.watches()[0].query["resourceVersion"] == "100"
            assert api.watches()[1].query["resourceVersion"] == "9"
            assert api.watches()[0].query["allowWatchBookmarks"] == "true"
            assert "resourceVersion" not in api.lists()[1].query  # consistent list (D3)


async def test_watch_errors_back_off_exponentially_and_are_not_fatal(tmp_path: Path) -> None:
    """D4: 500 and 403 on the watch → reconnect after 0.1, 0.2, 0.4 s (test backoff), keep the cache."""
    async with scripted(tmp_path) as (api, kube_client):
        api.items = [fake_provider("a", "1")]
        api.watch_replies = [
            WatchReply(status=500),
            WatchReply(status=403),
            WatchReply(status=500),
            WatchReply(then="stall"),
        ]
        store = ObjectStore()
        informer = provider_informer(kube_client, store)
        async with running(informer.run) as task:
            await eventually(lambda: len(api.watches()) == 4, "four watch attempts")
            times = [w.at for w in api.watches()]
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert gaps[0] >= 0.1 - 0.02 and gaps[1] >= 0.2 - 0.02 and gaps[2] >= 0.4 - 0.02
            assert informer.errors == 3 and "HTTP 500" in informer.last_error
            assert not task.done() and store.provider("ns", "a") is not None
            assert len(api.lists()) == 1  # the watch resumed from its resourceVersion, no relist
            assert {w.query["resourceVersion"] for w in api.watches()} == {"100"}


async def test_silent_watch_is_restarted_with_the_last_resource_version(tmp_path: Path) -> None:
    """D5: a stream silent for timeoutSeconds + grace is abandoned and resumed from the last RV."""
    async with scripted(tmp_path) as (api, kube_client):
        api.watch_replies = [
            WatchReply(events=[{"type": "ADDED", "object": fake_provider("c", "7")}], then="stall")
        ]
        store = ObjectStore()
        informer = provider_informer(kube_client, store, watch_timeout=1, inactivity_grace=0.3)
        async with running(informer.run):
            await eventually(lambda: len(api.watches()) == 2, "the restarted watch", timeout=10)
            first, second = api.watches()
            assert first.query["timeoutSeconds"] == "1"
            assert second.at - first.at >= 1.3 - 0.05  # not before the inactivity timeout
            assert second.query["resourceVersion"] == "7"
            assert len(api.lists()) == 1 and store.provider("ns", "c") is not None


async def test_bookmarks_advance_the_resource_version_only(tmp_path: Path) -> None:
    """D6: BOOKMARK → the next watch resumes from it; no store change."""
    async with scripted(tmp_path) as (api, kube_client):
        api.items = [fake_provider("a", "1")]
        bookmark = {
            "type": "BOOKMARK",
            "object": {
                "kind": "Provider",
                "apiVersion": f"{GROUP}/v1beta3",
                "metadata": {"resourceVersion": "150"},
            },
        }
        # a server-ended watch (timeoutSeconds) that lasted long enough is resumed at once
        api.watch_replies = [WatchReply(events=[bookmark]), WatchReply(then="stall")]
        store = ObjectStore()
        informer = provider_informer(kube_client, store)
        async with running(informer.run):
            await asyncio.wait_for(informer.synced.wait(), 5)
            generation = store.generation
            await eventually(lambda: len(api.watches()) == 2, "the resumed watch")
            assert api.watches()[1].query["resourceVersion"] == "150"
            assert store.generation == generation and informer.errors == 0


async def test_retry_after_on_429_is_honoured(tmp_path: Path) -> None:
    """D7: a 429 with Retry-After: 1 on the watch delays the reconnect by at least 1 s, not the 0.1 s backoff."""
    async with scripted(tmp_path) as (api, kube_client):
        api.watch_replies = [WatchReply(status=429, headers={"Retry-After": "1"}), WatchReply(then="stall")]
        informer = provider_informer(kube_client, ObjectStore())
        async with running(informer.run):
            await eventually(lambda: len(api.watches()) == 2, "the watch after Retry-After")
            first, second = api.watches()
            assert second.at - first.at >= 1.0 - 0.02


async def test_request_retries_429_within_its_budget_and_reports_longer_waits(tmp_path: Path) -> None:
    """D7 for plain requests: short Retry-After retried in place, a long one surfaced with retry_after."""
    async with scripted(tmp_path) as (api, kube_client):
        path = "/api/v1/namespaces/ns/secrets/s"
        api.plain[path] = [
            PlainReply(429, status_body(429, "TooManyRequests"), {"Retry-After": "0.5"}),
            PlainReply(200, {"kind": "Secret", "metadata": {"name": "s"}}),
        ]
        assert (await kube_client.request("GET", path))["metadata"]["name"] == "s"
        hits = [r.at for r in api.requests if r.path == path]
        assert len(hits) == 2 and hits[1] - hits[0] >= 0.5 - 0.02

        api.plain[path] = [PlainReply(429, status_body(429, "TooManyRequests"), {"Retry-After": "120"})]
        with pytest.raises(KubeError) as caught:
            await kube_client.request("GET", path, timeout=5)
        assert caught.value.status == 429 and caught.value.retry_after == 120.0


async def test_401_reloads_the_kubeconfig_and_retries_once(tmp_path: Path) -> None:
    """D8: credentials re-read from the kubeconfig file; the request is retried with the new token."""
    async with ScriptedAPI(token="new-token") as api:
        path = api.kubeconfig(tmp_path / "kubeconfig", token="old-token")
        async with await KubeClient.connect(str(path)) as kube_client:
            api.kubeconfig(path, token="new-token")
            answer = await kube_client.request(
                "GET", "/apis/notification.toolkit.fluxcd.io/v1beta3/namespaces/ns/providers"
            )
            assert answer["kind"] == "ProviderList"
            assert [r.authorization for r in api.requests] == ["Bearer old-token", "Bearer new-token"]


async def test_unreachable_api_server_at_startup_is_retried_not_fatal(tmp_path: Path) -> None:
    """D10: no crash, not synced, retried with backoff; syncs once the server answers."""
    async with scripted(tmp_path) as (api, kube_client):
        api.list_replies = [PlainReply(503, status_body(503, "ServiceUnavailable")) for _ in range(3)]
        store = ObjectStore()
        informers_store_task = provider_informer(kube_client, store)
        async with running(informers_store_task.run) as task:
            await eventually(lambda: informers_store_task.errors >= 2, "failed lists")
            assert not informers_store_task.synced.is_set() and not task.done()
            await asyncio.wait_for(informers_store_task.synced.wait(), 10)
            times = [r.at for r in api.lists()]
            assert len(times) == 4 and times[2] - times[1] >= 0.2 - 0.02


async def test_short_watches_without_events_do_not_hot_loop(tmp_path: Path) -> None:
    """A watch the server ends at once, with no event, counts as a failure (backoff), as in client-go."""
    async with scripted(tmp_path) as (api, kube_client):
        api.watch_replies = [WatchReply() for _ in range(50)]
        informer = provider_informer(kube_client, ObjectStore(), backoff=Backoff(initial=0.2, cap=1.0))
        async with running(informer.run):
            await eventually(lambda: len(api.watches()) >= 3, "three short watches")
            times = [w.at for w in api.watches()]
            assert times[2] - times[0] >= 0.2 + 0.4 - 0.05
            assert "very short watch" in informer.last_error


async def test_client_side_throttling(tmp_path: Path) -> None:
    """``--kube-api-qps``/``--kube-api-burst``: a burst passes, then requests are paced at the QPS."""
    async with scripted(tmp_path, qps=20, burst=2) as (api, kube_client):
        path = "/apis/notification.toolkit.fluxcd.io/v1beta3/namespaces/ns/providers"
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(*(kube_client.request("GET", path) for _ in range(6)))
        assert loop.time() - started >= (6 - 2) / 20 - 0.02
        assert len(api.requests) == 6


async def test_every_request_has_a_timeout(tmp_path: Path) -> None:
    async with scripted(tmp_path, timeout=0.3) as (api, kube_client):
        path = "/api/v1/namespaces/ns/secrets/slow"
        api.plain[path] = [PlainReply(200, {}, delay=5.0)]
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(KubeError, match="timed out") as caught:
            await kube_client.request("GET", path)
        assert caught.value.status == 0 and loop.time() - started < 2.0


async def test_config_source_describes_without_secrets() -> None:
    assert ConfigSource("kubeconfig", path="/etc/kube/config").describe() == "kubeconfig /etc/kube/config"
    assert ConfigSource("in-cluster").describe() == "in-cluster service account"
