"""The template stage (pre-send): an Alert's ``spec.template`` and a Provider's ``spec.bodyTemplate``.

It runs in the lane, on the notification resolved against the current Alert and Provider, after the
pre-dispatch hooks (a hook's annotations and metadata reach the template). The title and message become
the delivery's ``Message``, which every chat and incident provider renders; the body template becomes the
whole request body of a generic Provider (still signed for generic-hmac).

A render that fails never loses the notification: the default message (or body) is sent, a Warning Event
``TemplateRenderFailed`` says why on the Alert, and ``notification_template_errors_total{template}`` counts
it. Rendering is bounded (``core/templates.py``) and, in the controller, runs in the sandbox's worker
processes (``sandbox/``: a wall timeout and an address-space limit; issue 23), so one tenant's template can
neither freeze the event loop nor exhaust the controller's memory. A render the sandbox refuses (timeout,
memory, quarantined, overload) takes the same path as a failed one: the default is sent, the Alert gets
``TemplateRenderFailed``, and ``notification_sandbox_failures_total{kind="template",reason}`` counts it.
Without a sandbox (unit tests, the ``explain`` command) the same bounded render runs in process.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import orjson

from ..api.alert import Alert
from ..api.provider import Provider
from ..core.noise import OCCURRENCES
from ..providers.message import Message
from ..sandbox import SandboxFailure, SandboxPool
from .model import Delivery, Drop

log = logging.getLogger(__name__)

TEMPLATE_RENDER_FAILED = "TemplateRenderFailed"
MAX_BODY_OUTPUT = (
    256 * 1024
)  # core.templates.MAX_BODY_OUTPUT (not imported: Jinja2 stays unloaded until used)


def _object(obj: Alert | Provider) -> dict[str, Any]:
    meta = obj.metadata
    return {
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "labels": dict(meta.labels or {}),
            "annotations": dict(meta.annotations or {}),
        },
        "spec": obj.spec.dump(),  # references to Secrets are names; their values are never here
    }


def variables(delivery: Delivery) -> dict[str, Any]:
    """What a template sees (docs/templates.md)."""
    event = delivery.event
    group = delivery.notification.group
    count = event.metadata.get(OCCURRENCES, "")
    return {
        "event": event.as_cel(),
        "alert": _object(delivery.alert),
        "provider": _object(delivery.provider),
        "events": [{"object": o, "severity": s, "message": m} for o, s, m in group],
        "count": int(count) if count.isdigit() else (len(group) or 1),
    }


class TemplateStage:
    name = "template"

    def __init__(
        self,
        counted: Callable[[str], None],
        warn: Callable[[Alert, str, str], None],
        sandbox: SandboxPool | None = None,
    ) -> None:
        self.counted = counted  # counted("title"|"message"|"body"): the error metric
        self.warn = warn
        self.sandbox = sandbox

    async def __call__(self, delivery: Delivery) -> Delivery | Drop:
        template = delivery.alert.spec.template
        body_source = delivery.provider.spec.body_template
        if template is None and not body_source:
            return delivery  # Flux's path: nothing to do
        values = variables(delivery)
        if template is not None and (template.title or template.message):
            base = delivery.message or Message.of(delivery.event)
            title = await self._render(delivery, "title", template.title, values) if template.title else None
            text = (
                await self._render(delivery, "message", template.message, values)
                if template.message
                else None
            )
            if title is not None or text is not None:
                message = dataclasses.replace(
                    base,
                    title=title if title is not None else base.title,
                    text=text if text is not None else base.text,
                )
                delivery = dataclasses.replace(delivery, message=message, templated=True)
        if body_source:
            body = await self._render(delivery, "body", body_source, values, limit=MAX_BODY_OUTPUT, json=True)
            if body is not None:
                delivery = dataclasses.replace(delivery, body=body.encode("utf-8"))
        return delivery

    async def _render(
        self,
        delivery: Delivery,
        which: str,
        source: str,
        values: dict[str, Any],
        *,
        limit: int | None = None,
        json: bool = False,
    ) -> str | None:
        from ..core.templates import MAX_MESSAGE_OUTPUT, TemplateError, render  # Jinja2 on first use

        try:
            if self.sandbox is not None:
                out = await self.sandbox.render(
                    source,
                    values,
                    namespace=delivery.alert.metadata.namespace,
                    limit=limit or MAX_MESSAGE_OUTPUT,
                    kind="body" if which == "body" else "template",
                )
            else:
                out = render(source, values, limit=limit) if limit else render(source, values)
            if json:
                try:
                    orjson.loads(out)
                except orjson.JSONDecodeError as exc:
                    raise TemplateError(f"the rendered body is not valid JSON: {exc}") from None
            return out
        except (TemplateError, SandboxFailure) as exc:
            self.counted(which)
            field = "spec.bodyTemplate" if which == "body" else f"spec.template.{which}"
            owner = "Provider" if which == "body" else "Alert"
            self.warn(
                delivery.alert,
                TEMPLATE_RENDER_FAILED,
                f"{owner} {field} could not be rendered for {delivery.event.involved_object.describe()}, "
                f"the default was sent: {exc}",
            )
            return None
