"""The Alert reconciler: Flux's finalizer migration (reference §6.1) plus a status Flux does not have.

Flux's ``AlertReconciler`` only removes the finalizer older versions added (Normal event ``Migration``).
We keep that, and also report whether the Alert can work, in ``status.conditions``:

=========================  ==================================================================
Ready=True  Succeeded      "Alert is ready"
Ready=False ValidationFailed   an inclusion/exclusion list is over its bounds (``api/alert.py``: the CRD's
                               maxItems/maxLength, checked here for API servers that did not apply them;
                               the dispatcher delivers nothing for such an Alert), or an expression does
                               not compile with RE2 (terminal)
Ready=False InvalidCELExpression  ``spec.filter`` does not compile (terminal)
Ready=False InvalidTemplate    ``spec.template.title``/``message`` does not compile (terminal; line named)
Ready=False AccessDenied       ``--no-cross-namespace-refs`` is set and an event source names another
                               namespace (terminal: such events would be refused at dispatch, §3.7)
Ready=False ProviderNotFound   ``spec.providerRef`` names no Provider in the Alert's namespace
Ready=False ProviderNotReady   the Provider is not Ready (its message is quoted)
Ready=Unknown ProviderNotReady the Provider has not been reconciled yet (transient, no Event)
=========================  ==================================================================

The Alert follows its Provider: a Provider change (including its status) re-enqueues the Alerts that
reference it, through a Provider → Alerts reverse index fed by store changes. A suspended Provider is
treated as working (suspension is deliberate; the Alert's configuration is fine).

An Alert with noise-control fields also gets a ``NoiseControl`` condition (True, ``Active``) whose message
says what takes effect, e.g. "filter; threshold 3 within 10m; state changes only; grouped by [reason]
(wait 30s, interval 5m)": the settings are visible, never silent (docs/noise-control.md).

While a Silence or the Alert's mute window holds notifications, a ``Held`` condition (True, ``Silenced`` or
``Muted``) says how many, by what and until when (``held``: ``dispatch/quiet``'s ``Quiet.status``, read from
the store, so every replica's holds count). The quiet stages ask for a reconcile at most every 10 s per Alert;
while something is held the Alert is reconciled again every ``HELD_REFRESH`` (docs/silences.md).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from ..api import FINALIZER
from ..api.alert import Alert
from ..api.common import ConditionStatus
from ..core import conditions as cond
from ..core.matching import compile_error, filter_error
from ..errors import StoreError
from ..hooks.reconcile import alert_children
from ..objects.base import Key, ObjectRef
from .base import DONE, Result, StatusDraft, TemplateReconciler
from .events import NORMAL

log = logging.getLogger(__name__)

ACCESS_DENIED = "AccessDenied"
MIGRATION = "Migration"
MIGRATION_MESSAGE = "removed finalizer from Alert to migrate to static Alert"
READY_MESSAGE = "Alert is ready"
INVALID_CEL = "InvalidCELExpression"
INVALID_TEMPLATE = "InvalidTemplate"


def alert_template_error(alert: Alert) -> str | None:
    """Why ``spec.template`` does not compile (the field and the line), or None."""
    template = alert.spec.template
    if template is None:
        return None
    from ..core.templates import template_error  # Jinja2 on first use

    for field, source in (("title", template.title), ("message", template.message)):
        if (why := template_error(source)) is not None:
            return f"spec.template.{field}: {why}"
    return None


NOISE_CONTROL = "NoiseControl"
NOISE_ACTIVE = "Active"
HELD = "Held"
HELD_REFRESH = 60.0
"""Seconds between two reconciles of an Alert while notifications are held (the count and the end follow)."""


def noise_summary(alert: Alert) -> str:
    """What the Alert's noise-control fields do, in one line (empty for a Flux Alert)."""
    spec = alert.spec
    parts: list[str] = []
    if spec.filter:
        parts.append("filter")
    if spec.threshold is not None:
        parts.append(f"threshold {spec.threshold.count} within {spec.threshold.within}")
    if spec.notify_on == "StateChange":
        parts.append("state changes only")
    if spec.repeat_interval:
        parts.append(f"repeat at most every {spec.repeat_interval}")
    if spec.group_by is not None:
        parts.append(
            f"grouped by [{', '.join(spec.group_by)}] "
            f"(wait {spec.group_wait or '30s'}, interval {spec.group_interval or '5m'})"
        )
    if spec.thread_by is not None:
        parts.append(f"threads by {spec.thread_by}")
    return "; ".join(parts)


def regex_error(alert: Alert) -> str | None:
    """Lists over their bounds, else the first expression RE2 cannot compile, in the event server's words
    (§6.4). The bounds come first: an over-long list is not compiled at all."""
    errors = alert.spec.validation_errors()
    if errors:
        return "; ".join(errors)
    for name, expressions in (
        ("inclusion", alert.spec.inclusion_list),
        ("exclusion", alert.spec.exclusion_list),
    ):
        for expression in expressions or []:
            why = compile_error(expression)
            if why:  # Flux's words, then RE2's reason: the user sees what to fix
                return f"failed to compile {name} regex: {expression} ({why})"
    return None


_SPEC_FIELD = re.compile(r"^(spec\.[A-Za-z0-9_.\[\]]*[A-Za-z0-9_\]])")
MAX_MESSAGE_ERRORS = 10
"""Most errors a Ready=False message lists (then "and N more"): a status message is bounded."""


def field_of(message: str, default: str = "spec") -> str:
    """The ``spec.…`` field a validation message starts with, else ``default``."""
    match = _SPEC_FIELD.match(message)
    return match.group(1) if match else default


def alert_errors(alert: Alert) -> list[tuple[str, str, str]]:
    """Every error of ``alert`` as (reason, field, message), in the order the reconciler reports them:
    the CRD's bounds, each RE2 expression that does not compile, ``spec.filter`` (CEL, a bool over the
    event's fields), each template (issue 25 item 4: all of them, not the first). ``check`` prints each;
    the reconciler lists them in one Ready=False message with the first one's reason."""
    errors = [(cond.VALIDATION_FAILED, field_of(m), m) for m in alert.spec.validation_errors()]
    if not errors:  # an over-long list is not compiled at all
        for name, field, expressions in (
            ("inclusion", "inclusionList", alert.spec.inclusion_list),
            ("exclusion", "exclusionList", alert.spec.exclusion_list),
        ):
            for i, expression in enumerate(expressions or []):
                why = compile_error(expression)
                if why:  # Flux's words, then RE2's reason
                    message = f"failed to compile {name} regex: {expression} ({why})"
                    errors.append((cond.VALIDATION_FAILED, f"spec.{field}[{i}]", message))
    if alert.spec.filter and (why := filter_error(alert.spec.filter)) is not None:
        errors.append((INVALID_CEL, "spec.filter", why))
    template = alert.spec.template
    if template is not None:
        from ..core.templates import template_error  # Jinja2 on first use

        for field, source in (("title", template.title), ("message", template.message)):
            if (why := template_error(source)) is not None:
                errors.append((INVALID_TEMPLATE, f"spec.template.{field}", f"spec.template.{field}: {why}"))
    return errors


def joined(messages: list[str]) -> str:
    """Messages for one status condition: all of them up to ``MAX_MESSAGE_ERRORS``, then a count."""
    shown = messages[:MAX_MESSAGE_ERRORS]
    more = len(messages) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")


def cross_namespace_error(alert: Alert) -> str | None:
    ns = alert.metadata.namespace
    for i, source in enumerate(alert.spec.event_sources):
        if source.namespace and source.namespace != ns:
            return (
                f"cross-namespace references are not allowed: eventSources[{i}] "
                f"{source.kind}/{source.namespace}/{source.name} is not in namespace '{ns}'"
            )
    return None


class AlertReconciler(TemplateReconciler[Alert]):
    kind = "Alert"
    watched_kind = "Provider"
    logger = log
    suspended_log = "reconciliation is suspended for this object: %s"
    ready_message = READY_MESSAGE
    held: Callable[[Alert], Awaitable[tuple[str, str] | None]] | None = None
    """What is held for an Alert now, as (reason, message) (``Quiet.status``); set by the composition root."""

    # ---- watches ----------------------------------------------------------------------------------
    def references(self, obj: Alert) -> list[Key]:
        return [(obj.metadata.namespace, obj.spec.provider_ref.name)]

    # ---- reconcile (the template's hooks) ---------------------------------------------------------
    def load(self, key: Key) -> Alert | None:
        return self.store.alert(*key)

    def children(self, obj: Alert, draft: StatusDraft) -> dict[str, Any]:
        return alert_children(obj)

    def left_alone(self, obj: Alert) -> bool:
        """A suspended Alert that still has Flux's finalizer keeps it (and its status) until resumed."""
        if self.has_finalizer(obj) and obj.spec.suspend:
            log.info(self.suspended_log, self.describe(obj))
            return True
        return False

    async def ensure_finalizers(self, obj: Alert) -> bool:
        """Flux's finalizer goes (migration); the hooks' one comes when a finalize hook applies. One write,
        and the reconcile goes on: everything an Alert depends on is watched, no requeue is needed."""
        written = await self.sync_finalizers(obj, flux=False)
        if written is not None and self.has_finalizer(obj):
            await self._migrated(obj)
        return False

    async def finalizers_removed(self, obj: Alert, removed: list[str]) -> None:
        if FINALIZER in removed:
            await self._migrated(obj)

    async def _migrated(self, obj: Alert) -> None:
        await self.recorder.event(ObjectRef.of(obj), NORMAL, MIGRATION, MIGRATION_MESSAGE)

    async def evaluate(self, obj: Alert, draft: StatusDraft) -> Result:
        """Always DONE: everything an Alert depends on is watched, no periodic requeue is needed."""
        generation = obj.metadata.generation
        errors = alert_errors(obj)
        if self.no_cross_namespace_refs and (error := cross_namespace_error(obj)) is not None:
            errors.append((ACCESS_DENIED, "spec.eventSources", error))
        if errors:  # every error, the first one's reason (and Flux's message first where Flux has one)
            draft.mark_terminal(errors[0][0], joined([message for _, _, message in errors]), generation)
            return DONE
        summary = noise_summary(obj)
        if summary:
            draft.conditions.mark_true(NOISE_CONTROL, NOISE_ACTIVE, summary)
        else:
            draft.conditions.delete(NOISE_CONTROL)
        done = await self._held(obj, draft)

        draft.conditions.mark_reconciling()
        ns, name = obj.metadata.namespace, obj.spec.provider_ref.name
        provider = self.store.provider(ns, name)
        if provider is None:
            draft.conditions.mark_false(
                cond.READY, cond.PROVIDER_NOT_FOUND, f"Provider '{name}' not found in namespace '{ns}'"
            )
            return done
        if provider.spec.suspend:
            draft.conditions.mark_true(cond.READY, cond.SUCCEEDED, READY_MESSAGE)
            return done
        ready = cond.find(provider.status.conditions, cond.READY)
        if ready is None or (
            ready.observed_generation is not None
            and ready.observed_generation != provider.metadata.generation
        ):
            # Not a failure, just not known yet: Ready=Unknown + Reconciling=True is kstatus "InProgress",
            # and no Warning event is emitted for it. The Provider's status write re-enqueues this Alert.
            draft.conditions.set(
                cond.READY,
                ConditionStatus.UNKNOWN,
                cond.PROVIDER_NOT_READY,
                f"Provider '{name}' is not ready yet: waiting for it to be reconciled",
            )
        elif ready.status != ConditionStatus.TRUE:
            draft.conditions.mark_false(
                cond.READY, cond.PROVIDER_NOT_READY, f"Provider '{name}' is not ready: {ready.message}"
            )
        else:
            draft.conditions.mark_true(cond.READY, cond.SUCCEEDED, READY_MESSAGE)
        return done

    async def _held(self, obj: Alert, draft: StatusDraft) -> Result:
        """The ``Held`` condition; reconcile again in ``HELD_REFRESH`` while something is held."""
        if self.held is None:
            return DONE
        try:
            held = await self.held(obj)
        except StoreError as exc:  # the condition stays as it was; looked at again while it says something
            log.debug("alert %s: held notifications unknown: %s", self.describe(obj), exc)
            shown = cond.find(obj.status.conditions, HELD) is not None
            return Result(requeue_after=HELD_REFRESH) if shown else DONE
        if held is None:
            draft.conditions.delete(HELD)
            return DONE
        reason, message = held
        draft.conditions.mark_true(HELD, reason, message)
        return Result(requeue_after=HELD_REFRESH)
