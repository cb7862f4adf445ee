"""An in-memory ``Cluster`` that records every write and applies it back to an ``ObjectStore``.

This is the boundary port of the reconcilers, not the code under test: like the API server, it stores
the status and finalizers the controller writes (so the next reconcile sees them, and the store emits
the ``Change`` a watch would deliver), deletes an object being deleted once its last finalizer is gone,
and keeps the Events. ``fail_next`` scripts API errors (e.g. a 409 conflict) for fault tests.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jwt

from notification_controller.api.common import ObjectStatus, Secret
from notification_controller.api.objects import Object
from notification_controller.api.receiver import Receiver, ReceiverStatus
from notification_controller.api.silence import Silence, SilenceStatus
from notification_controller.errors import KubeError
from notification_controller.objects.base import ObjectRef, ObjectStore


@dataclass(frozen=True)
class RecordedEvent:
    ref: ObjectRef
    type: str
    reason: str
    message: str
    annotations: Mapping[str, str] | None = None


@dataclass
class RecordingCluster:
    store: ObjectStore
    status_patches: list[tuple[ObjectRef, dict[str, Any]]] = field(default_factory=list)
    finalizer_updates: list[tuple[ObjectRef, list[str]]] = field(default_factory=list)
    events: list[RecordedEvent] = field(default_factory=list)
    annotations: list[tuple[str, str, str, str, dict[str, str]]] = field(default_factory=list)
    fail_next: list[KubeError] = field(default_factory=list)
    service_accounts: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    token_requests: list[tuple[str, str, list[str], int]] = field(default_factory=list)
    deletions: list[ObjectRef] = field(default_factory=list)
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))

    # ---- helpers for tests --------------------------------------------------------------------------
    def events_for(self, name: str, *, kind: str | None = None) -> list[RecordedEvent]:
        return [e for e in self.events if e.ref.name == name and (kind is None or e.ref.kind == kind)]

    def patches_for(self, name: str, *, kind: str | None = None) -> list[dict[str, Any]]:
        return [p for r, p in self.status_patches if r.name == name and (kind is None or r.kind == kind)]

    def everything_written(self) -> str:
        """All text the controller sent to the cluster (for secret canary checks)."""
        parts = [repr(p) for _, p in self.status_patches]
        parts += [f"{e.type} {e.reason} {e.message} {e.annotations}" for e in self.events]
        return "\n".join(parts)

    def _maybe_fail(self) -> None:
        if self.fail_next:
            raise self.fail_next.pop(0)

    def _current(self, ref: ObjectRef) -> Object:
        obj = self.store.get(ref.kind, ref.namespace, ref.name)
        if obj is None:
            raise KubeError(f'{ref.kind.lower()}s "{ref.name}" not found', status=404)
        return obj

    def _bump(self, obj: Object, **meta_update: Any) -> Object:
        meta = obj.metadata.model_copy(update={"resource_version": str(next(self._rv)), **meta_update})
        return obj.model_copy(update={"metadata": meta})

    # ---- the Cluster port ---------------------------------------------------------------------------
    async def get_metadata(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        raise KubeError(f'{kind} "{namespace}/{name}" not found', status=404)

    async def list_metadata(
        self, api_version: str, kind: str, namespace: str, match_labels: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        return []

    async def annotate(
        self, api_version: str, kind: str, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> None:
        self.annotations.append((api_version, kind, namespace, name, dict(annotations)))

    async def patch_status(self, ref: ObjectRef, status: Mapping[str, Any]) -> None:
        self._maybe_fail()
        obj = self._current(ref)
        self.status_patches.append((ref, dict(status)))
        if isinstance(obj, Secret):
            raise KubeError("secrets have no status", status=422)
        current = obj.status.model_dump(by_alias=True, mode="json", exclude_none=True)
        merged = {**current, **status}  # JSON merge patch of the status object (lists replaced)
        model: type[ReceiverStatus] | type[ObjectStatus] | type[SilenceStatus] = (
            ReceiverStatus
            if isinstance(obj, Receiver)
            else SilenceStatus
            if isinstance(obj, Silence)
            else ObjectStatus
        )
        merged = {k: v for k, v in merged.items() if v is not None}  # merge-patch: null deletes
        updated = self._bump(obj).model_copy(update={"status": model.model_validate(merged)})
        self.store.upsert(updated)

    async def set_finalizers(self, ref: ObjectRef, finalizers: Sequence[str], resource_version: str) -> None:
        self._maybe_fail()
        obj = self._current(ref)
        if (
            resource_version
            and obj.metadata.resource_version
            and resource_version != obj.metadata.resource_version
        ):
            raise KubeError(
                "the object has been modified; please apply your changes to the latest version", status=409
            )
        self.finalizer_updates.append((ref, list(finalizers)))
        if obj.metadata.deletion_timestamp is not None and not finalizers:
            self.store.delete(ref.kind, ref.namespace, ref.name)
            return
        self.store.upsert(self._bump(obj, finalizers=list(finalizers)))

    async def emit_event(
        self, ref: ObjectRef, type_: str, reason: str, message: str, annotations: Mapping[str, str] | None
    ) -> None:
        self._maybe_fail()
        self.events.append(
            RecordedEvent(ref, type_, reason, message, dict(annotations) if annotations else None)
        )

    async def delete(self, ref: ObjectRef) -> None:
        """As the API server with a uid precondition: 404 when gone, 409 when the name has another uid."""
        self._maybe_fail()
        obj = self._current(ref)
        if ref.uid and obj.metadata.uid != ref.uid:
            raise KubeError("Precondition failed: UID in precondition does not match", status=409)
        self.deletions.append(ref)
        self.store.delete(ref.kind, ref.namespace, ref.name)

    # ---- workload identity: ServiceAccounts come from ``service_accounts`` (metadata by (ns, name)) ---------
    async def get_service_account(self, namespace: str, name: str) -> dict[str, Any]:
        metadata = self.service_accounts.get((namespace, name))
        if metadata is None:
            raise KubeError(f'serviceaccounts "{name}" not found', status=404)
        return dict(metadata)

    async def create_service_account_token(
        self, namespace: str, name: str, audiences: Sequence[str], expiration_seconds: int
    ) -> tuple[str, float]:
        """A JWT like the API server's (``sub``, ``aud``, ``exp``), HMAC-signed with a test key."""
        self._maybe_fail()
        await self.get_service_account(namespace, name)
        self.token_requests.append((namespace, name, list(audiences), expiration_seconds))
        expires = time.time() + expiration_seconds
        claims = {
            "iss": "https://kubernetes.default.svc",
            "sub": f"system:serviceaccount:{namespace}:{name}",
            "aud": list(audiences),
            "exp": int(expires),
            "jti": str(len(self.token_requests)),
        }
        return jwt.encode(claims, "recording-cluster-signing-key-0123456789", algorithm="HS256"), expires
