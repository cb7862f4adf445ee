"""The ``pre-dispatch`` phase: a pre-send stage of the dispatcher that lets hooks rewrite or drop a notification.

Runs per notification (one event × one matched Alert), after matching and metadata merge, before the
provider is called. Request::

    {"version": "v1", "phase": "pre-dispatch", "event": <the event as Flux's Go JSON>,
     "alert": <the Alert object>, "provider": {"name", "namespace", "type"}}

A 2xx answer ``{"event": {...}}`` replaces the event's ``message``, ``metadata`` and ``severity`` (the fields
present; others are ignored); ``{"drop": true}`` (optional ``"message"``) drops the notification; ``{}``,
``null`` or an empty body change nothing. The ``involvedObject`` is the notification's identity (it
decides commit statuses and routing): an answer that changes it is rejected — the notification is
dropped with a Warning, as for any invalid answer. Errors follow ``docs/hooks.md``: non-permanent ones
are retried with backoff within the hook's timeout; ``continue: true`` goes on unchanged; otherwise the
notification is dropped — unless the hook says ``failurePolicy: Ignore``, then it goes on unchanged
(``chain``). Every drop is ``Drop(reason="hook", warn=True)``: counted in
``notification_dropped_total{reason="hook"}`` and a Warning Event ``NotificationDropped`` on the Alert; a
veto (``drop: true``) is logged at info, a failed hook at error (``failure=True``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from ..api.event import SEVERITY_ERROR, SEVERITY_INFO, SEVERITY_TRACE, Event, EventDecodeError
from ..api.hooks import HookCapability
from ..dispatch.model import Delivery, Drop, DropReason
from .chain import Applied, Chain, Stopped, invalid
from .client import HookTarget
from .metrics import Outcome
from .registry import BoundHook, HookSet

PHASE = HookCapability.PRE_DISPATCH.value
DROP_REASON = DropReason.HOOK
SEVERITIES = frozenset({SEVERITY_INFO, SEVERITY_ERROR, SEVERITY_TRACE})


class PreDispatchHooks:
    """A pre-send stage of the pipeline (``dispatch.builder.build(..., hooks=[PreDispatchHooks(...)])``)."""

    def __init__(self, hooks: HookSet, chain: Chain) -> None:
        self.name = "hooks"
        self.hooks = hooks
        self.chain = chain

    async def __call__(self, notification: Delivery) -> Delivery | Drop:
        hooks = self.hooks.for_notification(notification.alert, notification.provider)
        if not hooks:
            return notification
        alert = notification.alert.model_dump(by_alias=True, mode="json", exclude_none=True)
        provider = notification.provider
        provider_ref = {
            "name": provider.metadata.name,
            "namespace": provider.metadata.namespace,
            "type": str(provider.spec.type),
        }

        def request(event: Event) -> dict[str, Any]:
            return {
                "version": "v1",
                "phase": PHASE,
                "event": orjson.loads(event.to_go_json()),
                "alert": alert,
                "provider": provider_ref,
            }

        result = await self.chain.run(
            PHASE, hooks, notification.event, request=request, apply=apply_answer, retry=True
        )
        described = notification.event.involved_object.describe()
        if result.failure is not None:
            message = f"notification for {described} dropped: {result.failure}"
            return Drop(DROP_REASON, message, warn=True, failure=True)
        if result.stopped is not None:
            assert result.hook is not None
            detail = f": {result.stopped.message}" if result.stopped.message else ""
            message = f"notification for {described} dropped by hook '{result.hook.name}'{detail}"
            return Drop(DROP_REASON, message, warn=True)
        if result.state == notification.event:
            return notification
        return dataclasses.replace(notification, event=result.state)


def apply_answer(
    bound: BoundHook, target: HookTarget, event: Event, answer: Any
) -> Applied[Event] | Stopped[Event]:
    """One hook's 2xx answer applied to the event (see the module docstring). Raises ``HookCallError``."""
    if answer is None:
        return Applied(event, False)
    if not isinstance(answer, dict):
        raise invalid(bound, "the answer must be a JSON object")
    drop = answer.get("drop")
    if drop is not None and not isinstance(drop, bool):
        raise invalid(bound, "'drop' must be a boolean")
    if drop:
        message = answer.get("message")
        text = target.mask(message.strip()[:1024]) if isinstance(message, str) else ""
        return Stopped(event, Outcome.DROPPED, text)
    raw = answer.get("event")
    if raw is None:
        return Applied(event, False)
    if not isinstance(raw, dict):
        raise invalid(bound, "'event' must be a JSON object")
    update: dict[str, Any] = {}
    if "involvedObject" in raw:
        try:
            returned = Event.from_raw({"involvedObject": raw["involvedObject"]}).involved_object
        except EventDecodeError:
            raise invalid(bound, "'event.involvedObject' is not an object reference") from None
        if returned != event.involved_object:
            raise invalid(bound, "the event's involvedObject may not change")
    if "message" in raw:
        if not isinstance(raw["message"], str):
            raise invalid(bound, "'event.message' must be a string")
        update["message"] = raw["message"]
    if "severity" in raw:
        if raw["severity"] not in SEVERITIES:
            raise invalid(bound, "'event.severity' must be one of info, error, trace")
        update["severity"] = raw["severity"]
    if "metadata" in raw:
        metadata = raw["metadata"]
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise invalid(bound, "'event.metadata' must be an object of strings")
        update["metadata"] = dict(metadata)
    new = event.model_copy(update=update) if update else event
    return Applied(new, new != event)
