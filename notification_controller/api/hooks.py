"""Hooks API v1: the ``spec.hooks`` entries of Alert, Provider and Receiver, and the controller-wide list.

A hook is a user service the controller calls at fixed points (``docs/hooks.md``):

* ``pre-dispatch`` (Alert, Provider): per notification, after matching and metadata merge, before the
  provider is called; the hook may rewrite the event's message/metadata/severity or drop it;
* ``pre-reconcile`` (all three kinds): on each reconcile, before status is written; the hook may add
  status conditions, and a condition that is not ``True`` makes the object ``Ready=False``;
* ``finalize`` (all three kinds): the object carries ``HOOKS_FINALIZER`` and, on deletion, keeps it until
  the hook answered 2xx.

The field is additive: Flux manifests without ``hooks`` stay valid, and the CRD gets no new default
(absent ``version``/``timeout``/``failurePolicy``/``ref.apiVersion``/``ref.kind`` mean
``v1``/``10s``/``Fail``/``v1``/``Service``), so
what the API server stores is exactly what the user wrote. Pure: no I/O (the config file is read by
``hooks.config``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, field_validator, model_validator

from ..lib.duration import parse_iso_or_go_duration
from .common import LocalObjectReference, Model

HOOKS_FINALIZER = "hooks.notification.toolkit.fluxcd.io/finalize"
"""Carried by every object a ``finalize`` hook applies to; removed once every such hook answered 2xx."""

DEFAULT_TIMEOUT_SECONDS = 10.0
MAX_TIMEOUT_SECONDS = 300.0
MAX_HOOKS = 16
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

_N = r"[0-9]+(\.[0-9]+)?"
_ISO_TIME = rf"T({_N}H({_N}M)?({_N}S)?|{_N}M({_N}S)?|{_N}S)"
HOOK_TIMEOUT_PATTERN = rf"^(P({_N}D({_ISO_TIME})?|{_ISO_TIME})|({_N}(ms|s|m|h))+)$"
"""ISO 8601 (``PT5S``, ``PT1M30S``) or Go-style (``5s``, ``1m30s``, ``750ms``); at least one component."""

PRE_DISPATCH_KINDS = frozenset({"Alert", "Provider"})
PRE_DISPATCH_ON_RECEIVER = "the pre-dispatch capability is only valid on Alert and Provider hooks"
PRE_DISPATCH_RULE = "self.all(h, !('pre-dispatch' in h.capabilities))"
ADDRESS_REQUIRED = "address must set uri, ref, or both"
ADDRESS_RULE = "has(self.uri) || has(self.ref)"


class HookCapability(StrEnum):
    """The phases a hook implements (its ``capabilities``)."""

    PRE_DISPATCH = "pre-dispatch"
    PRE_RECONCILE = "pre-reconcile"
    FINALIZE = "finalize"


class FailurePolicy(StrEnum):
    """What a failed call does (Kubernetes admission webhooks' ``failurePolicy`` vocabulary).

    A call fails when the hook cannot be resolved or reached, times out, answers non-2xx without
    ``continue: true`` (after the retries its phase allows) or sends an invalid answer. ``Fail``: the phase
    fails as documented per phase (a notification is dropped, a reconcile is retried, a deletion waits).
    ``Ignore``: the call is counted (outcome ``ignored``) and the chain goes on as if the hook had answered
    "no change". A deliberate answer (a drop, a non-True condition) is never a failure.
    """

    FAIL = "Fail"
    IGNORE = "Ignore"


DEFAULT_FAILURE_POLICY = FailurePolicy.FAIL
"""Kubernetes' default for admission webhooks, and fail-closed: a hook that redacts or vetoes notifications
must not be skipped silently by an outage. docs/hooks.md ("Failure policy") says why and when to choose
``Ignore`` (an enricher: an outage must not silence the cluster)."""


class HookKind(StrEnum):
    """Kinds a controller-wide hook can select."""

    ALERT = "Alert"
    PROVIDER = "Provider"
    RECEIVER = "Receiver"


class ServiceReference(Model):
    """A Kubernetes Service the hook address is resolved from (``<name>.<namespace>.svc.cluster.local``)."""

    api_version: Literal["v1"] | None = Field(None, description="Always v1 (the default).")
    kind: Literal["Service"] | None = Field(None, description="Always Service (the default).")
    name: str = Field(min_length=1, max_length=63, description="Name of the Service.")
    namespace: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        description="Namespace of the Service; defaults to the namespace of the object declaring the hook.",
    )
    port: int | None = Field(
        None, ge=1, le=65535, description="Port; defaults to the uri's, else 80 (443 for https)."
    )


class HookAddress(Model):
    """Where the hook listens: a ``uri``, a Service ``ref``, or both (the Service with the uri's scheme, port
    and path)."""

    model_config = Model.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [{"message": ADDRESS_REQUIRED, "rule": ADDRESS_RULE}]
        }
    }

    uri: str | None = Field(
        None, max_length=2048, pattern=r"^https?://", description="An http or https URL of the hook endpoint."
    )
    ref: ServiceReference | None = Field(None, description="A Service the address is resolved from.")

    @field_validator("uri")
    @classmethod
    def _uri_has_host(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError as exc:
            raise ValueError(f"invalid uri: {exc}") from None
        if not parts.hostname:
            raise ValueError("uri must contain a host")
        return value

    @model_validator(mode="after")
    def _one_is_set(self) -> HookAddress:
        if self.uri is None and self.ref is None:
            raise ValueError(ADDRESS_REQUIRED)
        return self


class Hook(Model):
    """One hook (Hooks API v1)."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=NAME_PATTERN,
        description="Name of the hook (a DNS label): unique per object; used in metrics and messages.",
    )
    version: Literal["v1"] | None = Field(None, description="Hooks API version the endpoint implements: v1.")
    address: HookAddress
    timeout: str | None = Field(
        None,
        pattern=HOOK_TIMEOUT_PATTERN,
        description="Time budget of one call (ISO 8601 like PT5S, or Go-style like 5s); default 10s.",
    )
    capabilities: list[HookCapability] = Field(
        min_length=1,
        max_length=len(HookCapability),
        description="Phases the hook implements: pre-dispatch, pre-reconcile, finalize.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    failure_policy: FailurePolicy | None = Field(
        None,
        description=(
            "What a failed call (unreachable, timed out, error answer, invalid answer) does: Fail (the "
            "default) fails the phase (a pre-dispatch failure drops the notification); Ignore goes on as "
            "if the hook had answered 'no change', counted with outcome 'ignored'."
        ),
    )
    secret_ref: LocalObjectReference | None = Field(
        None, description="Secret whose 'token' key signs requests (X-Signature: sha256=<hmac>)."
    )
    cert_secret_ref: LocalObjectReference | None = Field(
        None, description="Secret with ca.crt and/or tls.crt+tls.key for TLS to the hook."
    )

    @field_validator("timeout")
    @classmethod
    def _timeout_in_range(cls, value: str | None) -> str | None:
        if value is None:
            return value
        seconds = parse_iso_or_go_duration(value)  # ValueError → a validation error naming the field
        if seconds <= 0:
            raise ValueError("timeout must be greater than zero")
        if seconds > MAX_TIMEOUT_SECONDS:
            raise ValueError(f"timeout must be at most {MAX_TIMEOUT_SECONDS:g}s")
        return value

    @field_validator("capabilities")
    @classmethod
    def _no_duplicates(cls, value: list[HookCapability]) -> list[HookCapability]:
        if len(set(value)) != len(value):
            raise ValueError("capabilities must not repeat")
        return value

    def timeout_seconds(self) -> float:
        return parse_iso_or_go_duration(self.timeout) if self.timeout else DEFAULT_TIMEOUT_SECONDS

    def has(self, capability: HookCapability) -> bool:
        return capability in self.capabilities

    def ignores_failures(self) -> bool:
        return (self.failure_policy or DEFAULT_FAILURE_POLICY) is FailurePolicy.IGNORE


def _unique_names(hooks: Sequence[Hook]) -> None:
    seen: set[str] = set()
    for hook in hooks:
        if hook.name in seen:
            raise ValueError(f"hook name {hook.name!r} is used twice")
        seen.add(hook.name)


def _validator(kind: str) -> Callable[[list[Hook]], list[Hook]]:
    def validate(hooks: list[Hook]) -> list[Hook]:
        _unique_names(hooks)
        if kind not in PRE_DISPATCH_KINDS and any(h.has(HookCapability.PRE_DISPATCH) for h in hooks):
            raise ValueError(PRE_DISPATCH_ON_RECEIVER)
        return hooks

    return validate


AlertHooks = Annotated[list[Hook], AfterValidator(_validator("Alert"))]
ProviderHooks = Annotated[list[Hook], AfterValidator(_validator("Provider"))]
ReceiverHooks = Annotated[list[Hook], AfterValidator(_validator("Receiver"))]


def hooks_field(kind: str) -> Any:
    """The ``spec.hooks`` field of ``kind``: optional, names unique (a list-map), at most ``MAX_HOOKS``."""
    extra: dict[str, Any] = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
    if kind not in PRE_DISPATCH_KINDS:
        extra["x-kubernetes-validations"] = [{"message": PRE_DISPATCH_ON_RECEIVER, "rule": PRE_DISPATCH_RULE}]
    return Field(
        None,
        max_length=MAX_HOOKS,
        description="Hooks (Hooks API v1, see docs/hooks.md): user services called in the order listed.",
        json_schema_extra=extra,
    )


# ------------------------------------------------------------------------------------- controller-wide


class ControllerHook(Hook):
    """A hook of the ``--hooks-config`` file: applies to every object of ``kinds`` (all three if absent).

    Its ``secretRef``/``certSecretRef`` and a ``ref`` without namespace resolve in the controller's
    runtime namespace.
    """

    kinds: list[HookKind] = Field(default_factory=lambda: list(HookKind), min_length=1)

    @model_validator(mode="after")
    def _pre_dispatch_needs_a_notification_kind(self) -> ControllerHook:
        if self.has(HookCapability.PRE_DISPATCH) and not {k.value for k in self.kinds} & PRE_DISPATCH_KINDS:
            raise ValueError("the pre-dispatch capability needs kind Alert or Provider in kinds")
        if len(set(self.kinds)) != len(self.kinds):
            raise ValueError("kinds must not repeat")
        return self

    def selects(self, kind: str) -> bool:
        return any(k.value == kind for k in self.kinds)


class HooksConfig(Model):
    """The ``--hooks-config`` file: ``hooks: [...]`` run before every object's own hooks."""

    hooks: list[ControllerHook] = Field(default_factory=list)

    @field_validator("hooks")
    @classmethod
    def _unique(cls, value: list[ControllerHook]) -> list[ControllerHook]:
        _unique_names(value)
        return value
