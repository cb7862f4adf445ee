"""Pure parts of ``notification_controller.kube``: no server, no network.

Backoff (checklist D4), token bucket (reference §7 ``--kube-api-qps/--kube-api-burst``), error translation
(no secrets in messages, ``Retry-After`` for D7), config precedence, kind → plural mapping (reference §5.4),
and the informer's list/event bookkeeping (D1, D2, D6, D9) fed into a real ``ObjectStore``.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from multidict import CIMultiDict, CIMultiDictProxy

from notification_controller.api.common import SourceKind
from notification_controller.errors import KubeError
from notification_controller.kube.client import (
    ClientThrottle,
    KubeClient,
    api_path,
    resolve_config_source,
    status_error,
    translate_exception,
    watch_status_error,
)
from notification_controller.kube.cluster import DEFAULT_API_VERSIONS, known_plural, split_api_version
from notification_controller.kube.informer import (
    ALERTS,
    PROVIDERS,
    SECRETS,
    Backoff,
    Informer,
    InvalidEntry,
    InvalidKey,
    ResourceType,
    watch_namespace,
)
from notification_controller.kube.leader import LeaderElector, micro_time
from notification_controller.lib.retryafter import parse_retry_after
from notification_controller.objects.base import Change, ObjectStore

SECRET_VALUE = "s3cr3t-t0ken-value"


# The only async test comes first: pytest-asyncio 1.5 leaks a loop when a sync test precedes an async one
# in a module (pytest-asyncio#724), which filterwarnings=error turns into a failure at session end.
async def test_unreadable_in_cluster_config_is_a_kube_error(tmp_path: Path) -> None:
    source = resolve_config_source(
        None,
        environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"},
        token_file=str(tmp_path / "missing-token"),
        ca_file=str(tmp_path / "missing-ca"),
    )
    with pytest.raises(KubeError, match="in-cluster service account"):
        await source.load()


# ---- backoff -------------------------------------------------------------------------------------
def test_backoff_doubles_from_800ms_to_a_30s_cap() -> None:
    """D4: capped exponential backoff 0.8 s → 30 s."""
    backoff = Backoff()
    delays = [backoff.next() for _ in range(9)]
    assert delays == pytest.approx([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0])


def test_backoff_reset_starts_over() -> None:
    backoff = Backoff()
    for _ in range(5):
        backoff.next()
    backoff.reset()
    assert backoff.next() == pytest.approx(0.8)


def test_backoff_jitter_stays_within_bounds_and_cap() -> None:
    values = iter([0.0, 1.0, 0.5] * 10)
    backoff = Backoff(jitter=0.2, rng=lambda: next(values))
    delays = [backoff.next() for _ in range(9)]
    assert delays[0] == pytest.approx(0.8)
    assert delays[1] == pytest.approx(1.6 * 1.2)
    assert delays[2] == pytest.approx(3.2 * 1.1)
    assert max(delays) <= 30.0


# ---- token bucket --------------------------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_a_burst_then_paces_at_qps() -> None:
    clock = FakeClock()
    bucket = ClientThrottle(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    # the 4th, 5th requests wait 0.1 s, 0.2 s: served in arrival order
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.now += 10.0  # refills up to the burst, not beyond
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)


def test_token_bucket_disabled_with_zero_qps() -> None:
    bucket = ClientThrottle(qps=0, burst=1, clock=FakeClock())
    assert all(bucket.reserve() == 0.0 for _ in range(1000))


# ---- error translation ---------------------------------------------------------------------------
def _status(code: int, reason: str, message: str, **details: Any) -> bytes:
    import json

    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    body.update(reason=reason, message=message)
    if details:
        body["details"] = details
    return json.dumps(body).encode()


def test_status_error_keeps_templated_messages() -> None:
    err = status_error(
        "GET", "/api/v1/namespaces/a/secrets/x", 404, _status(404, "NotFound", 'secrets "x" not found')
    )
    assert isinstance(err, KubeError)
    assert err.status == 404 and err.not_found
    assert str(err) == 'GET /api/v1/namespaces/a/secrets/x: HTTP 404 NotFound: secrets "x" not found'


def test_status_error_conflict_and_gone_flags() -> None:
    assert status_error("PATCH", "/p", 409, _status(409, "Conflict", "the object has been modified")).conflict
    assert status_error("WATCH", "/p", 410, _status(410, "Expired", "too old resource version")).gone


@pytest.mark.parametrize("code", [400, 422, 500, 503])
def test_status_error_never_echoes_free_text_that_may_contain_values(code: int) -> None:
    """A 422 message quotes the rejected value (it could be a token): only field names are kept."""
    body = _status(
        code,
        "Invalid",
        f'Receiver "r" is invalid: status.conditions[0].message: Invalid value: "{SECRET_VALUE}"',
        causes=[{"field": "status.conditions[0].message", "message": f"Invalid value: {SECRET_VALUE}"}],
    )
    err = status_error("PATCH", "/apis/x/v1/namespaces/n/receivers/r/status", code, body)
    assert SECRET_VALUE not in str(err)
    assert err.status == code
    assert "Invalid" in str(err)
    assert "status.conditions[0].message" in str(err)


def test_status_error_with_a_non_json_body_does_not_include_it() -> None:
    err = status_error("GET", "/x", 502, f"<html>{SECRET_VALUE}</html>".encode())
    assert str(err) == "GET /x: HTTP 502"
    assert err.status == 502


def test_status_error_reads_retry_after_header_and_details() -> None:
    """D7: Retry-After (header, or Status.details.retryAfterSeconds) is carried on the error."""
    err = status_error("GET", "/x", 429, _status(429, "TooManyRequests", "slow down"), {"Retry-After": "7"})
    assert err.retry_after == 7.0
    err = status_error("GET", "/x", 429, _status(429, "TooManyRequests", "slow down", retryAfterSeconds=3))
    assert err.retry_after == 3.0
    assert status_error("GET", "/x", 500, b"").retry_after is None


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("-3") == 0.0
    now = datetime(2030, 1, 1, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(date, now=now.timestamp()) == pytest.approx(30.0)


def test_watch_status_error_uses_the_status_code() -> None:
    err = watch_status_error(
        "/apis/x", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    )
    assert err.gone and str(err) == "WATCH /apis/x: HTTP 410 Expired: too old"
    assert watch_status_error("/apis/x", {"kind": "Status"}).status == 500


def test_translate_api_exception() -> None:
    exc = ApiException(status=429, reason="Too Many Requests")
    exc.body = _status(429, "TooManyRequests", "slow")
    exc.headers = CIMultiDictProxy(CIMultiDict({"Retry-After": "9"}))
    err = translate_exception("GET", "/x", exc)
    assert err.status == 429 and err.retry_after == 9.0


def test_translate_transport_errors_have_status_zero() -> None:
    err = translate_exception("GET", "/x", TimeoutError())
    assert err.status == 0 and "timed out" in str(err)
    err = translate_exception("GET", "/x", aiohttp.ServerDisconnectedError())
    assert err.status == 0 and str(err).startswith("GET /x: ServerDisconnectedError")
    err = translate_exception("GET", "/x", OSError(111, "Connection refused"))
    assert err.status == 0 and "Connection refused" in str(err)
    kube_error = KubeError("as is", status=418)
    assert translate_exception("GET", "/x", kube_error) is kube_error


# ---- configuration -------------------------------------------------------------------------------
def test_config_precedence_flag_then_env_then_in_cluster_then_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("apiVersion: v1\n")
    env = {
        "KUBECONFIG": "/env/config",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
    }

    source = resolve_config_source("/flag/config", environ=env, home=str(home))
    assert (source.kind, source.path) == ("kubeconfig", "/flag/config")
    source = resolve_config_source(None, environ=env, home=str(home))
    assert (source.kind, source.path) == ("kubeconfig", "/env/config")
    source = resolve_config_source(
        None, environ={k: v for k, v in env.items() if k != "KUBECONFIG"}, home=str(home)
    )
    assert source.kind == "in-cluster"
    source = resolve_config_source(None, environ={}, home=str(home))
    assert (source.kind, source.path) == ("kubeconfig", str(home / ".kube" / "config"))
    with pytest.raises(KubeError, match="no Kubernetes configuration"):
        resolve_config_source(None, environ={}, home=str(tmp_path / "nohome"))


def test_watch_namespace_follows_flux() -> None:
    assert watch_namespace(True, {"RUNTIME_NAMESPACE": "flux-system"}) is None
    assert watch_namespace(False, {"RUNTIME_NAMESPACE": "flux-system"}) == "flux-system"
    assert watch_namespace(False, {}) is None


# ---- kinds and paths -----------------------------------------------------------------------------
def test_every_source_kind_has_a_real_crd_plural() -> None:
    """Flux CRD plurals (not lower(kind)+'s': gitrepositories, imagepolicies...)."""
    expected = {
        SourceKind.BUCKET: ("source.toolkit.fluxcd.io", "buckets"),
        SourceKind.GIT_REPOSITORY: ("source.toolkit.fluxcd.io", "gitrepositories"),
        SourceKind.HELM_CHART: ("source.toolkit.fluxcd.io", "helmcharts"),
        SourceKind.HELM_REPOSITORY: ("source.toolkit.fluxcd.io", "helmrepositories"),
        SourceKind.OCI_REPOSITORY: ("source.toolkit.fluxcd.io", "ocirepositories"),
        SourceKind.KUSTOMIZATION: ("kustomize.toolkit.fluxcd.io", "kustomizations"),
        SourceKind.HELM_RELEASE: ("helm.toolkit.fluxcd.io", "helmreleases"),
        SourceKind.IMAGE_REPOSITORY: ("image.toolkit.fluxcd.io", "imagerepositories"),
        SourceKind.IMAGE_POLICY: ("image.toolkit.fluxcd.io", "imagepolicies"),
        SourceKind.IMAGE_UPDATE_AUTOMATION: ("image.toolkit.fluxcd.io", "imageupdateautomations"),
        SourceKind.ARTIFACT_GENERATOR: ("source.extensions.fluxcd.io", "artifactgenerators"),
        SourceKind.EXTERNAL_ARTIFACT: ("source.extensions.fluxcd.io", "externalartifacts"),
    }
    assert set(expected) == set(SourceKind)
    for kind, (group, plural) in expected.items():
        assert known_plural(group, kind.value) == plural, kind
    assert known_plural("source.toolkit.fluxcd.io", "ExternalArtifact") == "externalartifacts"
    assert known_plural("example.com", "GitRepository") is None  # other groups: discovery


def test_default_api_versions_follow_reference_5_4() -> None:
    assert DEFAULT_API_VERSIONS["GitRepository"] == "source.toolkit.fluxcd.io/v1"
    assert DEFAULT_API_VERSIONS["ImageRepository"] == "image.toolkit.fluxcd.io/v1"
    assert DEFAULT_API_VERSIONS["ArtifactGenerator"] == "source.extensions.fluxcd.io/v1beta1"
    assert "Kustomization" not in DEFAULT_API_VERSIONS


def test_split_api_version_and_paths() -> None:
    assert split_api_version("source.toolkit.fluxcd.io/v1") == ("source.toolkit.fluxcd.io", "v1")
    assert split_api_version("v1") == ("", "v1")
    assert api_path("", "v1", "secrets") == "/api/v1/secrets"
    assert api_path("g.io", "v1", "things", "ns", "a.b-c") == "/apis/g.io/v1/namespaces/ns/things/a.b-c"
    with pytest.raises(KubeError):  # validated, not escaped (tests/adversarial/test_api_path_injection.py)
        api_path("g.io", "v1", "things", "ns", "a/b c")
    assert ALERTS.path("flux") == "/apis/notification.toolkit.fluxcd.io/v1beta3/namespaces/flux/alerts"
    assert SECRETS.path(None) == "/api/v1/secrets"


def test_micro_time_format() -> None:
    assert micro_time(datetime(2024, 5, 6, 7, 8, 9, 12, tzinfo=UTC)) == "2024-05-06T07:08:09.000012Z"


def test_leader_elector_rejects_inconsistent_timings() -> None:
    client = cast(KubeClient, None)
    with pytest.raises(ValueError, match="lease duration"):
        LeaderElector(client, namespace="ns", lease_duration=10, renew_deadline=10, retry_period=2)
    with pytest.raises(ValueError, match="renew deadline"):
        LeaderElector(client, namespace="ns", lease_duration=10, renew_deadline=5, retry_period=5)
    with pytest.raises(ValueError, match="namespace"):
        LeaderElector(client, namespace="")


# ---- informer bookkeeping (real ObjectStore, no server) -----------------------------------------
def _provider(name: str, rv: str, *, ns: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Provider",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "uid": f"uid-{name}"},
        "spec": {"type": "slack", **spec},
    }


class Recorder:
    def __init__(self, store: ObjectStore) -> None:
        self.changes: list[Change] = []
        self.invalid: list[tuple[InvalidKey, InvalidEntry | None]] = []
        store.subscribe(self.changes.append)

    def on_invalid(self, key: InvalidKey, entry: InvalidEntry | None) -> None:
        self.invalid.append((key, entry))


def _informer(resource: ResourceType = PROVIDERS) -> tuple[Informer, ObjectStore, Recorder]:
    store = ObjectStore()
    recorder = Recorder(store)
    informer = Informer(cast(KubeClient, None), store, resource, on_invalid=recorder.on_invalid)
    return informer, store, recorder


def test_relist_deletes_what_disappeared_and_listeners_get_a_tombstone() -> None:
    """D2: an object deleted while the watch was down is removed by the relist (deletion Change)."""
    informer, store, recorder = _informer()
    informer.apply_list([_provider("a", "1"), _provider("b", "2")])
    assert sorted(store.keys("Provider")) == [("default", "a"), ("default", "b")]
    recorder.changes.clear()

    informer.apply_list([_provider("a", "1")])
    assert store.keys("Provider") == [("default", "a")]
    assert len(recorder.changes) == 1
    tombstone = recorder.changes[0]
    assert (tombstone.kind, tombstone.name, tombstone.obj) == ("Provider", "b", None)
    assert tombstone.old is not None and tombstone.old.metadata.name == "b"


def test_relist_items_without_kind_are_typed_by_the_resource() -> None:
    """List items of built-in types carry no apiVersion/kind."""
    informer, store, _ = _informer(SECRETS)
    raw = {
        "metadata": {"name": "tok", "namespace": "ns"},
        "data": {"token": base64.b64encode(b"abc").decode()},
    }
    informer.apply_list([raw])
    secret = store.secret("ns", "tok")
    assert secret is not None and secret.data == {"token": b"abc"}


def test_watch_events_upsert_and_delete_and_track_resource_version() -> None:
    informer, store, _ = _informer()
    informer.apply_event({"type": "ADDED", "object": _provider("a", "10")})
    assert store.provider("default", "a") is not None
    assert informer.resource_version == "10"
    informer.apply_event({"type": "MODIFIED", "object": _provider("a", "11", channel="ops")})
    provider = store.provider("default", "a")
    assert provider is not None and provider.spec.channel == "ops"
    informer.apply_event({"type": "DELETED", "object": _provider("a", "12")})
    assert store.provider("default", "a") is None
    assert informer.resource_version == "12"


def test_bookmark_advances_resource_version_without_touching_the_store() -> None:
    """D6."""
    informer, store, recorder = _informer()
    informer.apply_list([_provider("a", "1")])
    generation, changes = store.generation, len(recorder.changes)
    informer.apply_event(
        {"type": "BOOKMARK", "object": {"kind": "Provider", "metadata": {"resourceVersion": "99"}}}
    )
    assert informer.resource_version == "99"
    assert store.generation == generation and len(recorder.changes) == changes


def test_error_event_raises_its_status() -> None:
    """D1: ERROR 410 in the stream surfaces as KubeError(gone) so the loop relists."""
    informer, _, _ = _informer()
    with pytest.raises(KubeError) as caught:
        informer.apply_event(
            {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
        )
    assert caught.value.gone


def test_unknown_and_malformed_events_are_skipped() -> None:
    """D9: unknown type, missing object, missing name, missing resourceVersion: no crash, no index entry."""
    informer, store, _ = _informer()
    informer.apply_event({"type": "SURPRISE", "object": _provider("x", "5")})
    informer.apply_event({"type": "ADDED"})
    informer.apply_event({"type": "ADDED", "object": {"metadata": {"namespace": "default"}}})
    informer.apply_event({"type": "ADDED", "object": "not an object"})
    assert store.keys("Provider") == []
    no_rv = _provider("y", "")
    del no_rv["metadata"]["resourceVersion"]
    informer.apply_event({"type": "ADDED", "object": no_rv})
    assert store.provider("default", "y") is not None
    assert informer.resource_version == ""


def test_invalid_object_is_not_indexed_and_is_reported_until_fixed() -> None:
    """D9: a CR our model rejects (CEL rule an old API server did not enforce) is kept out of the index."""
    informer, store, recorder = _informer()
    informer.apply_event({"type": "ADDED", "object": _provider("p", "1")})
    assert store.provider("default", "p") is not None

    bad = _provider("p", "2", commitStatusExpr="'x'")
    informer.apply_event({"type": "MODIFIED", "object": bad})
    assert store.provider("default", "p") is None  # the stale valid version is gone too
    key = ("Provider", "default", "p")
    assert key in informer.invalid
    raw, error = informer.invalid[key]
    assert raw["metadata"]["resourceVersion"] == "2"
    assert "commitStatusExpr is only supported" in error
    assert recorder.invalid == [(key, informer.invalid[key])]

    informer.apply_event({"type": "MODIFIED", "object": bad})  # same error: reported once
    assert len(recorder.invalid) == 1

    informer.apply_event({"type": "MODIFIED", "object": _provider("p", "3")})
    assert store.provider("default", "p") is not None
    assert key not in informer.invalid
    assert recorder.invalid[-1] == (key, None)


def test_invalid_objects_in_a_list_are_reported_and_cleared_by_a_later_list() -> None:
    informer, store, recorder = _informer()
    huge = _provider("huge", "1", channel="x" * 5000)
    informer.apply_list([_provider("ok", "1"), huge, _provider("typo", "1", tpye="x")])
    assert store.keys("Provider") == [("default", "ok")]
    assert set(informer.invalid) == {("Provider", "default", "huge"), ("Provider", "default", "typo")}
    assert "spec.channel" in informer.invalid[("Provider", "default", "huge")][1]
    assert "x" * 100 not in informer.invalid[("Provider", "default", "huge")][1]  # no values in the message

    informer.apply_list([_provider("ok", "1")])  # both deleted meanwhile
    assert informer.invalid == {}
    assert {(key[2], entry) for key, entry in recorder.invalid[-2:]} == {("huge", None), ("typo", None)}


def test_invalid_secret_keeps_no_data() -> None:
    informer, store, _ = _informer(SECRETS)
    raw = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "bad", "namespace": "ns"},
        "data": {"token": "!!not-base64!!" + SECRET_VALUE},
    }
    informer.apply_event({"type": "ADDED", "object": raw})
    assert store.secret("ns", "bad") is None
    stored, error = informer.invalid[("Secret", "ns", "bad")]
    assert "data" not in stored
    assert SECRET_VALUE not in error and "data.token" in error


def test_a_failing_invalid_callback_does_not_break_the_informer() -> None:
    store = ObjectStore()

    def broken(key: InvalidKey, entry: InvalidEntry | None) -> None:
        raise RuntimeError("boom")

    informer = Informer(cast(KubeClient, None), store, PROVIDERS, on_invalid=broken)
    informer.apply_event({"type": "ADDED", "object": _provider("p", "1", commitStatusExpr="x")})
    informer.apply_event({"type": "ADDED", "object": _provider("q", "2")})
    assert store.provider("default", "q") is not None
