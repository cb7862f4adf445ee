"""List-then-watch informers that keep ``store.ObjectStore`` equal to the API server's state.

One ``Informer`` per resource (Alerts, Providers, Receivers, Secrets, Silences), all run by ``Informers``:

* **List** (paginated, consistent read with ``resourceVersion`` unset) → ``store.replace(kind, objects)``:
  objects deleted while the watch was down disappear from the store and listeners get a deletion
  ``Change`` (the tombstone, checklist D2). A list is never served from a stale cache (D1, D3).
* **Watch** from the list's resourceVersion with ``allowWatchBookmarks``: ADDED/MODIFIED → ``upsert``,
  DELETED → ``delete``; BOOKMARK only advances the resourceVersion (D6).
* **410 Gone** (at watch start or as an ``ERROR`` event) → relist (D1). A list that fails is retried.
* **Other errors** (5xx, 403, connection refused, 429) → reconnect after a capped exponential backoff,
  0.8 s doubling to 30 s, never less than the server's ``Retry-After``; never fatal (D4, D7).
* **Inactivity**: the server ends each watch after ``timeoutSeconds`` (5–6 min, jittered); a stream silent
  for ``timeoutSeconds + 30 s`` is dead (no FIN) and is restarted with the last resourceVersion (D5).
* **Invalid objects** (a CR that does not match our models, a malformed object): not indexed (a previous
  valid version is removed from the store), recorded in ``Informer.invalid`` and reported through the
  ``on_invalid`` callback so reconcilers can set ``Ready=False`` (D9). Nothing here ever crashes the loop.

The store is marked synced once every informer has listed once; later relists serve from the last good
cache and never mark it unsynced (D10).

**Optional resources** (``Silence``, issue 26: our own CRD, which a cluster may not have installed, or whose
RBAC an older install does not grant): a 404 or 403 on list or watch is not an error to retry with backoff
but "not there": the kind is emptied from the store, counts as synced (the controller serves events without
it), is logged once at info (403: warning, the install's RBAC is behind), and is looked for again every
``discovery_interval`` (60 s) until it appears; then it is listed and watched like the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..api import ALERT_VERSION, GROUP, PROVIDER_VERSION, RECEIVER_VERSION
from ..api.objects import Object, parse_object
from ..api.silence import SILENCE_GROUP, SILENCE_VERSION
from ..errors import KubeError, ManifestError
from ..lib.memtrim import release_free_memory
from ..objects.base import ObjectStore
from .client import KubeClient, WatchStalled, api_path, watch_status_error

log = logging.getLogger(__name__)

WATCH_TIMEOUT_SECONDS = 300
WATCH_TIMEOUT_JITTER = 60
INACTIVITY_GRACE = 30.0
BACKOFF_INITIAL = 0.8
BACKOFF_CAP = 30.0
MIN_WATCH_DURATION = 1.0  # a watch ending sooner with no event counts as a failure (no hot loop)
DISCOVERY_INTERVAL = 60.0
"""How often an optional resource that is not served (its CRD not installed) is looked for again."""
# Helm release Secrets are large, numerous and never referenced by a Provider or Receiver.
DEFAULT_SECRET_FIELD_SELECTOR = "type!=helm.sh/release.v1"


@dataclass(frozen=True)
class ResourceType:
    """A watched resource: its kind and where it lives in the API."""

    kind: str
    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None) -> str:
        return api_path(self.group, self.version, self.plural, namespace)


ALERTS = ResourceType("Alert", GROUP, ALERT_VERSION, "alerts")
PROVIDERS = ResourceType("Provider", GROUP, PROVIDER_VERSION, "providers")
RECEIVERS = ResourceType("Receiver", GROUP, RECEIVER_VERSION, "receivers")
SECRETS = ResourceType("Secret", "", "v1", "secrets")
SILENCES = ResourceType("Silence", SILENCE_GROUP, SILENCE_VERSION, "silences")

InvalidKey = tuple[str, str, str]  # (kind, namespace, name)
InvalidEntry = tuple[dict[str, Any], str]  # (raw object, error message)
InvalidCallback = Callable[[InvalidKey, InvalidEntry | None], None]
"""Called with the entry when an object becomes invalid, with None when it is valid again or deleted."""


class Backoff:
    """Capped exponential backoff: ``initial``, ×``factor`` each failure, at most ``cap``.

    ``jitter`` adds up to that fraction of the delay at random (0 = deterministic).
    """

    def __init__(
        self,
        initial: float = BACKOFF_INITIAL,
        cap: float = BACKOFF_CAP,
        factor: float = 2.0,
        jitter: float = 0.0,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.initial = initial
        self.cap = cap
        self.factor = factor
        self.jitter = jitter
        self._rng = rng
        self._next = initial

    def next(self) -> float:
        delay = self._next
        self._next = min(self.cap, self._next * self.factor)
        if self.jitter:
            delay = min(self.cap, delay * (1.0 + self.jitter * self._rng()))
        return delay

    def reset(self) -> None:
        self._next = self.initial


def watch_namespace(watch_all_namespaces: bool, environ: Mapping[str, str] | None = None) -> str | None:
    """Flux's rule: ``--watch-all-namespaces=false`` watches only ``RUNTIME_NAMESPACE`` (None = all)."""
    if watch_all_namespaces:
        return None
    namespace = (os.environ if environ is None else environ).get("RUNTIME_NAMESPACE", "")
    return namespace or None


def _safe_raw(kind: str, raw: dict[str, Any]) -> dict[str, Any]:
    """The raw object to keep for an invalid entry: Secret values are dropped."""
    if kind != "Secret":
        return raw
    return {k: v for k, v in raw.items() if k not in ("data", "stringData")}


class Informer:
    """List+watch one resource into an ``ObjectStore``. Run ``await informer.run()`` in a task."""

    def __init__(
        self,
        client: KubeClient,
        store: ObjectStore,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        field_selector: str = "",
        label_selector: str = "",
        on_invalid: InvalidCallback | None = None,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
        watch_timeout_jitter: int = WATCH_TIMEOUT_JITTER,
        inactivity_grace: float = INACTIVITY_GRACE,
        backoff: Backoff | None = None,
        page_size: int = 500,
        optional: bool = False,
        discovery_interval: float = DISCOVERY_INTERVAL,
    ) -> None:
        self.client = client
        self.store = store
        self.resource = resource
        self.kind = resource.kind
        self.namespace = namespace
        self.path = resource.path(namespace)
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.on_invalid = on_invalid
        self.watch_timeout = watch_timeout
        self.watch_timeout_jitter = watch_timeout_jitter
        self.inactivity_grace = inactivity_grace
        self.backoff = backoff or Backoff(jitter=0.2)
        self.page_size = page_size
        self.optional = optional
        self.discovery_interval = discovery_interval
        self.available: bool | None = None  # optional resources: None until known, False while not served
        self.invalid: dict[InvalidKey, InvalidEntry] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        # counters, for logs, metrics and tests
        self.lists = 0
        self.watches = 0
        self.errors = 0
        self.last_error: str = ""

    # ---- pure-ish state updates (no I/O) ----------------------------------------------------------
    def _selectors(self) -> list[tuple[str, str]]:
        query: list[tuple[str, str]] = []
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        return query

    def _key(self, raw: Mapping[str, Any]) -> InvalidKey | None:
        meta = raw.get("metadata")
        if not isinstance(meta, dict):
            return None
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            return None
        namespace = meta.get("namespace")
        return (self.kind, namespace if isinstance(namespace, str) else "", name)

    def _parse(self, raw: dict[str, Any]) -> tuple[Object | None, str]:
        """Our model of ``raw``, or None and the reason (a field path and message, no values)."""
        # List items of built-in types carry no apiVersion/kind; the resource says what they are.
        raw = {**raw, "apiVersion": raw.get("apiVersion") or self.resource.api_version, "kind": self.kind}
        try:
            obj = parse_object(raw, receiver_rules=False)  # the Receiver reconciler reports them (Stalled)
        except ManifestError as exc:
            return None, str(exc)
        except Exception as exc:  # a model bug must not stop the informer (D9)
            log.exception("%s: unexpected error parsing an object", self.kind)
            return None, f"cannot parse object: {type(exc).__name__}"
        return obj, ""

    def _set_invalid(self, key: InvalidKey, raw: dict[str, Any], error: str) -> None:
        entry = (_safe_raw(self.kind, raw), error)
        previous = self.invalid.get(key)
        self.invalid[key] = entry
        if previous is None or previous[1] != error or previous[0] != entry[0]:
            log.warning("%s %s/%s is invalid and is ignored: %s", self.kind, key[1], key[2], error)
            self._notify(key, entry)

    def _clear_invalid(self, key: InvalidKey) -> None:
        if self.invalid.pop(key, None) is not None:
            self._notify(key, None)

    def _notify(self, key: InvalidKey, entry: InvalidEntry | None) -> None:
        if self.on_invalid is None:
            return
        try:
            self.on_invalid(key, entry)
        except Exception:  # a broken callback must not break the feeder
            log.exception("invalid-object callback failed")

    def apply_list(self, items: list[dict[str, Any]]) -> None:
        """Make the store's content for this kind equal ``items`` (deleting what is gone)."""
        valid: list[Object] = []
        seen_invalid: set[InvalidKey] = set()
        for raw in items:
            key = self._key(raw)
            if key is None:
                log.warning("%s: skipping a listed object without metadata.name", self.kind)
                continue
            obj, error = self._parse(raw)
            if obj is None:
                seen_invalid.add(key)
                self._set_invalid(key, raw, error)
            else:
                valid.append(obj)
        self.store.replace(self.kind, valid)
        for obj in valid:
            self._clear_invalid((self.kind, obj.metadata.namespace, obj.metadata.name))
        for key in [k for k in self.invalid if k not in seen_invalid]:
            self._clear_invalid(key)

    def apply_event(self, event: Mapping[str, Any]) -> None:
        """Apply one watch event. ``ERROR`` events raise the ``KubeError`` they carry."""
        type_ = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, dict):
            log.warning("%s: skipping a watch event without an object", self.kind)
            return
        if type_ == "ERROR":
            raise watch_status_error(self.path, raw)
        meta = raw.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if type_ == "BOOKMARK":
            if isinstance(rv, str) and rv:
                self.resource_version = rv
            return
        if type_ not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("%s: skipping a watch event of unknown type %r", self.kind, str(type_)[:40])
            return
        key = self._key(raw)
        if key is None:
            log.warning("%s: skipping a watch event whose object has no metadata.name", self.kind)
        elif type_ == "DELETED":
            self.store.delete(self.kind, key[1], key[2])
            self._clear_invalid(key)
        else:
            obj, error = self._parse(raw)
            if obj is None:
                self.store.delete(self.kind, key[1], key[2])  # never route with a stale valid version
                self._set_invalid(key, raw, error)
            else:
                self.store.upsert(obj)
                self._clear_invalid(key)
        if isinstance(rv, str) and rv:
            self.resource_version = rv

    # ---- the loop ---------------------------------------------------------------------------------
    async def list_once(self) -> None:
        items, rv = await self.client.list(self.path, query=self._selectors(), page_size=self.page_size)
        self.apply_list(items)
        self.resource_version = rv
        self.lists += 1
        if self.optional and self.available is False:
            log.info("%s: %s is served now; watching it", self.kind, self.path)
        self.available = True
        self.synced.set()

    def not_served(self, exc: KubeError) -> None:
        """An optional resource answered 404 (no CRD) or 403 (no RBAC): nothing of it in the store, synced
        anyway, said once (see the module docstring)."""
        if self.available is not False:
            why = (
                "the CRD is not installed"
                if exc.not_found
                else "the controller's RBAC does not grant list/watch on it"
            )
            level = logging.INFO if exc.not_found else logging.WARNING
            log.log(
                level,
                "%s: %s is not available (%s): %ss are off until it is; looking again every %.0fs",
                self.kind,
                self.resource.plural + "." + self.resource.group,
                why,
                self.kind,
                self.discovery_interval,
            )
            self.available = False
        self.apply_list([])
        self.resource_version = ""
        self.synced.set()

    async def watch_once(self) -> int:
        """One watch from the current resourceVersion until the server ends it; the number of events."""
        timeout = self.watch_timeout + (
            random.randint(0, self.watch_timeout_jitter) if self.watch_timeout_jitter else 0
        )
        self.watches += 1
        count = 0
        stream = self.client.watch(
            self.path,
            resource_version=self.resource_version,
            timeout_seconds=timeout,
            inactivity_timeout=timeout + self.inactivity_grace,
            query=self._selectors(),
        )
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                self.apply_event(event)
                count += 1
                if count == 1:
                    self.backoff.reset()
        return count

    async def run(self) -> None:
        """List, then watch forever; recovers from every API error (cancel the task to stop)."""
        loop = asyncio.get_running_loop()
        need_list = True
        while True:
            failed: KubeError | None = None
            try:
                if need_list:
                    await self.list_once()
                    need_list = False
                    self.backoff.reset()
                started = loop.time()
                count = await self.watch_once()
                if count == 0 and loop.time() - started < MIN_WATCH_DURATION:
                    failed = KubeError(f"WATCH {self.path}: very short watch")
            except WatchStalled as exc:
                log.warning(
                    "%s: %s; restarting the watch from resourceVersion %s",
                    self.kind,
                    exc,
                    self.resource_version,
                )
                continue
            except KubeError as exc:
                if self.optional and exc.status in (403, 404):
                    self.not_served(exc)
                    need_list = True
                    await asyncio.sleep(self.discovery_interval)
                    continue
                if exc.gone and not need_list:
                    log.info(
                        "%s: resourceVersion %s expired (410); relisting", self.kind, self.resource_version
                    )
                    need_list = True
                    continue
                failed = exc
            except Exception as exc:  # a bug must not kill the informer; back off and start over
                log.exception("%s: unexpected informer error", self.kind)
                need_list = True
                failed = KubeError(f"{self.kind} informer: unexpected {type(exc).__name__}")
            if failed is not None:
                self.errors += 1
                self.last_error = str(failed)
                delay = self.backoff.next()
                if failed.retry_after is not None:
                    delay = max(delay, failed.retry_after)
                log.warning("%s: %s; retrying in %.1fs", self.kind, failed, delay)
                await asyncio.sleep(delay)


class Informers:
    """The five informers the controller needs, sharing one store and one invalid-object callback
    (Silences are optional: the controller runs without their CRD, see the module docstring).

    Secrets: every Secret of the watched namespaces is listed and watched *with its data* (Providers
    need tokens, addresses, CA bundles; Receivers need their token), except Helm release Secrets
    (``secret_field_selector``). That needs RBAC ``secrets: get, list, watch`` (cluster-wide with
    ``--watch-all-namespaces``). See docs/kubernetes.md.
    """

    def __init__(
        self,
        client: KubeClient,
        store: ObjectStore,
        *,
        namespace: str | None = None,
        on_invalid: InvalidCallback | None = None,
        secret_field_selector: str = DEFAULT_SECRET_FIELD_SELECTOR,
        secret_label_selector: str = "",
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
        watch_timeout_jitter: int = WATCH_TIMEOUT_JITTER,
        inactivity_grace: float = INACTIVITY_GRACE,
        backoff_factory: Callable[[], Backoff] | None = None,
        discovery_interval: float = DISCOVERY_INTERVAL,
    ) -> None:
        self.store = store

        def make(
            resource: ResourceType, field_selector: str = "", label_selector: str = "", optional: bool = False
        ) -> Informer:
            return Informer(
                client,
                store,
                resource,
                namespace=namespace,
                field_selector=field_selector,
                label_selector=label_selector,
                on_invalid=on_invalid,
                watch_timeout=watch_timeout,
                watch_timeout_jitter=watch_timeout_jitter,
                inactivity_grace=inactivity_grace,
                backoff=backoff_factory() if backoff_factory else None,
                optional=optional,
                discovery_interval=discovery_interval,
            )

        self.alerts = make(ALERTS)
        self.providers = make(PROVIDERS)
        self.receivers = make(RECEIVERS)
        self.secrets = make(SECRETS, secret_field_selector, secret_label_selector)
        self.silences = make(SILENCES, optional=True)
        self.all: tuple[Informer, ...] = (
            self.alerts,
            self.providers,
            self.receivers,
            self.secrets,
            self.silences,
        )

    @property
    def invalid(self) -> dict[InvalidKey, InvalidEntry]:
        merged: dict[InvalidKey, InvalidEntry] = {}
        for informer in self.all:
            merged.update(informer.invalid)
        return merged

    async def wait_synced(self) -> None:
        for informer in self.all:
            await informer.synced.wait()

    async def run(self) -> None:
        """Run all informers until cancelled; ``store.mark_synced()`` once each has listed once."""

        async def mark_synced() -> None:
            await self.wait_synced()
            self.store.mark_synced()
            log.info("object cache synced")
            release_free_memory()  # the first LIST of every kind built and dropped a lot (lib/memtrim.py)

        async with asyncio.TaskGroup() as group:
            for informer in self.all:
                group.create_task(informer.run(), name=f"informer-{informer.kind}")
            group.create_task(mark_synced(), name="informers-synced")
