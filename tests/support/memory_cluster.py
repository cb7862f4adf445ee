"""A recording, in-memory ``Cluster`` (the port to the API server) for receiver-server tests.

Not a fake of the code under test: the receiver server's boundary is the ``Cluster`` protocol, and this is a
small, honest implementation of it — objects live in a dict keyed by (API group, kind, namespace, name), so
like the API server any version of a group serves the same object; ``annotate`` merges annotations into the
stored object (a JSON merge patch of ``metadata.annotations``) and records the call; ``list_metadata``
filters by labels. Faults are injected per object or per operation with ``fail``: the next matching calls
raise ``KubeError(status=...)`` (the text of a Kubernetes error), or hang for ``delay`` seconds.

The e2e suite runs the same server against the real kube-apiserver.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from notification_controller.errors import KubeError
from notification_controller.objects.base import ObjectRef

Key = tuple[str, str, str, str]  # (group, kind, namespace, name)


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


@dataclass
class Fault:
    op: str  # get | list | annotate | * (any)
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    status: int = 500
    times: int | None = None  # None = forever
    delay: float = 0.0  # hang this long instead of failing (0 = fail)

    def matches(self, op: str, kind: str, namespace: str, name: str | None) -> bool:
        return (
            self.op in ("*", op)
            and self.kind in (None, kind)
            and self.namespace in (None, namespace)
            and (self.name is None or self.name == name)
        )


@dataclass
class AnnotateCall:
    api_version: str
    kind: str
    namespace: str
    name: str
    annotations: dict[str, str]


@dataclass
class MemoryCluster:
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    annotate_calls: list[AnnotateCall] = field(default_factory=list)
    calls: list[tuple[str, str, str, str]] = field(default_factory=list)  # (op, kind, namespace, name)
    faults: list[Fault] = field(default_factory=list)
    status_patches: list[tuple[ObjectRef, dict[str, Any]]] = field(default_factory=list)
    events: list[tuple[ObjectRef, str, str, str]] = field(default_factory=list)

    # ---- setup ------------------------------------------------------------------------------------
    def add(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{kind.lower()}-{namespace}-{name}",
                "labels": dict(labels or {}),
                "annotations": dict(annotations or {}),
            },
        }
        self.objects[(_group(api_version), kind, namespace, name)] = obj
        return obj

    def fail(
        self, op: str, *, status: int = 500, times: int | None = None, delay: float = 0.0, **where: str
    ) -> Fault:
        fault = Fault(op, where.get("kind"), where.get("namespace"), where.get("name"), status, times, delay)
        self.faults.append(fault)
        return fault

    def annotation(self, kind: str, namespace: str, name: str, key: str) -> str | None:
        for (_, k, ns, n), obj in self.objects.items():
            if (k, ns, n) == (kind, namespace, name):
                value = obj["metadata"]["annotations"].get(key)
                return None if value is None else str(value)
        return None

    def annotated(self) -> list[tuple[str, str, str]]:
        """(kind, namespace, name) of every annotate call, in order."""
        return [(c.kind, c.namespace, c.name) for c in self.annotate_calls]

    # ---- faults -----------------------------------------------------------------------------------
    async def _check(self, op: str, kind: str, namespace: str, name: str | None) -> None:
        self.calls.append((op, kind, namespace, name or ""))
        for fault in self.faults:
            if fault.times == 0 or not fault.matches(op, kind, namespace, name):
                continue
            if fault.times is not None:
                fault.times -= 1
            if fault.delay:
                await asyncio.sleep(fault.delay)
                return
            reason = {403: "Forbidden", 404: "NotFound", 409: "Conflict"}.get(fault.status, "InternalError")
            raise KubeError(
                f"{kind.lower()}s {name!r} is {reason} (status {fault.status})", status=fault.status
            )

    # ---- the Cluster protocol ---------------------------------------------------------------------
    async def get_metadata(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        await self._check("get", kind, namespace, name)
        obj = self.objects.get((_group(api_version), kind, namespace, name))
        if obj is None:
            raise KubeError(f'{kind.lower()}s "{name}" not found', status=404)
        return copy.deepcopy(obj)

    async def list_metadata(
        self, api_version: str, kind: str, namespace: str, match_labels: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        await self._check("list", kind, namespace, None)
        group = _group(api_version)
        out = []
        for (g, k, ns, _), obj in sorted(self.objects.items()):
            labels = obj["metadata"]["labels"]
            if (g, k, ns) == (group, kind, namespace) and all(
                labels.get(a) == b for a, b in match_labels.items()
            ):
                out.append(copy.deepcopy(obj))
        return out

    async def annotate(
        self, api_version: str, kind: str, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> None:
        await self._check("annotate", kind, namespace, name)
        obj = self.objects.get((_group(api_version), kind, namespace, name))
        if obj is None:
            raise KubeError(f'{kind.lower()}s "{name}" not found', status=404)
        obj["metadata"]["annotations"].update(annotations)
        self.annotate_calls.append(AnnotateCall(api_version, kind, namespace, name, dict(annotations)))

    async def patch_status(self, ref: ObjectRef, status: Mapping[str, Any]) -> None:
        self.status_patches.append((ref, dict(status)))

    async def set_finalizers(self, ref: ObjectRef, finalizers: Sequence[str], resource_version: str) -> None:
        return None

    async def emit_event(
        self, ref: ObjectRef, type_: str, reason: str, message: str, annotations: Mapping[str, str] | None
    ) -> None:
        self.events.append((ref, type_, reason, message))

    async def delete(self, ref: ObjectRef) -> None:
        raise KubeError(f'{ref.kind.lower()}s "{ref.name}" not found', status=404)

    async def get_service_account(self, namespace: str, name: str) -> dict[str, Any]:
        """ServiceAccounts are objects added with ``add("v1", "ServiceAccount", ...)``."""
        await self._check("get", "ServiceAccount", namespace, name)
        obj = self.objects.get(("", "ServiceAccount", namespace, name))
        if obj is None:
            raise KubeError(f'serviceaccounts "{name}" not found', status=404)
        return copy.deepcopy(obj["metadata"])

    async def create_service_account_token(
        self, namespace: str, name: str, audiences: Sequence[str], expiration_seconds: int
    ) -> tuple[str, float]:
        await self.get_service_account(namespace, name)
        await self._check("token", "ServiceAccount", namespace, name)
        return f"token-{namespace}-{name}-{','.join(audiences)}", time.time() + expiration_seconds
