"""What the history records of a ``Draft`` or a ``Notification`` (issue 27): the one place that turns the
pipeline's values into the ``Recorder``'s fields, so every caller of the ``Reporter`` says the same thing —
the Alert and Provider as ``namespace/name``, the notification's id, its event's id, the attempt and what
the provider answered (``Result``'s ``status_code``, ``latency_ms``, ``request``).

A notification made later (a group's flush, a held one released) carries no event id of its own: its id
stands for one, so its records still group together.
"""

from __future__ import annotations

from ..history.model import Outcome
from ..history.recorder import Recorder
from .model import DELIVERED, Draft, Notification, Result


def record_notification(
    history: Recorder,
    outcome: Outcome,
    n: Notification,
    *,
    stage: str = "",
    detail: str = "",
    result: Result | None = None,
    attempt: int | None = None,
) -> None:
    """One decision about a queued notification (``result``: the attempt's answer, when it was sent)."""
    if attempt is None:
        # ``or 1``, not ``max(n.attempt, 1)``: the builtin parses its arguments as keywords (~300 instructions)
        attempt = (n.attempt or 1) if result is not None or outcome is Outcome.DELIVERED else n.attempt
    r = result if result is not None else DELIVERED  # only its empty fields are read: nothing was sent
    history.put(
        outcome, n.event, n.event_id or n.id, n.id, n.alert.key, n.provider.key, n.provider_type,
        stage or r.reason, detail or r.error, attempt, r.latency_ms, r.status_code, r.request,
    )  # fmt: skip


def record_draft(history: Recorder, outcome: Outcome, draft: Draft, stage: str, detail: str) -> None:
    """One decision about an event for one Alert, before a notification was made (the Provider as the
    Alert names it when the rule that looks it up has not run, or found none)."""
    meta = draft.alert.metadata
    provider = draft.provider
    history.record(
        outcome,
        draft.event,
        draft.event_id,
        alert=f"{meta.namespace}/{meta.name}",
        provider=(
            f"{provider.metadata.namespace}/{provider.metadata.name}"
            if provider is not None
            else f"{meta.namespace}/{draft.alert.spec.provider_ref.name}"
        ),
        provider_type=str(provider.spec.type) if provider is not None else "",
        stage=stage,
        detail=detail,
    )
