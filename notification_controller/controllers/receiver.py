"""The Receiver reconciler: Flux's ``ReceiverReconciler`` (reference §6.3), step for step.

It validates what the webhook server will run (CEL filters, OIDC configuration), reads the token from the
referenced Secret and publishes ``status.webhookPath`` = ``/hook/sha256(token+name+namespace)``, the path
the receiver server answers on. Status, conditions and Events keep Flux's exact texts, so ``flux get
receivers`` and kstatus-based tooling read them unchanged.

The CRD's cross-field CEL rules are enforced here too (``cross_field_error``), with the reconciler's wording:
an API server < 1.25 does not know CRD CEL and stores such a Receiver, and the informers hand it over
(``parse_object(receiver_rules=False)``) so it ends terminal — Ready=False and Stalled=True,
``ValidationFailed`` — as in Flux, instead of being dropped from the cache with a bare Ready=False.

The webhook path is a credential for the receiver types that have no signature (``generic``, ``harbor``,
``quay``...): Flux puts it in the Ready message and in status (kept for compatibility: RBAC on Receivers
protects it there), but we never log it above debug level — info logs show an 8-character digest prefix.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from ..api.common import Condition
from ..api.receiver import OIDCProvider, Receiver, ReceiverSpec, ReceiverStatus
from ..core import conditions as cond
from ..core.webhook import path_digest_prefix, webhook_path
from ..hooks.reconcile import receiver_children
from ..lib.duration import format_duration
from ..objects.base import Key, ObjectRef
from ..receivers import registry
from .alert import joined
from .base import DONE, Result, StatusDraft, TemplateReconciler
from .events import NORMAL

log = logging.getLogger(__name__)

FAILED = "Failed"
_ISSUER_RE = re.compile(r"^https?://")


def _goq(text: str) -> str:
    """Go's ``%q`` for the plain strings found in object names and kinds."""
    return json.dumps(text, ensure_ascii=False)


def cel_error(spec: ReceiverSpec) -> str | None:
    """Step 4: compile ``spec.resourceFilter`` and every ``spec.resources[].filter`` as bool expressions.

    The variables are the type's (``registry.TypeRecord.filter_variables``, reference §5.5). CEL is imported
    only when there is an expression to compile (issue 17: a process without one never loads it).
    """
    if not spec.resource_filter and not any(resource.filter for resource in spec.resources):
        return None
    from ..core.cel import CELCompileError, OutputType, compile_expression

    variables = list(registry.record(spec.type).filter_variables)
    if spec.resource_filter:
        try:
            compile_expression(spec.resource_filter, variables=variables, output=OutputType.BOOL)
        except CELCompileError as exc:
            return f"invalid resourceFilter expression: {exc}"
    for i, resource in enumerate(spec.resources):
        if resource.filter:
            try:
                compile_expression(resource.filter, variables=variables, output=OutputType.BOOL)
            except CELCompileError as exc:
                return (
                    f"invalid filter expression for resources[{i}] "
                    f"(kind={_goq(str(resource.kind))}, name={_goq(resource.name)}): {exc}"
                )
    return None


def cross_field_error(spec: ReceiverSpec) -> str | None:
    """Step 5: the CRD's cross-field rules, with the reconciler's messages (reference §6.3).

    A type reads either a Secret or ``oidcProviders`` (``registry.TypeRecord.needs_secret``); the only type
    of the second kind is generic-oidc, which Flux's messages name.
    """
    oidc = not registry.record(spec.type).needs_secret
    if oidc and not spec.oidc_providers:
        return "generic-oidc receiver requires at least one oidcProvider"
    if not oidc and spec.oidc_providers:
        return "oidcProviders can only be set when type is generic-oidc"
    if oidc and spec.secret_ref is not None:
        return "secretRef cannot be set when type is generic-oidc"
    if not oidc and spec.secret_ref is None:
        return "secretRef is required when type is not generic-oidc"
    return None


def oidc_spec_error(providers: Sequence[OIDCProvider]) -> str | None:
    """Step 6a: ``ValidateOIDCProvidersSpec`` (most of it is also enforced by the CRD schema)."""
    seen: set[str] = set()
    for i, provider in enumerate(providers):
        where = f"oidcProviders[{i}]"
        if not provider.issuer_url:
            return f"{where}.issuerURL is required"
        if not _ISSUER_RE.match(provider.issuer_url):
            return f"{where}.issuerURL must start with 'http://' or 'https://'"
        if provider.issuer_url in seen:
            return f"{where}.issuerURL {_goq(provider.issuer_url)} is duplicated"
        seen.add(provider.issuer_url)
        if not provider.validations:
            return f"{where}.validations must contain at least one validation"
        for j, variable in enumerate(provider.variables or []):
            if not variable.name:
                return f"{where}.variables[{j}].name is required"
            if not variable.expression:
                return f"{where}.variables[{j}].expression is required"
        for j, validation in enumerate(provider.validations):
            if not validation.expression:
                return f"{where}.validations[{j}].expression is required"
            if not validation.message:
                return f"{where}.validations[{j}].message is required"
    return None


def oidc_cel_error(providers: Sequence[OIDCProvider]) -> str | None:
    """Step 6b: ``CompileOIDCProviders``: variables (any output) and validations (bool) see ``claims``, ``vars``."""
    if not providers:
        return None
    from ..core.cel import CELCompileError, OutputType, compile_expression  # on first use (issue 17)

    variables = ["claims", "vars"]
    for i, provider in enumerate(providers):
        where = f"oidcProviders[{i}]"
        for j, variable in enumerate(provider.variables or []):
            try:
                compile_expression(variable.expression, variables=variables, output=OutputType.ANY)
            except CELCompileError as exc:
                return f"invalid expression for {where}.variables[{j}] (name={_goq(variable.name)}): {exc}"
        for j, validation in enumerate(provider.validations):
            try:
                compile_expression(validation.expression, variables=variables, output=OutputType.BOOL)
            except CELCompileError as exc:
                return f"invalid expression for {where}.validations[{j}]: {exc}"
    return None


def receiver_errors(receiver: Receiver) -> list[tuple[str, str, str]]:
    """Every error of ``receiver`` that needs no Secret, as (reason, field, message), in the reconciler's
    order and with Flux's messages: the CEL filters, the CRD's cross-field rules, the OIDC providers' spec
    and expressions (issue 25 item 4: all of them, not the first; ``check`` prints each)."""
    spec = receiver.spec
    errors: list[tuple[str, str, str]] = []
    if (why := cel_error(spec)) is not None:
        field = "spec.resourceFilter" if why.startswith("invalid resourceFilter") else "spec.resources"
        errors.append((cond.INVALID_CEL, field, why))
    if (why := cross_field_error(spec)) is not None:
        errors.append((cond.VALIDATION_FAILED, "spec", why))
    if spec.oidc_providers:
        if (why := oidc_spec_error(spec.oidc_providers)) is not None:
            errors.append((cond.VALIDATION_FAILED, "spec.oidcProviders", why))
        if (why := oidc_cel_error(spec.oidc_providers)) is not None:
            errors.append((cond.INVALID_CEL, "spec.oidcProviders", why))
    return errors


class ReceiverReconciler(TemplateReconciler[Receiver]):
    kind = "Receiver"
    watched_kind = "Secret"
    logger = log
    status_type = ReceiverStatus

    # ---- watches ----------------------------------------------------------------------------------
    def references(self, obj: Receiver) -> list[Key]:
        ref = obj.spec.secret_ref
        return [(obj.metadata.namespace, ref.name)] if ref is not None else []

    # ---- reconcile (the template's hooks) ---------------------------------------------------------
    def load(self, key: Key) -> Receiver | None:
        return self.store.receiver(*key)

    def status_draft(self, obj: Receiver) -> StatusDraft:
        """Flux's common fields, and ``webhook_path``: kept as it is unless ``evaluate`` gets to the token."""
        draft = super().status_draft(obj)
        draft.extra["webhook_path"] = obj.status.webhook_path
        return draft

    def children(self, obj: Receiver, draft: StatusDraft) -> dict[str, Any]:
        return receiver_children(obj, draft.extra["webhook_path"])

    async def report(
        self, obj: Receiver, result: Result, hook_warning: tuple[str, str] | None, conditions: list[Condition]
    ) -> None:
        """Flux's Events: a Warning for an error (or a hook's), else a Normal one whenever it is Ready."""
        if result.error is not None:
            await self.warn(obj, FAILED, result.error)
        elif hook_warning is not None:
            await self.warn(obj, *hook_warning)
        elif cond.is_ready(conditions):
            interval = format_duration(obj.spec.interval_seconds())
            await self.recorder.event(
                ObjectRef.of(obj), NORMAL, cond.SUCCEEDED, f"Reconciliation finished, next run in {interval}"
            )

    async def evaluate(self, obj: Receiver, draft: StatusDraft) -> Result:
        spec, meta = obj.spec, obj.metadata
        errors = receiver_errors(obj)
        if errors:  # every error, with the first one's reason
            reason = errors[0][0]
            message = self.mark_terminal(obj, draft, reason, joined([why for _, _, why in errors]))
            await self.warn(obj, reason, message)
            return DONE

        draft.conditions.mark_reconciling()
        token, error = self._token(obj)
        if error is not None:
            draft.conditions.mark_false(cond.READY, cond.TOKEN_NOT_FOUND, error)
            draft.extra["webhook_path"] = ""
            return Result(requeue=True, error=error)

        new_path = webhook_path(token, meta.name, meta.namespace)
        draft.conditions.mark_true(cond.READY, cond.SUCCEEDED, f"Receiver initialized for path: {new_path}")
        if new_path != obj.status.webhook_path:
            log.info("%s initialized for path %s", self.describe(obj), path_digest_prefix(new_path))
            log.debug("%s webhook path: %s", self.describe(obj), new_path)
        draft.extra["webhook_path"] = new_path
        interval = spec.interval_seconds()
        return Result(requeue_after=interval if interval > 0 else None)

    def _token(self, obj: Receiver) -> tuple[bytes, str | None]:
        """Step 8: the raw ``token`` of ``spec.secretRef`` (empty for generic-oidc), with Flux's error texts."""
        try:
            return registry.secret_token(obj, registry.read_secret(obj, self.store)), None
        except registry.TokenUnavailable as exc:
            return b"", exc.condition
