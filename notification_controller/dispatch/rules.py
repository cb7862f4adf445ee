"""Flux's per-Alert rules (reference §3.6), as the first pre-queue stages.

Each rule is a named stage: it returns the draft (possibly completed), a ``Drop`` with its
``DropReason``, or raises ``ControllerError`` (the orchestrator drops the notification as ``config`` and
records ``NotificationDispatchFailed`` on the Alert, as Flux does). In order:

1. ``cross-namespace``: with ``--no-cross-namespace-refs``, an event from another namespace is refused;
2. ``provider``: the Alert's Provider must exist;
3. ``provider-suspended``: a suspended Provider drops silently (counted);
4. ``commit-status-update``: a commit-status *update* only goes to git and generic Providers;
5. ``commit-status-metadata``: git Providers need the commit metadata key (error events excepted);
6. ``change-request``: change-request Providers need the change request key;
7. ``workload-identity``: ``spec.serviceAccountName`` needs the ObjectLevelWorkloadIdentity gate;
8. ``metadata``: the Alert's ``eventMetadata``/``summary`` merged into the event (conflicts warned);
9. ``notifier``: the Provider's notifier can be built (cached per Provider/Secret version);
10. ``commit-status-id``: ``spec.commitStatusExpr`` (CEL) or Flux's default id, for git Providers; it
   travels with the notification, so the Provider's cached notifier is never rebuilt per event. An
   expression outside the inline-safe subset (``Expression.inline_safe``) is evaluated in the sandbox's
   worker processes (``sandbox/``, issue 23): with the memory store the rule returns an awaitable (the
   POST was answered already); with a durable store it is deferred to send time (``CommitStatusAtSend``),
   so the event POST never waits on a tenant's expression.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..api.event import (
    EVENT_ANNOTATION_PREFIX,
    MD_CHANGE_REQUEST,
    MD_COMMIT,
    MD_COMMIT_STATUS,
    MD_COMMIT_STATUS_UPDATE,
    SEVERITY_ERROR,
)
from ..api.provider import CHANGE_REQUEST_TYPES, COMMIT_STATUS_TYPES, GENERIC_TYPES, Provider
from ..core.metadata import combine_metadata
from ..errors import ControllerError
from ..objects.base import ObjectStore
from ..sandbox import SandboxFailure, SandboxPool
from .model import Delivery, Draft, Drop, DropReason
from .notifiers import NotifierCache
from .stage import Stage

Warn = Callable[..., None]
"""``warn(alert, reason, message, annotations=None)``: a Warning Event on the Alert."""


def _provider(draft: Draft) -> Provider:
    assert draft.provider is not None
    return draft.provider


def flux_rules(
    store: ObjectStore,
    notifiers: NotifierCache,
    warn: Warn,
    *,
    no_cross_namespace_refs: bool,
    object_level_workload_identity: bool,
    sandbox: SandboxPool | None = None,
    deferred: bool = False,
) -> tuple[Stage[Draft], ...]:
    """The rules in order. ``deferred`` (a durable store): a ``commitStatusExpr`` the sandbox must
    evaluate waits for send time (``CommitStatusAtSend``)."""

    def cross_namespace(draft: Draft) -> Draft | Drop:
        obj, meta = draft.event.involved_object, draft.alert.metadata
        if no_cross_namespace_refs and obj.namespace != meta.namespace:
            raise ControllerError(
                "discarding event, access denied to cross-namespace sources: alert "
                f"'{meta.namespace}/{meta.name}' can't process event from '{obj.describe()}', "
                "cross-namespace references have been blocked"
            )
        return draft

    def provider(draft: Draft) -> Draft | Drop:
        ns, name = draft.alert.metadata.namespace, draft.alert.spec.provider_ref.name
        found = store.provider(ns, name)
        if found is None:
            raise ControllerError(f"failed to read provider: Provider '{ns}/{name}' not found")
        return draft.with_provider(found)

    def provider_suspended(draft: Draft) -> Draft | Drop:
        p = _provider(draft)
        return Drop(DropReason.SUSPENDED, provider_type=p.spec.type) if p.spec.suspend else draft

    def _update(draft: Draft) -> bool:
        group = draft.event.involved_object.group
        return draft.event.metadata.get(f"{group}/{MD_COMMIT_STATUS}") == MD_COMMIT_STATUS_UPDATE

    def commit_status_update(draft: Draft) -> Draft | Drop:
        ptype = _provider(draft).spec.type
        if ptype not in COMMIT_STATUS_TYPES and ptype not in GENERIC_TYPES and _update(draft):
            return Drop(DropReason.COMMIT_STATUS_UPDATE, provider_type=ptype)
        return draft

    def commit_status_metadata(draft: Draft) -> Draft | Drop:
        ptype, event = _provider(draft).spec.type, draft.event
        if (
            ptype in COMMIT_STATUS_TYPES
            and not event.metadata.get(EVENT_ANNOTATION_PREFIX + MD_COMMIT)
            and event.severity != SEVERITY_ERROR
            and not _update(draft)
        ):
            return Drop(
                DropReason.COMMIT_STATUS,
                "event dropped for commit status providers due to missing commit metadata key",
                provider_type=ptype,
            )
        return draft

    def change_request(draft: Draft) -> Draft | Drop:
        ptype = _provider(draft).spec.type
        if ptype in CHANGE_REQUEST_TYPES and not draft.event.metadata.get(
            EVENT_ANNOTATION_PREFIX + MD_CHANGE_REQUEST
        ):
            return Drop(
                DropReason.CHANGE_REQUEST,
                "event dropped due to missing change request metadata key",
                provider_type=ptype,
            )
        return draft

    def workload_identity(draft: Draft) -> Draft | Drop:
        if _provider(draft).spec.service_account_name and not object_level_workload_identity:
            raise ControllerError(
                "to use spec.serviceAccountName for provider authentication please enable the "
                "ObjectLevelWorkloadIdentity feature gate in the controller"
            )
        return draft

    def metadata(draft: Draft) -> Draft | Drop:
        event, alert = draft.event, draft.alert
        combined = combine_metadata(
            event.metadata, event.involved_object.group, alert.spec.event_metadata, alert.spec.summary
        )
        if combined.conflicts:
            warn(
                alert,
                "MetadataAppendFailed",
                "metadata key conflicts detected (please refer to the Alert API docs and Flux RFC 0008 for more "
                "information)",
                {k: ", ".join(v) for k, v in combined.conflicts.items()},
            )
        if combined.metadata:
            return draft.with_event(event.model_copy(update={"metadata": combined.metadata}))
        return draft

    def notifier(draft: Draft) -> Draft | Drop:
        notifiers.get(_provider(draft))  # built (or found) now: a Provider that cannot work fails here
        return draft

    def commit_status_id(draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        p = _provider(draft)
        if p.spec.type not in COMMIT_STATUS_TYPES:
            return draft
        if not p.spec.commit_status_expr:
            return draft.with_commit_status(_default_commit_status_id(draft, p))
        program, activation = _commit_status_program(draft, p)
        if sandbox is None or program.inline_safe:
            return draft.with_commit_status(_evaluated(lambda: program.evaluate_string(activation)))
        if deferred:
            return draft  # no id yet: ``CommitStatusAtSend`` evaluates it once the notification is stored
        return _commit_status_in_sandbox(sandbox, draft, program, activation)

    return (
        Stage("cross-namespace", cross_namespace),
        Stage("provider", provider),
        Stage("provider-suspended", provider_suspended),
        Stage("commit-status-update", commit_status_update),
        Stage("commit-status-metadata", commit_status_metadata),
        Stage("change-request", change_request),
        Stage("workload-identity", workload_identity),
        Stage("metadata", metadata),
        Stage("notifier", notifier),
        Stage("commit-status-id", commit_status_id),
    )


def _default_commit_status_id(draft: Draft, provider: Provider) -> str:
    obj = draft.event.involved_object
    uid_head = provider.metadata.uid.split("-", 1)[0]
    return f"{obj.kind}/{obj.name}/{uid_head}".lower()


def _commit_status_program(draft: Draft, provider: Provider) -> tuple[Any, dict[str, Any]]:
    """The compiled ``commitStatusExpr`` (cached by source) and its variables."""
    from ..core.cel import OutputType, compile_expression

    program = _evaluated(
        lambda: compile_expression(
            provider.spec.commit_status_expr or "",
            variables=("event", "alert", "provider"),
            output=OutputType.STRING,
            strict_types=True,
        )
    )
    activation = {
        "event": draft.event.as_cel(),
        "alert": draft.alert.model_dump(by_alias=True, mode="json"),
        "provider": provider.model_dump(by_alias=True, mode="json"),
    }
    return program, activation


def _evaluated(run: Callable[[], Any]) -> Any:
    from ..core.cel import CELError

    try:
        return run()
    except CELError as exc:
        raise _commit_status_error(exc) from exc


def _commit_status_error(exc: Exception) -> ControllerError:
    return ControllerError(
        "failed to create commit status: failed to evaluate the spec.commitStatusExpr CEL expression "
        f"for the event: {exc}"
    )


async def _commit_status_in_sandbox(
    sandbox: SandboxPool, draft: Draft, program: Any, activation: dict[str, Any]
) -> Draft:
    from ..core.cel import CELError

    try:
        value = await sandbox.cel(
            program,
            activation,
            namespace=draft.alert.metadata.namespace,
            kind="commit_status",
            strict_types=True,
        )
    except (CELError, SandboxFailure) as exc:
        raise _commit_status_error(exc) from exc
    if not isinstance(value, str):
        raise _commit_status_error(TypeError("not a string"))
    return draft.with_commit_status(value)


@dataclass(frozen=True)
class CommitStatusAtSend:
    """Pre-send (durable stores): the ``commitStatusExpr`` that ``commit-status-id`` deferred, evaluated
    in the sandbox against the current Provider. A failure drops the notification with a Warning on the
    Alert, as the rule does (a status under another id would be a wrong status)."""

    sandbox: SandboxPool
    name: str = "commit-status-at-send"

    async def __call__(self, delivery: Delivery) -> Delivery | Drop:
        p, n = delivery.provider, delivery.notification
        if n.commit_status or p.spec.type not in COMMIT_STATUS_TYPES or not p.spec.commit_status_expr:
            return delivery
        draft = Draft(delivery.event, delivery.alert, p)
        try:
            program, activation = _commit_status_program(draft, p)
            if program.inline_safe:
                value = _evaluated(lambda: program.evaluate_string(activation))
            else:
                value = (
                    await _commit_status_in_sandbox(self.sandbox, draft, program, activation)
                ).commit_status
        except ControllerError as exc:
            return Drop(
                DropReason.CONFIG,
                f"failed to dispatch notification for {delivery.event.involved_object.describe()}: {exc}",
                warn=True,
            )
        return dataclasses.replace(delivery, notification=dataclasses.replace(n, commit_status=value))
