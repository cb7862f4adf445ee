"""The Provider reconciler: Flux's finalizer handling (reference §6.2) plus a status Flux does not have.

Flux's ``ProviderReconciler`` only adds and removes ``finalizers.fluxcd.io``; a broken Provider is found
out when the first notification fails. We also resolve the Provider exactly as the dispatcher will
(``providers.options.resolve_options`` + ``providers.registry.create_notifier``: spec, Secrets, proxy, TLS
material, headers, address) and report the outcome in ``status.conditions``:

======================  =====================================================================
Ready=True  Succeeded   "Provider is ready"
Ready=False SecretNotFound    a referenced Secret is missing (retried with backoff; also re-checked
                              when the Secret appears)
Ready=False ValidationFailed  the spec breaks a CRD rule (``commitStatusExpr`` on a non-git type) +
                              Stalled=True (terminal)
Ready=False InvalidCELExpression  ``commitStatusExpr`` does not compile (terminal)
Ready=False InvalidConfig     the Secret/spec cannot make a notifier: bad URL, proxy, CA PEM, headers
                              YAML... (terminal until the spec or a referenced Secret changes)
Ready=False UnsupportedProvider   the type has no implementation here (terminal)
======================  =====================================================================

With a durable store (``--store``, docs/delivery.md) a Provider whose delivery lane is paused by its circuit
breaker also gets ``Delivering=False`` reason ``DeliveryPaused`` (removed when it recovers); the outbox
requests a reconcile on each change. The status shows the breaker of the replica that reconciles (the
leader); every replica's is in ``notification_circuit_breaker_open`` and in ``DeliveryPaused`` Events.

Suspended Providers are not reconciled (their status is left as it was), like every Flux controller.
A change to any referenced Secret (``secretRef``, ``certSecretRef``, ``proxySecretRef``) re-validates the
Provider: the reconciler keeps a Secret → Providers reverse index fed by store changes.
Messages are built from error texts that never contain secret values, and are masked once more with the
values of the Provider's own Secrets (canary-tested).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..api.common import Condition
from ..api.provider import COMMIT_STATUS_TYPES, Provider
from ..core import conditions as cond
from ..core.redact import mask_values, secret_mask_values
from ..errors import ObjectReferenceError, ProviderConfigError
from ..hooks.reconcile import provider_children
from ..objects.base import Key
from ..providers.options import resolve_options
from ..providers.registry import create_notifier
from .alert import field_of, joined
from .base import DONE, Result, StatusDraft, TemplateReconciler

log = logging.getLogger(__name__)

INVALID_TEMPLATE = "InvalidTemplate"

DELIVERING = "Delivering"
DELIVERY_PAUSED = "DeliveryPaused"
INVALID_CONFIG = "InvalidConfig"
READY_MESSAGE = "Provider is ready"
COMMIT_STATUS_VARIABLES = ("event", "alert", "provider")


def secret_keys(provider: Provider) -> set[Key]:
    """The Secrets a Provider reads: ``secretRef``, ``certSecretRef``, ``proxySecretRef``."""
    ns, spec = provider.metadata.namespace, provider.spec
    refs = (spec.secret_ref, spec.cert_secret_ref, spec.proxy_secret_ref)
    return {(ns, ref.name) for ref in refs if ref is not None}


def provider_errors(provider: Provider) -> list[tuple[str, str, str]]:
    """Every error of ``provider`` that needs no Secret, as (reason, field, message), in the reconciler's
    order: the CRD's rules, the body template, the commit-status CEL expression (issue 25 item 4: all of
    them, not the first; ``check`` prints each)."""
    spec = provider.spec
    errors = [(cond.VALIDATION_FAILED, field_of(m), m) for m in spec.validation_errors()]
    if spec.body_template:
        from ..core.templates import template_error  # Jinja2 on first use

        if (why := template_error(spec.body_template)) is not None:
            errors.append((INVALID_TEMPLATE, "spec.bodyTemplate", f"spec.bodyTemplate: {why}"))
    if spec.commit_status_expr is not None and spec.type in COMMIT_STATUS_TYPES:
        from ..core.cel import CELCompileError, OutputType, compile_expression  # on first use (issue 17)

        try:
            compile_expression(
                spec.commit_status_expr, variables=COMMIT_STATUS_VARIABLES, output=OutputType.STRING
            )
        except CELCompileError as exc:
            errors.append(
                (cond.INVALID_CEL, "spec.commitStatusExpr", f"invalid commitStatusExpr expression: {exc}")
            )
    return errors


class ProviderReconciler(TemplateReconciler[Provider]):
    kind = "Provider"
    watched_kind = "Secret"
    logger = log
    ready_message = READY_MESSAGE
    delivery_paused: Callable[[str], str | None] | None = None
    """``namespace/name`` → why its lane is paused, or None (set by the app with a durable store)."""

    # ---- watches ----------------------------------------------------------------------------------
    def references(self, obj: Provider) -> set[Key]:
        return secret_keys(obj)

    # ---- reconcile (the template's hooks) ---------------------------------------------------------
    def load(self, key: Key) -> Provider | None:
        return self.store.provider(*key)

    def children(self, obj: Provider, draft: StatusDraft) -> dict[str, Any]:
        return provider_children(obj, self.store)

    async def evaluate(self, obj: Provider, draft: StatusDraft) -> Result:
        result = self._validate(obj, draft)
        self._delivery(obj, draft)
        return result

    def _validate(self, obj: Provider, draft: StatusDraft) -> Result:
        errors = provider_errors(obj)
        if errors:  # every error, with the first one's reason
            return self._terminal(obj, draft, errors[0][0], joined([why for _, _, why in errors]))

        draft.conditions.mark_reconciling()
        try:
            create_notifier(resolve_options(obj, self.store.secret))
        except ObjectReferenceError as exc:
            message = self._mask(obj, str(exc))
            draft.conditions.mark_false(cond.READY, exc.reason, message)
            return Result(requeue=True, error=message)
        except ProviderConfigError as exc:
            reason = INVALID_CONFIG if exc.reason == cond.VALIDATION_FAILED else exc.reason
            return self._terminal(obj, draft, reason, str(exc))
        except Exception as exc:  # a notifier constructor bug must not stop the other Providers (D9)
            log.exception("unexpected error validating %s", self.describe(obj))
            return self._terminal(
                obj, draft, INVALID_CONFIG, f"failed to create notifier: {type(exc).__name__}"
            )
        draft.conditions.mark_true(cond.READY, cond.SUCCEEDED, READY_MESSAGE)
        return DONE

    def _delivery(self, obj: Provider, draft: StatusDraft) -> None:
        paused = None
        if self.delivery_paused is not None:
            paused = self.delivery_paused(f"{obj.metadata.namespace}/{obj.metadata.name}")
        if paused is not None:
            draft.conditions.mark_false(DELIVERING, DELIVERY_PAUSED, paused)
        elif draft.conditions.has(DELIVERING):
            draft.conditions.delete(DELIVERING)

    def _terminal(self, obj: Provider, draft: StatusDraft, reason: str, error: str) -> Result:
        self.mark_terminal(obj, draft, reason, self._mask(obj, error))
        return DONE

    def _mask(self, obj: Provider, text: str) -> str:
        """Mask the values of the Provider's own Secrets (whole values, short ones too), then every secret the
        process knows. A few values: no index is built (the store-wide ``Redactor`` has one)."""
        values: set[str] = set()
        for ns, name in secret_keys(obj):
            secret = self.store.secret(ns, name)
            if secret is not None:
                values |= secret_mask_values(secret.data)
        return self.redact(mask_values(text, values))


def ready_condition(provider: Provider) -> Condition | None:
    return cond.find(provider.status.conditions, cond.READY)
