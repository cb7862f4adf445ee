"""Path injection into the Kubernetes API (issue 11, items 1 and 2; THREAT_MODEL.md).

A Receiver's ``spec.resources[]`` (a tenant's input) and an event's ``involvedObject`` (anyone who can reach
the events listener) name objects the controller reads and annotates with its own credentials. With
``..``, ``?``, ``#`` or ``%2F`` in an apiVersion they used to rewrite the API path: annotate another
tenant's objects despite ``--no-cross-namespace-refs``, and read any object's metadata — a Secret's
``last-applied-configuration`` — through the 200/500 answer of a CEL ``resourceFilter``.

The attacks run against the real code over real HTTP: the real receiver server and the real event
dispatcher, with the real ``KubeCluster``/``KubeClient``, talking to ``MiniAPI`` — a small API-server
stand-in on 127.0.0.1 that routes on the *decoded* path as kube-apiserver does and records every request.
The fuzz tests cover every value that reaches a URL: apiVersion (group, version), kind, plural, namespace,
name and label selectors. The same attacks against the real kube-apiserver: tests/e2e/test_tenant_isolation_e2e.py.
"""

from __future__ import annotations

import asyncio
import re
import string
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

import aiohttp
import pytest
import yaml
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from yarl import URL

from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.core.apiref import (
    DEFAULT_API_VERSIONS,
    InvalidReference,
    Use,
    build_api_path,
    refusal,
    validate_object_ref,
)
from notification_controller.core.webhook import webhook_path
from notification_controller.dispatch.builder import build as build_pipeline
from notification_controller.errors import KubeError
from notification_controller.kube.client import KubeClient, api_path
from notification_controller.kube.cluster import KubeCluster
from notification_controller.metrics import EventMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.server.receivers import ReceiverServerSettings
from tests.adversarial.kit import eventually
from tests.integration.appkit import local_cluster, running_app
from tests.support.capture import CaptureServer
from tests.support.receiver_kit import Harness, make_receiver
from tests.support.sinks import LogSink

T = TypeVar("T")
SRC = "source.toolkit.fluxcd.io"
GIT = f"{SRC}/v1"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
PASSWORD = "hunter2-tenant-b"
REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"

# Hostile apiVersions, each one reproduced against the code before the fix.
CROSS_NAMESPACE = [
    f"{GIT}/namespaces/b/gitrepositories/victim?",
    f"{GIT}/namespaces/b/gitrepositories/victim#",
    f"{GIT}/../v1/namespaces/b/gitrepositories/victim?",
    f"{GIT}%2Fnamespaces%2Fb%2Fgitrepositories%2Fvictim?",
]
TO_SECRET = [
    f"{GIT}/../../../api/v1/namespaces/b/secrets/creds?",
    f"{GIT}/../../../api/v1/namespaces/b/secrets/creds#",
    "/v1/namespaces/b/secrets/creds#",
    "v1/namespaces/b/secrets/creds?",
    f"{SRC}/v1%2F..%2F..%2F..%2Fapi%2Fv1%2Fnamespaces%2Fb%2Fsecrets%2Fcreds?",
]


# ---- a small API server: routes on the decoded path, records every request --------------------------
@dataclass
class Seen:
    method: str
    raw_path: str  # as sent, query included
    path: str  # decoded, as kube-apiserver routes it
    query: dict[str, str]


@dataclass
class MiniAPI:
    """GitRepositories (``source.toolkit.fluxcd.io/v1``) and core Secrets in namespaces ``a`` and ``b``.

    GET/LIST answer metadata, PATCH merges ``metadata.annotations``; PATCH of a Secret is 403 (the
    controller's RBAC); everything else 404. Discovery is served for both groups.
    """

    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    discovery: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # more groups: path → resources
    stray: bool = False  # a misbehaving server: namespaced lists also return namespace b's objects
    url: str = ""
    _runner: web.AppRunner | None = None

    def add(self, plural: str, namespace: str, name: str, **metadata: Any) -> None:
        self.objects[(plural, namespace, name)] = {"name": name, "namespace": namespace, **metadata}

    def annotations(self, plural: str, namespace: str, name: str) -> dict[str, str]:
        return dict(self.objects[(plural, namespace, name)].get("annotations") or {})

    async def __aenter__(self) -> MiniAPI:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "mini", "cluster": {"server": self.url}}],
                    "users": [{"name": "u", "user": {"token": "controller-token"}}],
                    "contexts": [{"name": "mini", "context": {"cluster": "mini", "user": "u"}}],
                    "current-context": "mini",
                }
            )
        )
        return path

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests.append(Seen(request.method, request.raw_path, request.path, dict(request.query)))
        parts = request.path.strip("/").split("/")
        if request.path in self.discovery:
            return web.json_response({"resources": self.discovery[request.path]})
        if parts == ["api", "v1"]:
            return _discovery("secrets", "Secret")
        if parts == ["apis", SRC, "v1"]:
            return _discovery("gitrepositories", "GitRepository")
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif parts[:3] == ["apis", SRC, "v1"]:
            rest = parts[3:]
        else:
            return _not_found()
        if len(rest) == 1:  # a list across all namespaces
            rest = ["namespaces", "", rest[0]]
        if len(rest) not in (3, 4) or rest[0] != "namespaces":
            return _not_found()
        namespace, plural = rest[1], rest[2]
        if len(rest) == 3 and request.method == "GET":
            selector = dict(p.split("=", 1) for p in request.query.get("labelSelector", "").split(",") if p)
            items = [
                {"metadata": dict(meta)}
                for (pl, ns, _), meta in sorted(self.objects.items())
                if pl == plural
                and (ns == namespace or not namespace or self.stray)
                and all((meta.get("labels") or {}).get(k) == v for k, v in selector.items())
            ]
            return web.json_response({"kind": "List", "metadata": {}, "items": items})
        meta = self.objects.get((plural, namespace, rest[3])) if len(rest) == 4 else None
        if meta is None:
            return _not_found()
        if request.method == "GET":
            return web.json_response({"kind": "PartialObjectMetadata", "metadata": dict(meta)})
        if request.method == "PATCH":
            if plural == "secrets":
                return web.json_response({"kind": "Status", "code": 403, "reason": "Forbidden"}, status=403)
            patch = await request.json()
            meta.setdefault("annotations", {}).update(patch["metadata"]["annotations"])
            return web.json_response({"metadata": dict(meta)})
        return _not_found()

    def off_limits(self) -> list[Seen]:
        """Requests that reached another tenant's namespace or any Secret."""
        return [r for r in self.requests if "/namespaces/b/" in r.path or "secrets" in r.path]


def _discovery(plural: str, kind: str) -> web.Response:
    return web.json_response({"resources": [{"name": plural, "kind": kind, "namespaced": True}]})


def _not_found() -> web.Response:
    return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)


def populate(api: MiniAPI) -> None:
    api.add("gitrepositories", "a", "app", labels={"team": "a"})
    api.add("gitrepositories", "b", "victim", labels={"team": "a"})
    api.add(
        "secrets",
        "b",
        "creds",
        labels={"team": "a"},
        annotations={LAST_APPLIED: f'{{"stringData":{{"password":"{PASSWORD}"}}}}'},
    )


@asynccontextmanager
async def kube_cluster(tmp_path: Path) -> AsyncIterator[tuple[MiniAPI, KubeCluster]]:
    async with MiniAPI() as api:
        populate(api)
        client = await KubeClient.connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
        try:
            yield api, KubeCluster(client)
        finally:
            await client.close()


@asynccontextmanager
async def receiver_server(tmp_path: Path) -> AsyncIterator[tuple[MiniAPI, Harness]]:
    """The real receiver server (``--no-cross-namespace-refs``) over a KubeCluster on ``MiniAPI``."""
    async with kube_cluster(tmp_path) as (api, cluster):
        harness = Harness(ReceiverServerSettings(no_cross_namespace_refs=True))
        harness.cluster = cluster  # type: ignore[assignment]
        async with harness:
            yield api, harness


async def hook(
    harness: Harness, name: str, resource: dict[str, Any], resource_filter: str | None = None
) -> int:
    receiver, secret = make_receiver(
        "generic", name=name, namespace="a", resources=[resource], resource_filter=resource_filter
    )
    path = harness.add(receiver, secret)
    status, _, _ = await harness.post(path, b"{}", {"Content-Type": "application/json"})
    return status


# ---- item 1: a tenant's Receiver ---------------------------------------------------------------------
async def test_hostile_api_versions_cannot_annotate_another_namespace(tmp_path: Path) -> None:
    """A Receiver in namespace ``a`` with ``--no-cross-namespace-refs`` names ``a/app``; its apiVersion
    points the path at ``b/victim`` (``?``, ``#``, ``..``, ``%2F``). Nothing in ``b`` is touched, no request
    leaves namespace ``a``, and the answer is the one a missing object gets."""
    async with receiver_server(tmp_path) as (api, harness):
        for index, api_version in enumerate(CROSS_NAMESPACE + TO_SECRET):
            resource = {"apiVersion": api_version, "kind": "GitRepository", "name": "app"}
            assert await hook(harness, f"r{index}", resource) == 500, api_version
        assert api.annotations("gitrepositories", "b", "victim") == {}
        assert REQUESTED_AT not in api.annotations("gitrepositories", "a", "app")
        assert api.off_limits() == []
        assert api.requests == []  # refused before any request
        # control: the same Receiver with an honest apiVersion works
        assert (
            await hook(harness, "honest", {"apiVersion": GIT, "kind": "GitRepository", "name": "app"}) == 200
        )
        assert REQUESTED_AT in api.annotations("gitrepositories", "a", "app")


async def test_resource_filter_is_no_oracle_for_secrets(tmp_path: Path) -> None:
    """The CEL oracle: a filter that is true when a guess about the Secret's last-applied annotation is
    right. Right guess, wrong guess, a refused kind and a missing object all answer the same, and the
    Secret is never read."""
    guess = f"res.metadata.annotations['{LAST_APPLIED}'].contains('%s')"
    async with receiver_server(tmp_path) as (api, harness):
        answers: dict[str, set[int]] = {"right": set(), "wrong": set()}
        for index, api_version in enumerate(TO_SECRET):
            resource = {"apiVersion": api_version, "kind": "GitRepository", "name": "app"}
            answers["right"].add(await hook(harness, f"r{index}", resource, guess % PASSWORD))
            answers["wrong"].add(await hook(harness, f"w{index}", resource, guess % "no-such-text"))
        missing = await hook(harness, "missing", {"apiVersion": GIT, "kind": "GitRepository", "name": "nope"})
        core = await hook(harness, "core", {"apiVersion": "v1", "kind": "GitRepository", "name": "creds"})
        assert answers == {"right": {missing}, "wrong": {missing}} and core == missing == 500
        assert api.off_limits() == []


async def test_listed_objects_are_annotated_only_in_the_receivers_namespace(tmp_path: Path) -> None:
    """``name: '*'`` + matchLabels: an apiVersion ending in ``/gitrepositories?`` turned the namespaced
    list into a list across all namespaces, and every item was annotated in *its* namespace. Now the
    reference is refused; and even a server answering items of another namespace gets none annotated."""
    async with receiver_server(tmp_path) as (api, harness):
        wildcard = {"kind": "GitRepository", "name": "*", "matchLabels": {"team": "a"}}
        for index, api_version in enumerate([f"{GIT}/gitrepositories?", f"{GIT}/gitrepositories#"]):
            assert await hook(harness, f"r{index}", {**wildcard, "apiVersion": api_version}) == 500
        assert api.requests == []
        api.stray = True
        assert await hook(harness, "honest", {**wildcard, "apiVersion": GIT}) == 200  # strays are dropped
        assert REQUESTED_AT in api.annotations("gitrepositories", "a", "app")
        assert api.annotations("gitrepositories", "b", "victim") == {}
        assert api.off_limits() == []


async def test_label_selectors_are_validated(tmp_path: Path) -> None:
    """matchLabels become a ``labelSelector`` query value: keys and values must be Kubernetes label
    keys and values (a value with ``,``, ``!`` or ``=`` could reshape the selector)."""
    async with receiver_server(tmp_path) as (api, harness):
        for index, labels in enumerate(
            [{"team": "a,env!=prod"}, {"team": "a&fieldSelector=metadata.namespace=b"}, {"a,b": "c"}]
        ):
            resource = {"apiVersion": GIT, "kind": "GitRepository", "name": "*", "matchLabels": labels}
            assert await hook(harness, f"l{index}", resource) == 500
        assert api.requests == []


# ---- item 2: an unauthenticated event --------------------------------------------------------------
def _event(api_version: str, name: str = "app") -> Event:
    return Event.model_validate(
        {
            "involvedObject": {
                "kind": "GitRepository",
                "namespace": "a",
                "name": name,
                "apiVersion": api_version,
            },
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": f"probe {api_version}",
            "reason": "Probe",
            "reportingController": "source-controller",
        }
    )


async def test_event_label_lookup_cannot_reach_arbitrary_paths(tmp_path: Path) -> None:
    """An Alert with ``matchLabels``: the dispatcher looks up the involved object's labels with the
    controller's token. Events whose apiVersion points at ``b``'s Secret (labelled ``team: a``, so a
    successful lookup would notify) make no request outside namespace ``a`` and notify nothing; an honest
    event still notifies."""
    async with kube_cluster(tmp_path) as (api, cluster), CaptureServer() as sink:
        registry = CollectorRegistry()
        http = OutboundHTTP(RetryPolicy(max_attempts=1, wait_min=0.01, wait_max=0.02))
        await http.start()
        store = ObjectStore()
        for doc in (
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Provider",
                "metadata": {"name": "sink", "namespace": "a"},
                "spec": {"type": "generic", "address": sink.url + "/sink"},
            },
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Alert",
                "metadata": {"name": "team-a", "namespace": "a"},
                "spec": {
                    "providerRef": {"name": "sink"},
                    "eventSources": [{"kind": "GitRepository", "name": "*", "matchLabels": {"team": "a"}}],
                },
            },
        ):
            store.upsert(parse_object(doc))
        store.mark_synced()
        dispatcher = build_pipeline(store, cluster, http, LogSink(), EventMetrics(registry)).dispatcher
        try:
            for api_version in CROSS_NAMESPACE + TO_SECRET:
                dispatcher.admit(_event(api_version))
                assert await dispatcher.wait_idle(20)
            assert api.off_limits() == []
            assert sink.requests == []
            dispatcher.admit(_event(GIT))
            assert await dispatcher.wait_idle(20)
            assert [r.json()["message"] for r in sink.requests] == [f"probe {GIT}"]
        finally:
            await dispatcher.shutdown(1)
            await http.close()


# ---- local mode enforces the same rules ------------------------------------------------------------
async def test_local_mode_refuses_what_a_cluster_would(tmp_path: Path) -> None:
    """The real App in local mode: a Receiver with a hostile apiVersion is answered 500 like a missing
    object and annotates nothing (local mode used to ignore the apiVersion and annotate ``a/app``)."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": GIT,
            "kind": "GitRepository",
            "metadata": {"name": "app", "namespace": "a", "labels": {"team": "a"}},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "token", "namespace": "a"},
            "stringData": {"token": "local-token"},
        },
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1",
            "kind": "Receiver",
            "metadata": {"name": "hostile", "namespace": "a"},
            "spec": {
                "type": "generic",
                "secretRef": {"name": "token"},
                "resources": [
                    {"apiVersion": api_version, "kind": "GitRepository", "name": "app"}
                    for api_version in CROSS_NAMESPACE + TO_SECRET
                ],
            },
        },
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    async with running_app(tmp_path) as app:
        path = webhook_path(b"local-token", "hostile", "a")
        url = f"http://127.0.0.1:{app.ports['receiver']}{path}"
        async with aiohttp.ClientSession() as session:

            async def post() -> int:
                async with session.post(url, data=b"{}") as resp:
                    return resp.status

            await eventually(lambda: app.store.receiver_by_path(path) is not None, what="receiver ready")
            assert await post() == 500
        annotations = local_cluster(app).others[("GitRepository", "a", "app")]["metadata"].get("annotations")
        assert REQUESTED_AT not in (annotations or {})


# ---- fuzz: every value that reaches a URL ----------------------------------------------------------
HOSTILE_PIECES = [
    "/", "..", ".", "?", "#", "%2F", "%2f", "%2E%2E", "%", "%00", "\\", " ", "\n", "\r\n", "\t", "&", "=",
    ";", ":", "@", "+", "~", "é", "\u202e", "\uff0f", "A", "Z", "a", "z", "0", "9", "-", "_", "*",
    "namespaces", "secrets", "api", "apis", "v1", "b",
]  # fmt: skip
HOSTILE = st.one_of(
    st.lists(st.sampled_from(HOSTILE_PIECES), max_size=8).map("".join),
    st.text(max_size=30),
    st.text(alphabet=string.ascii_lowercase + string.digits + ".-", min_size=1, max_size=70),
    st.sampled_from(CROSS_NAMESPACE + TO_SECRET + ["a" * 64, "a" * 254, "a." * 127 + "a", "", "-a", "a-"]),
)
LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?\Z")
GROUPS = st.one_of(st.just(""), st.just(SRC), st.builds(lambda a, b: f"{a}.{b}", LABEL, LABEL), HOSTILE)
VERSIONS = st.one_of(st.sampled_from(["v1", "v1beta3", "v2alpha1"]), HOSTILE)
KINDS = st.one_of(st.sampled_from(["GitRepository", "Kustomization", "Secret"]), HOSTILE)
PLURALS = st.one_of(st.sampled_from(["gitrepositories", "secrets"]), LABEL, HOSTILE)
NAMESPACES = st.one_of(st.just("a"), LABEL, HOSTILE)
NAMES = st.one_of(st.just("app"), LABEL, st.builds(lambda a, b: f"{a}.{b}", LABEL, LABEL), HOSTILE)
SAFE_SEGMENT = re.compile(r"[a-z0-9][-a-z0-9.]*")


def _segments(path: str) -> list[str]:
    """The path as the HTTP client sends it (yarl) and kube-apiserver routes it (decoded, split on /)."""
    url = URL("http://127.0.0.1" + path)
    assert url.query_string == "" and url.fragment == "", path
    assert url.raw_path == path, path  # nothing normalised away (no "..", no ".")
    assert "%" not in path, path  # nothing needed escaping: every part was within the grammar
    decoded = unquote(url.raw_path)
    assert decoded == path
    return path.split("/")[1:]


def _outcome(function: Callable[..., T], *args: Any) -> T | KubeError:
    try:
        return function(*args)
    except KubeError as exc:
        return exc


def _expected(group: str, version: str, plural: str, namespace: str | None, name: str | None) -> list[str]:
    out = ["api", version] if not group else ["apis", group, version]
    if namespace:
        out += ["namespaces", namespace]
    out.append(plural)
    if name:
        out.append(name)
    return out


def test_fuzz_api_path_is_rejected_or_exactly_structured() -> None:
    """``api_path`` (every path the client builds): a ``KubeError`` or exactly the expected segments."""
    outcomes = {"refused": 0, "built": 0}

    @settings(max_examples=600, deadline=None, derandomize=True)  # counts below must not flake
    @given(group=GROUPS, version=VERSIONS, plural=PLURALS, namespace=NAMESPACES, name=NAMES)
    def fuzz(group: str, version: str, plural: str, namespace: str, name: str) -> None:
        for build in (api_path, build_api_path):
            path = _outcome(build, group, version, plural, namespace, name)
            if isinstance(path, KubeError):
                assert isinstance(path, InvalidReference) and path.status == 404
                assert len(str(path)) < 400  # never echoes huge input
                outcomes["refused"] += 1
                continue
            segments = _segments(path)
            assert segments == _expected(group, version, plural, namespace, name), path
            assert all(SAFE_SEGMENT.fullmatch(s) and s not in (".", "..") for s in segments), path
            assert path.startswith(("/api/", "/apis/"))
            outcomes["built"] += 1

    fuzz()
    assert min(outcomes.values()) > 20, outcomes  # both sides are exercised


def test_fuzz_validate_object_ref() -> None:
    """The pure validator the dispatcher calls before a lookup: refused, or parts that rebuild the input."""
    outcomes = {"refused": 0, "accepted": 0}

    @settings(max_examples=600, deadline=None, derandomize=True)  # counts below must not flake
    @given(  # biased towards valid parts, so that both outcomes are well covered
        group=st.one_of(st.just(SRC), GROUPS),
        version=st.one_of(st.just("v1"), VERSIONS),
        kind=st.one_of(st.just("GitRepository"), KINDS),
        namespace=st.one_of(st.just("a"), NAMESPACES),
        name=st.one_of(st.just("*"), NAMES),
    )
    def fuzz(group: str, version: str, kind: str, namespace: str, name: str) -> None:
        api_version = f"{group}/{version}" if group else version
        ref = _outcome(validate_object_ref, api_version, kind, namespace, name)
        if isinstance(ref, KubeError):
            assert isinstance(ref, InvalidReference) and ref.status == 404 and len(str(ref)) < 400
            outcomes["refused"] += 1
            return
        expected_name = None if name == "*" else name
        resolved = api_version or DEFAULT_API_VERSIONS[kind]
        assert (ref.api_version, ref.kind, ref.namespace, ref.name) == (
            resolved,
            kind,
            namespace,
            expected_name,
        )
        assert refusal(ref.group, kind=kind, use=Use.TARGET) is None
        path = build_api_path(ref.group, ref.version, "things", ref.namespace, ref.name)
        tail = ["namespaces", namespace, "things", *([name] if expected_name else [])]
        assert _segments(path)[-len(tail) :] == tail
        outcomes["accepted"] += 1

    fuzz()
    assert min(outcomes.values()) > 20, outcomes


def _run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=30)


async def test_fuzz_kube_cluster_requests(tmp_path: Path) -> None:
    """Hostile parts through ``KubeCluster.get_metadata``/``list_metadata``/``annotate`` (what Receivers and
    the label lookup call): either refused with no request at all, or every request the server sees is a
    discovery or an object/collection path whose namespace and name are exactly the ones asked for."""
    loop = asyncio.get_running_loop()
    async with kube_cluster(tmp_path) as (api, cluster):

        async def call(
            op: str, api_version: str, kind: str, namespace: str, name: str, labels: Mapping[str, str]
        ) -> bool:
            try:
                if op == "get":
                    await cluster.get_metadata(api_version, kind, namespace, name)
                elif op == "list":
                    await cluster.list_metadata(api_version, kind, namespace, labels)
                else:
                    await cluster.annotate(api_version, kind, namespace, name, {REQUESTED_AT: "now"})
            except InvalidReference:
                return False
            except KubeError:
                return True
            return True

        @settings(
            max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
        )
        @given(
            op=st.sampled_from(["get", "list", "annotate"]),
            group=st.one_of(st.just(SRC), st.just(SRC), GROUPS),  # reach the allowed side often enough
            version=st.one_of(st.just("v1"), VERSIONS),
            kind=st.one_of(st.just("GitRepository"), KINDS),
            namespace=NAMESPACES,
            name=NAMES,
            labels=st.dictionaries(st.one_of(LABEL, HOSTILE), st.one_of(LABEL, HOSTILE), max_size=2),
        )
        def fuzz(
            op: str, group: str, version: str, kind: str, namespace: str, name: str, labels: dict[str, str]
        ) -> None:
            api_version = f"{group}/{version}" if group else version
            before = len(api.requests)
            allowed = _run(loop, call(op, api_version, kind, namespace, name, labels))
            seen = api.requests[before:]
            if not allowed:
                assert seen == [], (api_version, kind, namespace, name, seen)
                return
            asked_group, _, asked_version = (api_version or DEFAULT_API_VERSIONS[kind]).rpartition("/")
            prefix = ["apis", asked_group, asked_version] if asked_group else ["api", asked_version]
            for request in seen:
                segments = _segments(request.raw_path.split("?", 1)[0])
                assert set(request.query) <= {"labelSelector", "limit"}, request
                if segments == prefix:
                    continue  # discovery of the group/version asked for
                assert segments[: len(prefix)] == prefix, request
                rest = segments[len(prefix) :]
                assert rest[:2] == ["namespaces", namespace], request
                assert rest[3:] == ([] if op == "list" else [name]), request
            assert not any("secrets" in r.path for r in seen)

        await asyncio.to_thread(fuzz)
    assert api.off_limits() == []
    assert any(r.method == "PATCH" for r in api.requests)  # the strategies reach the allowed side too


@pytest.mark.parametrize("api_version", CROSS_NAMESPACE + TO_SECRET)
def test_every_hostile_api_version_is_refused_before_a_request(api_version: str) -> None:
    with pytest.raises(InvalidReference) as caught:
        validate_object_ref(api_version, "GitRepository", "a", "app")
    assert caught.value.status == 404


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("v1", "Secret"),
        ("v1", "ServiceAccount"),
        ("v1", "ConfigMap"),
        ("v1", "Event"),
        ("v1", "Service"),  # reachable for hooks' lookups only, never as a target
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("coordination.k8s.io/v1", "Lease"),
        ("authentication.k8s.io/v1", "TokenReview"),
        ("apps/v1", "Deployment"),
        ("notification.toolkit.fluxcd.io/v1beta3", "Provider"),
        ("notification.toolkit.fluxcd.io/v1", "Receiver"),
    ],
)
def test_sensitive_kinds_are_refused_as_targets(api_version: str, kind: str) -> None:
    with pytest.raises(InvalidReference):
        validate_object_ref(api_version, kind, "a", "x")


def test_flux_kinds_and_crds_stay_reachable() -> None:
    for api_version, kind in (
        (GIT, "GitRepository"),
        ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
        ("helm.toolkit.fluxcd.io/v2", "HelmRelease"),
        ("image.toolkit.fluxcd.io/v1beta2", "ImagePolicy"),
        ("source.extensions.fluxcd.io/v1beta1", "ArtifactGenerator"),
        ("example.com/v1alpha1", "Widget"),
        ("cluster.x-k8s.io/v1beta1", "Cluster"),
        ("", "GitRepository"),  # the §5.4 default apiVersion
    ):
        assert validate_object_ref(api_version, kind, "a", "x").name == "x"
    assert refusal("", kind="Service", use=Use.LOOKUP) is None
    assert refusal("", kind="secret", use=Use.LOOKUP) is not None
    assert refusal("", plural="secrets", use=Use.LOOKUP) is not None


def _refused(api_version: Any, kind: Any, namespace: Any, name: Any, use: Use) -> str:
    with pytest.raises(InvalidReference) as caught:
        validate_object_ref(api_version, kind, namespace, name, use=use)
    return str(caught.value)


def test_remembered_references_change_no_answer() -> None:
    """``validate_object_ref`` remembers accepted references (issue 29): what it answers is still what the
    grammar and the policy say, whatever was asked before — the use is part of what is remembered, a refusal
    is refused again with the same message, and the memo stays within ``VALIDATED_REFS``."""
    from notification_controller.core import apiref

    # a core Service: accepted for a hook's lookup, refused as a target, in either order, every time
    for _ in range(2):
        assert validate_object_ref("v1", "Service", "a", "svc", use=Use.LOOKUP).name == "svc"
        message = _refused("v1", "Service", "a", "svc", Use.TARGET)
        assert "core API group" in message
    # the same parts around a hostile one: the refusal is computed (and worded) the same every time
    for api_version in CROSS_NAMESPACE + TO_SECRET:
        first = _refused(api_version, "GitRepository", "a", "app", Use.TARGET)
        assert validate_object_ref(GIT, "GitRepository", "a", "app").name == "app"
        assert _refused(api_version, "GitRepository", "a", "app", Use.TARGET) == first
    for name in ("../x", "A", "a" * 254, "x/y"):
        assert validate_object_ref(GIT, "GitRepository", "a", "ok").name == "ok"
        assert "invalid name" in _refused(GIT, "GitRepository", "a", name, Use.LOOKUP)
    # parts that are not strings: refused (or, an empty apiVersion of any falsy value, defaulted) as before
    assert "not a string" in _refused(GIT, "GitRepository", "a", ["x"], Use.TARGET)
    assert "not a string" in _refused(GIT, ["GitRepository"], "a", "x", Use.TARGET)
    empties: list[Any] = ["", None, [], 0]
    for empty in empties:
        ref = validate_object_ref(empty, "GitRepository", "a", "x")
        assert (ref.api_version, ref.name) == (DEFAULT_API_VERSIONS["GitRepository"], "x")
    # bounded: names an event may post, far more than remembered
    for index in range(apiref.VALIDATED_REFS + 100):
        assert validate_object_ref(GIT, "GitRepository", "a", f"app-{index}").name == f"app-{index}"
        assert len(apiref._validated) <= apiref.VALIDATED_REFS


async def test_discovery_cannot_resolve_a_refused_or_cluster_scoped_type(tmp_path: Path) -> None:
    """Discovery answers are checked too: a CRD group that serves cluster-scoped objects, or a plural
    that is not a DNS label, is never used."""
    async with MiniAPI() as api:
        client = await KubeClient.connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
        cluster = KubeCluster(client)
        try:
            api.discovery["/apis/example.com/v1"] = [
                {"name": "widgets", "kind": "Widget", "namespaced": False},
                {"name": "../secrets", "kind": "Gadget", "namespaced": True},
                {"name": "Gizmos", "kind": "Gizmo", "namespaced": True},
            ]
            for kind in ("Widget", "Gadget", "Gizmo"):
                with pytest.raises(KubeError) as caught:
                    await cluster.annotate("example.com/v1", kind, "a", "x", {REQUESTED_AT: "now"})
                assert caught.value.status == 404
            assert [r.path for r in api.requests] == ["/apis/example.com/v1"]  # one discovery, cached
        finally:
            await client.close()
