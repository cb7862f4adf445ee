"""The ``pre-reconcile`` and ``finalize`` phases, for the reconcilers (sync-handler semantics, seed 004).

Request (both phases)::

    {"version": "v1", "phase": "pre-reconcile" | "finalize", "object": <the object, status included>,
     "children": <what the object points at>}

``children``: Receiver → ``{"resources": [resolved target references], "webhookPath": "/hook/..."}``;
Alert → ``{"providerRef": {...}}``; Provider → for each of ``secretRef``/``certSecretRef``/``proxySecretRef``
that is set, ``{"name", "found", "keys": [key names]}`` — never a value.

``pre-reconcile`` answer ``{"object": {"status": {"conditions": [...]}}}``: only ``.status.conditions`` is
read. Each returned condition is stored on the object (``Ready``, ``Reconciling`` and ``Stalled`` belong to
the controller: a returned ``Ready`` only counts as a vote, the other two are ignored); the first one that
is not ``True`` makes the object ``Ready=False`` with that condition's reason and message and ends the
chain. ``null`` or absent at any level means "no change". ``lastTransitionTime`` and ``observedGeneration``
are always the controller's. The next hook of the chain sees the object with the conditions applied.

``finalize`` answer: any 2xx (the body is not read). ``continue: true`` in an error answer also lets the
deletion go on. A ``permanent: true`` error is not retried (the reconciler reports it as Stalled and says
what to do); any other error is retried with backoff.

Every returned condition gets a ``message``: the CRD requires one, so a hook that omits it (as Scoby's
examples do for ``True``) gets ``hook '<name>' reported <type>=<status>`` instead of a status write the
API server refuses with 422.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api import GROUP, PROVIDER_VERSION
from ..api.alert import Alert
from ..api.common import ConditionStatus
from ..api.hooks import HookCapability
from ..api.provider import Provider
from ..api.receiver import Receiver
from ..core import conditions as cond
from ..lib.clock import Clock, rfc3339
from ..objects.base import ObjectStore
from ..receivers.targets import DEFAULT_API_VERSIONS
from .chain import Applied, Chain, Stopped, invalid
from .client import HookCallError, HookTarget
from .metrics import Outcome
from .registry import BoundHook, HookedObject, HookSet

CONTROLLER_CONDITIONS = frozenset({cond.READY, cond.RECONCILING, cond.STALLED})
IGNORED_CONDITIONS = frozenset({cond.RECONCILING, cond.STALLED})
DEFAULT_REASON = "ReportedByHook"
_TYPE_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_REASON_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


@dataclass(frozen=True)
class HookCondition:
    """A condition a hook returned (validated; reason and message defaulted)."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


@dataclass(frozen=True)
class _State:
    object: dict[str, Any]
    conditions: tuple[HookCondition, ...] = ()
    veto: HookCondition | None = None


@dataclass
class PreReconcileResult:
    conditions: list[HookCondition] = field(default_factory=list)  # to store, in order
    veto: HookCondition | None = None  # the first non-True condition: Ready=False with its reason/message
    failure: HookCallError | None = None
    hook: str = ""  # the hook that vetoed or failed


# --------------------------------------------------------------------------------------------- children


def receiver_children(receiver: Receiver, webhook_path: str | None) -> dict[str, Any]:
    """The resolved target references (defaults applied) and the webhook path."""
    ns = receiver.metadata.namespace
    resources: list[dict[str, Any]] = []
    for resource in receiver.spec.resources:
        kind = str(resource.kind)
        ref: dict[str, Any] = {
            "apiVersion": resource.api_version or DEFAULT_API_VERSIONS.get(kind, ""),
            "kind": kind,
            "name": resource.name,
            "namespace": resource.namespace or ns,
        }
        if resource.match_labels:
            ref["matchLabels"] = dict(resource.match_labels)
        resources.append(ref)
    return {"resources": resources, "webhookPath": webhook_path or ""}


def alert_children(alert: Alert) -> dict[str, Any]:
    return {
        "providerRef": {
            "apiVersion": f"{GROUP}/{PROVIDER_VERSION}",
            "kind": "Provider",
            "name": alert.spec.provider_ref.name,
            "namespace": alert.metadata.namespace,
        }
    }


def provider_children(provider: Provider, store: ObjectStore) -> dict[str, Any]:
    """Names of the keys of the Provider's Secrets — never their values."""
    ns, spec = provider.metadata.namespace, provider.spec
    out: dict[str, Any] = {}
    for field_name, ref in (
        ("secretRef", spec.secret_ref),
        ("certSecretRef", spec.cert_secret_ref),
        ("proxySecretRef", spec.proxy_secret_ref),
    ):
        if ref is None:
            continue
        secret = store.secret(ns, ref.name)
        out[field_name] = {
            "name": ref.name,
            "found": secret is not None,
            "keys": secret.keys() if secret is not None else [],
        }
    return out


# --------------------------------------------------------------------------------------------- answers


def parse_conditions(bound: BoundHook, target: HookTarget, answer: Any) -> list[HookCondition] | None:
    """``.object.status.conditions`` of a pre-reconcile answer; None when absent or null at any level."""
    node: Any = answer
    for key in ("object", "status", "conditions"):
        if node is None:
            return None
        if not isinstance(node, dict):
            raise invalid(bound, f"expected a JSON object around '{key}'")
        node = node.get(key)
    if node is None:
        return None
    if not isinstance(node, list):
        raise invalid(bound, "'object.status.conditions' must be a list")
    out: list[HookCondition] = []
    for i, raw in enumerate(node):
        where = f"'object.status.conditions[{i}]'"
        if not isinstance(raw, dict):
            raise invalid(bound, f"{where} must be an object")
        type_, status = raw.get("type"), raw.get("status")
        if not isinstance(type_, str) or len(type_) > 316 or not _TYPE_RE.match(type_):
            raise invalid(bound, f"{where}.type must be a condition type")
        if status not in ("True", "False", "Unknown"):
            raise invalid(bound, f"{where}.status must be True, False or Unknown")
        reason = raw.get("reason") or DEFAULT_REASON
        if not isinstance(reason, str) or len(reason) > 1024 or not _REASON_RE.match(reason):
            raise invalid(bound, f"{where}.reason must match {_REASON_RE.pattern}")
        message = raw.get("message") or ""
        if not isinstance(message, str):
            raise invalid(bound, f"{where}.message must be a string")
        if not message.strip():  # the CRD requires a message, True conditions included (Scoby sends none)
            message = f"hook '{bound.name}' reported {type_}={status}"
        message = target.mask(message[: cond.MAX_MESSAGE])
        out.append(HookCondition(type_, ConditionStatus(status), reason, message))
    return out


class ReconcileHooks:
    """What the reconcilers call (``Reconciler.hooks``)."""

    def __init__(self, hooks: HookSet, chain: Chain, clock: Clock) -> None:
        self.hooks = hooks
        self.chain = chain
        self.clock = clock

    def applies(self, obj: HookedObject, capability: HookCapability) -> bool:
        return self.hooks.applies(obj, capability)

    @staticmethod
    def _request(phase: str, children: Mapping[str, Any]) -> Any:
        def build(state: _State) -> dict[str, Any]:
            return {"version": "v1", "phase": phase, "object": state.object, "children": children}

        return build

    async def pre_reconcile(self, obj: HookedObject, children: Mapping[str, Any]) -> PreReconcileResult:
        phase = HookCapability.PRE_RECONCILE.value
        hooks = self.hooks.for_object(obj, HookCapability.PRE_RECONCILE)
        generation = obj.metadata.generation
        now = rfc3339(self.clock.now())

        def apply(
            bound: BoundHook, target: HookTarget, state: _State, answer: Any
        ) -> Applied[_State] | Stopped[_State]:
            returned = parse_conditions(bound, target, answer)
            if not returned:
                return Applied(state, False)
            obj_json = copy.deepcopy(state.object)
            current = obj_json.setdefault("status", {}).setdefault("conditions", [])
            changed = False
            for c in returned:
                if c.type in IGNORED_CONDITIONS:
                    continue
                entry = {
                    "type": c.type,
                    "status": c.status.value,
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": now,
                    "observedGeneration": generation,
                }
                old = next((x for x in current if x.get("type") == c.type), None)
                if old is not None:
                    if (old.get("status"), old.get("reason"), old.get("message", "")) != (
                        c.status.value,
                        c.reason,
                        c.message,
                    ):
                        changed = True
                        old.update(entry)
                else:
                    changed = True
                    current.append(entry)
            kept = tuple(c for c in returned if c.type not in IGNORED_CONDITIONS)
            veto = next((c for c in kept if c.status != ConditionStatus.TRUE), None)
            new = _State(obj_json, state.conditions + kept, veto)
            if veto is not None:
                return Stopped(new, Outcome.CHANGED, veto.message)
            return Applied(new, changed)

        obj_json = obj.model_dump(by_alias=True, mode="json", exclude_none=True)
        result = await self.chain.run(
            phase, hooks, _State(obj_json), request=self._request(phase, children), apply=apply, retry=False
        )
        out = PreReconcileResult(hook=result.hook.name if result.hook else "")
        merged: dict[str, HookCondition] = {}
        for c in result.state.conditions:
            merged[c.type] = c
        out.conditions = [c for c in merged.values() if c.type not in CONTROLLER_CONDITIONS]
        if result.failure is not None:
            out.failure = result.failure
        elif result.stopped is not None:
            out.veto = result.state.veto
        return out

    async def finalize(
        self, obj: HookedObject, children: Mapping[str, Any]
    ) -> tuple[BoundHook, HookCallError] | None:
        """Call every ``finalize`` hook; None when all answered 2xx (or asked to continue), else the hook that
        failed (where it was declared: the advice for a permanent error depends on it) and its error."""
        phase = HookCapability.FINALIZE.value
        hooks = self.hooks.for_object(obj, HookCapability.FINALIZE)

        def apply(bound: BoundHook, target: HookTarget, state: _State, answer: Any) -> Applied[_State]:
            return Applied(state, False)

        obj_json = obj.model_dump(by_alias=True, mode="json", exclude_none=True)
        result = await self.chain.run(
            phase, hooks, _State(obj_json), request=self._request(phase, children), apply=apply, retry=False
        )
        if result.failure is not None and result.hook is not None:
            return result.hook, result.failure
        return None
