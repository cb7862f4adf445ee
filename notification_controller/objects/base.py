"""The indexed object cache and the ``Cluster`` port (writes and reads beyond the cache)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..api.alert import Alert
from ..api.common import Secret, share_fields_sets
from ..api.objects import Object
from ..api.provider import Provider
from ..api.receiver import Receiver
from ..api.silence import Silence
from ..core.matching import CompiledAlert, compile_alert

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class Change:
    """What changed in the store: ``kind`` and key; ``obj`` is None on deletion."""

    kind: str
    namespace: str
    name: str
    obj: Object | None
    old: Object | None


Listener = Callable[[Change], None]


class ObjectStore:
    """In-memory cache of the controller's objects with the indexes the hot paths need.

    * alerts by ``(source namespace, source kind, source name or *)`` → compiled alerts (regexes compiled
      once per version), so an event only sees wildcard sources and the sources that name its object;
    * receivers by ``status.webhookPath`` (O(1) hook lookup);
    * receivers and providers by referenced Secret, for re-validation when a Secret changes.
    Mutations come from one feeder task at a time (asyncio: no locking needed).
    """

    def __init__(self, *, namespaces: frozenset[str] | None = None) -> None:
        self.namespaces = namespaces  # None = all namespaces
        self._alerts: dict[Key, CompiledAlert] = {}
        self._alert_index: dict[tuple[str, str, str], dict[Key, CompiledAlert]] = {}
        self._providers: dict[Key, Provider] = {}
        self._receivers: dict[Key, Receiver] = {}
        self._receiver_paths: dict[str, Key] = {}
        self._secrets: dict[Key, Secret] = {}
        self._silences: dict[Key, Silence] = {}
        self._silences_by_ns: dict[str, dict[str, Silence]] = {}
        self._listeners: list[Listener] = []
        self._synced = asyncio.Event()
        self.generation = 0  # bumps on every change; cheap cache-invalidation token

    # ---- feeding ------------------------------------------------------------------------------
    def watches(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def upsert(self, obj: Object) -> None:
        ns, name = obj.metadata.namespace, obj.metadata.name
        if not self.watches(ns):
            return
        key = (ns, name)
        old = self.get(obj.KIND, ns, name)
        if old == obj:
            return
        if old is not None or self.synced:
            # Models with the same explicitly-set field names share one fields-set (~1.5 KB per Alert, issue
            # 17). Not while the first sync loads everything (start-up to Ready; 10,000 Alerts: ~0.07 s):
            # those objects get it when a first status write replaces them.
            share_fields_sets(obj)
        if isinstance(obj, Alert):
            self._upsert_alert(key, obj)
        elif isinstance(obj, Provider):
            self._providers[key] = obj
        elif isinstance(obj, Receiver):
            if isinstance(old, Receiver) and old.status.webhook_path:
                self._receiver_paths.pop(old.status.webhook_path, None)
            self._receivers[key] = obj
            if obj.status.webhook_path:
                self._receiver_paths[obj.status.webhook_path] = key
        elif isinstance(obj, Silence):
            self._silences[key] = obj
            self._silences_by_ns.setdefault(ns, {})[name] = obj
        else:
            self._secrets[key] = obj
        self._changed(Change(obj.KIND, ns, name, obj, old))

    def _upsert_alert(self, key: Key, alert: Alert) -> None:
        previous = self._alerts.get(key)
        if previous is not None and (previous.alert.spec is alert.spec or previous.alert.spec == alert.spec):
            # The same spec (a status or metadata change): the same sources, lists and index keys.
            compiled = dataclasses.replace(previous, alert=alert)
            self._alerts[key] = compiled
            for index_key in compiled.index_keys():
                self._alert_index[index_key][key] = compiled
            return
        self._unindex_alert(key)
        compiled = compile_alert(alert, previous)  # unchanged filter lists are reused
        self._alerts[key] = compiled
        for index_key in compiled.index_keys():
            self._alert_index.setdefault(index_key, {})[key] = compiled

    def delete(self, kind: str, namespace: str, name: str) -> None:
        key = (namespace, name)
        old: Object | None = None
        if kind == "Alert":
            compiled = self._alerts.get(key)
            old = compiled.alert if compiled else None
            self._unindex_alert(key)
        elif kind == "Provider":
            old = self._providers.pop(key, None)
        elif kind == "Receiver":
            receiver = self._receivers.pop(key, None)
            if receiver is not None and receiver.status.webhook_path:
                self._receiver_paths.pop(receiver.status.webhook_path, None)
            old = receiver
        elif kind == "Secret":
            old = self._secrets.pop(key, None)
        elif kind == "Silence":
            old = self._silences.pop(key, None)
            in_ns = self._silences_by_ns.get(namespace)
            if in_ns is not None:
                in_ns.pop(name, None)
                if not in_ns:
                    del self._silences_by_ns[namespace]
        if old is not None:
            self._changed(Change(kind, namespace, name, None, old))

    def replace(self, kind: str, objects: Iterable[Object]) -> None:
        """Set the full content of one kind (after a list): upserts, and deletes what is gone."""
        fresh = {(o.metadata.namespace, o.metadata.name): o for o in objects}
        for key in list(self.keys(kind)):
            if key not in fresh:
                self.delete(kind, *key)
        for obj in fresh.values():
            self.upsert(obj)

    def mark_synced(self) -> None:
        self._synced.set()

    def mark_unsynced(self) -> None:
        self._synced.clear()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _unindex_alert(self, key: Key) -> None:
        compiled = self._alerts.pop(key, None)
        if compiled is None:
            return
        for index_key in compiled.index_keys():
            bucket = self._alert_index.get(index_key)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self._alert_index[index_key]

    def _changed(self, change: Change) -> None:
        self.generation += 1
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:  # a broken listener must not break the feeder
                log.exception("store listener failed")

    # ---- reading ------------------------------------------------------------------------------
    def alerts_for(self, namespace: str, kind: str, name: str = "*") -> Sequence[CompiledAlert]:
        """Alerts with a source for ``kind`` in ``namespace`` that is a wildcard or names ``name``."""
        wildcard = self._alert_index.get((namespace, kind, "*"))
        named = self._alert_index.get((namespace, kind, name)) if name != "*" else None
        if not named:
            return tuple(wildcard.values()) if wildcard else ()
        if not wildcard:
            return tuple(named.values())
        return tuple({**wildcard, **named}.values())

    def alert(self, namespace: str, name: str) -> Alert | None:
        compiled = self._alerts.get((namespace, name))
        return compiled.alert if compiled else None

    def provider(self, namespace: str, name: str) -> Provider | None:
        return self._providers.get((namespace, name))

    def receiver(self, namespace: str, name: str) -> Receiver | None:
        return self._receivers.get((namespace, name))

    def receiver_by_path(self, path: str) -> Receiver | None:
        key = self._receiver_paths.get(path)
        return self._receivers.get(key) if key else None

    def secret(self, namespace: str, name: str) -> Secret | None:
        return self._secrets.get((namespace, name))

    def silence(self, namespace: str, name: str) -> Silence | None:
        return self._silences.get((namespace, name))

    def silences_in(self, namespace: str) -> Sequence[Silence]:
        """The Silences of one namespace (the quiet stage asks per event: no scan of the others)."""
        in_ns = self._silences_by_ns.get(namespace)
        return tuple(in_ns.values()) if in_ns else ()

    def silences(self) -> list[Silence]:
        return list(self._silences.values())

    def alerts(self) -> list[Alert]:
        return [c.alert for c in self._alerts.values()]

    def providers(self) -> list[Provider]:
        return list(self._providers.values())

    def receivers(self) -> list[Receiver]:
        return list(self._receivers.values())

    def secrets(self) -> list[Secret]:
        return list(self._secrets.values())

    def keys(self, kind: str) -> list[Key]:
        sources: dict[str, Mapping[Key, Any]] = {
            "Alert": self._alerts,
            "Provider": self._providers,
            "Receiver": self._receivers,
            "Secret": self._secrets,
            "Silence": self._silences,
        }
        return list(sources.get(kind, {}))

    def get(self, kind: str, namespace: str, name: str) -> Object | None:
        if kind == "Alert":
            return self.alert(namespace, name)
        if kind == "Provider":
            return self.provider(namespace, name)
        if kind == "Receiver":
            return self.receiver(namespace, name)
        if kind == "Secret":
            return self.secret(namespace, name)
        if kind == "Silence":
            return self.silence(namespace, name)
        return None


def secret_data(change: Change) -> Mapping[str, bytes] | None:
    """The new data of a Secret change (``None``: deleted), for the log redactor's per-Secret update.

    Listeners get one change per Secret, so masking is kept current in O(size of that Secret): never
    rebuild from every Secret the store holds (that was quadratic at start-up, issue 11 item 3).
    """
    return change.obj.data if isinstance(change.obj, Secret) else None


@dataclass(frozen=True)
class ObjectRef:
    """A reference to any Kubernetes object (for Events and patches)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @classmethod
    def of(cls, obj: Object) -> ObjectRef:
        return cls(obj.api_version, obj.kind, obj.metadata.namespace, obj.metadata.name, obj.metadata.uid)


class Cluster(Protocol):
    """Everything the controller does beyond reading its cache: the port both modes implement.

    Errors are ``errors.KubeError`` (with ``status``); messages never contain secrets.
    """

    async def get_metadata(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """PartialObjectMetadata of any object (``metadata.labels`` etc.). 404 → KubeError(status=404)."""
        ...

    async def list_metadata(
        self, api_version: str, kind: str, namespace: str, match_labels: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """PartialObjectMetadata of the objects of a kind in a namespace matching all labels."""
        ...

    async def annotate(
        self, api_version: str, kind: str, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> None:
        """JSON merge patch of ``metadata.annotations`` (no resourceVersion: never conflicts)."""
        ...

    async def patch_status(self, ref: ObjectRef, status: Mapping[str, Any]) -> None:
        """Merge-patch the status subresource of one of our objects."""
        ...

    async def set_finalizers(self, ref: ObjectRef, finalizers: Sequence[str], resource_version: str) -> None:
        """Replace ``metadata.finalizers`` (optimistic concurrency on ``resource_version``)."""
        ...

    async def emit_event(
        self, ref: ObjectRef, type_: str, reason: str, message: str, annotations: Mapping[str, str] | None
    ) -> None:
        """Create or update a Kubernetes Event (``core/v1``) about ``ref``."""
        ...

    async def delete(self, ref: ObjectRef) -> None:
        """Delete one of our objects, only if its uid is still ``ref.uid`` (the one use: Silences expired
        longer than ``--silence-retention``). Gone → ``KubeError(status=404)``, another uid → 409; local mode
        refuses what the user's files hold with 405 (``objects/local.py``)."""
        ...

    async def get_service_account(self, namespace: str, name: str) -> dict[str, Any]:
        """The ``metadata`` of a ServiceAccount (its annotations name the cloud identity for workload
        identity, ``outbound/identity.py``). Missing → ``KubeError(status=404)``."""
        ...

    async def create_service_account_token(
        self, namespace: str, name: str, audiences: Sequence[str], expiration_seconds: int
    ) -> tuple[str, float]:
        """A token for the ServiceAccount with ``audiences`` (the TokenRequest API,
        ``POST .../serviceaccounts/<name>/token``): ``(token, expiry as a Unix time)``."""
        ...
