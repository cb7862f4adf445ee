"""Status conditions the way Flux's runtime writes them (reference §6.3)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..api.common import Condition, ConditionStatus

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"

# Reasons (Flux's where they exist).
SUCCEEDED = "Succeeded"
PROGRESSING = "Progressing"
PROGRESSING_WITH_RETRY = "ProgressingWithRetry"
VALIDATION_FAILED = "ValidationFailed"
TOKEN_NOT_FOUND = "TokenNotFound"
INVALID_CEL = "InvalidCELExpression"
SECRET_NOT_FOUND = "SecretNotFound"
UNSUPPORTED_PROVIDER = "UnsupportedProvider"
PROVIDER_NOT_FOUND = "ProviderNotFound"
PROVIDER_NOT_READY = "ProviderNotReady"
SUSPENDED = "Suspended"
HOOK_FAILED = "HookFailed"

MAX_MESSAGE = 32768
_ORDER = {STALLED: 0, RECONCILING: 1, READY: 2}


def find(conditions: Sequence[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    generation: int,
    now: datetime,
) -> list[Condition]:
    """Upsert a condition; ``lastTransitionTime`` changes only if status, reason or message change."""
    message = message[:MAX_MESSAGE]
    existing = find(conditions, type_)
    changed = existing is None or (existing.status, existing.reason, existing.message) != (
        status,
        reason,
        message,
    )
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=now.replace(microsecond=0)
        if changed or existing is None
        else existing.last_transition_time,
        observed_generation=generation,
    )
    out = [c for c in conditions if c.type != type_] + [new]
    return sorted(out, key=lambda c: _ORDER.get(c.type, 3))


def remove(conditions: Sequence[Condition], type_: str) -> list[Condition]:
    return [c for c in conditions if c.type != type_]


def is_true(conditions: Sequence[Condition], type_: str) -> bool:
    cond = find(conditions, type_)
    return cond is not None and cond.status == ConditionStatus.TRUE


def is_ready(conditions: Sequence[Condition]) -> bool:
    """``conditions.IsReady`` of Flux's runtime (reference §5.2 step 3)."""
    if not is_true(conditions, READY):
        return False
    stalled, reconciling = is_true(conditions, STALLED), is_true(conditions, RECONCILING)
    return not ((stalled and not reconciling) or (reconciling and not stalled))
