"""Target resolution, CEL resource filters and the reconcile trigger of a Receiver (reference §5.4, §5.5).

For every ``spec.resources[]`` entry — all of them, even when one fails — resolve the objects (by name with
``Cluster.get_metadata``, or ``*`` + ``matchLabels`` with ``Cluster.list_metadata``), keep those for which
every configured filter (``spec.resourceFilter`` AND ``spec.resources[].filter``, variables ``res``, ``req``
and, for generic-oidc, ``claims``) is true, and annotate them with ``reconcile.fluxcd.io/requestedAt`` =
Go's ``time.Now().String()`` (a JSON merge patch, so it never conflicts with a concurrent update).

Errors are collected per reference with Flux's texts (they may quote Kubernetes errors, so they go to the
log, never into the HTTP answer). Every Kubernetes call is bounded by ``kube_timeout``.

Tenant isolation (issue 11): a reference is validated and checked against the refusal policy
(``core.apiref.validate_object_ref``, ``Use.TARGET``) *before* any lookup, so no filter is ever
evaluated over an object the Receiver may not target. The namespace comes from the reference or the
Receiver and nothing else: ``--no-cross-namespace-refs`` compares it with the Receiver's, objects a
lookup returns from another namespace (or under another name) are never annotated, and the annotation
goes to the validated (namespace, name), not to whatever the answer says. A refused, malformed or missing
reference all end the same way — one error, no filter, no patch — so the answer (500) tells nothing about
what exists.

CEL is imported on the first expression (issue 17): a Receiver without filters never loads it. A filter
outside the inline-safe subset (``Expression.inline_safe``) runs in the sandbox's worker processes
(``sandbox/``, issue 23); a refusal there (timeout, memory, quarantine, overload) is that resource's error.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..api import RECONCILE_REQUEST_ANNOTATION
from ..api.receiver import Receiver, ReceiverResource
from ..core.apiref import (
    DEFAULT_API_VERSIONS,
    InvalidReference,
    ObjectReference,
    Use,
    label_selector,
    validate_object_ref,
)
from ..errors import ControllerError, KubeError
from ..lib.clock import Clock, go_time_string
from ..objects.base import Cluster
from .base import RawHeaders, load_json
from .signatures import SignatureError, media_type

if TYPE_CHECKING:
    from ..core.cel import Expression
    from ..sandbox import SandboxPool

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_API_VERSIONS",
    "FilterError",
    "Filters",
    "RequestBodyError",
    "Resumed",
    "Target",
    "Trigger",
    "TriggerResult",
    "compile_filters",
    "on_task",
    "request_value",
]


class RequestBodyError(ControllerError, ValueError):
    """The body must be JSON for the filters but is not (pinned: 400, Flux answered 500)."""


class FilterError(ControllerError, ValueError):
    """A filter does not compile: a configuration fault, answered 500. The message is the CEL compiler's."""


@dataclass(frozen=True)
class Filters:
    """Compiled ``spec.resourceFilter`` and per-resource ``filter`` expressions (None = not configured)."""

    top: Expression | None
    per_resource: tuple[Expression | None, ...]

    @functools.cached_property
    def configured(self) -> bool:
        """Any expression at all (read per request: computed once)."""
        return self.top is not None or any(f is not None for f in self.per_resource)


def compile_filters(receiver: Receiver, variables: Sequence[str]) -> Filters:
    """Compile the filters over ``variables`` (the type's, ``registry.TypeRecord.filter_variables``).

    ``FilterError`` on a bad expression. Without any expression, CEL is not imported.
    """
    spec = receiver.spec
    if not spec.resource_filter and not any(r.filter for r in spec.resources):
        return Filters(top=None, per_resource=(None,) * len(spec.resources))
    from ..core.cel import CELError, OutputType, compile_expression

    declared = list(variables)

    def build(source: str | None) -> Expression | None:
        if not source:
            return None
        return compile_expression(source, variables=declared, output=OutputType.BOOL)

    try:
        return Filters(
            top=build(spec.resource_filter),
            per_resource=tuple(build(r.filter) for r in spec.resources),
        )
    except CELError as exc:
        raise FilterError(str(exc)) from None


def request_value(headers: RawHeaders, body: bytes) -> dict[str, Any]:
    """``req`` for CEL: the JSON body when any ``Content-Type`` value is ``application/json``, else ``{}``.

    A JSON ``null`` body is ``{}``: Flux decodes into a Go ``map[string]any``, which ``null`` leaves empty
    (filter runs, 200). Any other non-object (``[]``, ``42``) cannot decode into a map: an error, as in Flux.
    """
    is_json = False
    for raw in headers.getall("Content-Type"):
        for part in raw.split(b","):
            try:
                if media_type(part.decode("latin-1")) == "application/json":
                    is_json = True
            except SignatureError:
                continue
    if not is_json:
        return {}
    try:
        value = load_json(body)
    except ValueError as exc:
        raise RequestBodyError(f"failed to parse request body as JSON: {exc}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestBodyError("failed to parse request body as JSON: not an object")
    return value


@dataclass
class TriggerResult:
    annotated: list[str] = field(default_factory=list)  # "Kind/name.namespace"
    skipped: list[str] = field(default_factory=list)  # filtered out by CEL
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Target:
    """One ``spec.resources[]`` entry as ``Trigger.plan`` validated it: the reference (``ref.name`` None for
    a ``*`` + ``matchLabels`` entry), or the error every request reports for it."""

    resource: ReceiverResource
    namespace: str
    kind: str
    api_version: str | None = None
    ref: ObjectReference | None = None
    error: str | None = None


@dataclass
class Trigger:
    """Runs the reconcile requests of one webhook call."""

    cluster: Cluster
    clock: Clock
    no_cross_namespace_refs: bool = False
    kube_timeout: float = 10.0
    sandbox: SandboxPool | None = None
    waits: bool = True
    """The cluster's calls may wait (an API server): each starts on a task. False for local mode's in-memory
    cluster, whose calls complete at once: then a webhook is answered without a task (``on_task``)."""

    def plan(self, receiver: Receiver) -> tuple[Target, ...]:
        """Every ``spec.resources[]`` entry validated, once per Receiver version (the server keeps the plan
        with its prepared hook): what ``run`` does for a request is the lookups and the patches only."""
        return tuple(self._target(receiver, resource) for resource in receiver.spec.resources)

    async def run(
        self,
        receiver: Receiver,
        filters: Filters,
        *,
        req: Mapping[str, Any] | None,
        claims: Mapping[str, Any] | None,
        plan: Sequence[Target] | None = None,
    ) -> TriggerResult:
        result = TriggerResult()
        for index, target in enumerate(self.plan(receiver) if plan is None else plan):
            per = filters.per_resource[index] if index < len(filters.per_resource) else None
            try:
                if target.error is not None:
                    raise _TargetError(target.error)
                await self._one(receiver, target, (filters.top, per), req, claims, result)
            except _TargetError as exc:
                result.errors.append(str(exc))
        return result

    def _target(self, receiver: Receiver, resource: ReceiverResource) -> Target:
        """One reference checked against the refusal policy (``validate_object_ref``), or its error."""
        namespace = resource.namespace or receiver.metadata.namespace
        kind = str(resource.kind)
        if self.no_cross_namespace_refs and namespace != receiver.metadata.namespace:
            return Target(resource, namespace, kind, error="cross-namespace references are not allowed")
        api_version = resource.api_version or DEFAULT_API_VERSIONS.get(kind)
        if not api_version:
            return Target(resource, namespace, kind, error=f'apiVersion must be specified for kind "{kind}"')
        wildcard = resource.name == "*"
        if wildcard and resource.match_labels is None:
            return Target(
                resource, namespace, kind, error="matchLabels field not set when using wildcard '*' as name"
            )
        try:
            ref = validate_object_ref(
                api_version, kind, namespace, None if wildcard else resource.name, use=Use.TARGET
            )
            if resource.match_labels:
                label_selector(resource.match_labels)
        except InvalidReference as exc:
            return Target(resource, namespace, kind, error=f"invalid resource reference: {exc}")
        return Target(resource, namespace, kind, api_version, ref)

    async def _call(self, coro: Coroutine[Any, Any, Any], what: str, *args: object) -> Any:
        """Await one Kubernetes call within ``kube_timeout``; an error names it (``what % args``, formatted
        only then).

        The call runs to its first wait before the timer is armed: a call that never waits (local mode's
        cluster, an answer already cached) costs no timer (two per target were a tenth of a webhook's CPU),
        and one that waits is bounded from then on, which is all the waiting it does."""
        try:
            if self.waits:
                await on_task()  # an API client's own timers need one from its first step
            try:
                first = coro.send(None)
            except StopIteration as done:
                return done.value
            await on_task()  # it waits: the timer needs the task
            async with asyncio.timeout(self.kube_timeout):
                return await Resumed(coro, first)
        except TimeoutError:
            what = what % args
            raise _TargetError(f"{what} error: timed out after {self.kube_timeout:g}s") from None
        except KubeError as exc:
            raise _TargetError(f"{what % args} error: {exc}") from None
        except Exception as exc:  # an adapter bug must not stop the other targets
            what = what % args
            log.error("unexpected %s from the Kubernetes adapter", type(exc).__name__, exc_info=exc)
            raise _TargetError(f"{what} error: unexpected {type(exc).__name__}") from None

    async def _one(
        self,
        receiver: Receiver,
        target: Target,
        exprs: tuple[Expression | None, Expression | None],
        req: Mapping[str, Any] | None,
        claims: Mapping[str, Any] | None,
        result: TriggerResult,
    ) -> None:
        resource, namespace, kind, api_version, ref = (
            target.resource,
            target.namespace,
            target.kind,
            target.api_version,
            target.ref,
        )
        assert ref is not None and api_version is not None  # a target without error is validated
        wildcard = ref.name is None
        if wildcard:
            assert resource.match_labels is not None
            items = await self._call(
                self.cluster.list_metadata(api_version, kind, namespace, resource.match_labels),
                'failed listing resources in namespace "%s" by matching labels %s',
                namespace,
                resource.match_labels,
            )
            if not items:
                log.info(
                    "receiver %s/%s: no '%s' resources found with matching labels in namespace '%s'",
                    receiver.metadata.namespace,
                    receiver.metadata.name,
                    kind,
                    namespace,
                )
            for item in items:
                name = _listed_name(item, ref)
                if name is None:  # a lookup answer from elsewhere is never annotated
                    result.errors.append(
                        f'unexpected object in the list of {kind} in namespace "{namespace}"'
                    )
                    continue
                await self._notify(receiver, ref, name, item, exprs, req, claims, result)
            return
        assert ref.name is not None
        obj = await self._call(
            self.cluster.get_metadata(api_version, kind, namespace, ref.name),
            'unable to read %s "%s/%s"',
            kind,
            namespace,
            resource.name,
        )
        if _answer_name(obj, ref) != ref.name:
            raise _TargetError(f'unable to read {kind} "{namespace}/{ref.name}": unexpected object in answer')
        await self._notify(receiver, ref, ref.name, obj, exprs, req, claims, result)

    async def _notify(
        self,
        receiver: Receiver,
        ref: ObjectReference,
        name: str,
        obj: Mapping[str, Any],
        exprs: tuple[Expression | None, Expression | None],
        req: Mapping[str, Any] | None,
        claims: Mapping[str, Any] | None,
        result: TriggerResult,
    ) -> None:
        """Filter and annotate one object (``name`` validated, in ``ref``'s namespace)."""
        kind, ns = ref.kind, ref.namespace
        label = f"{kind}/{name}.{ns}"
        if exprs[0] is not None or exprs[1] is not None:
            from ..core.cel import CELError  # loaded already: the expressions were compiled with it
            from ..sandbox import SandboxFailure

            activation: dict[str, Any] = {"res": obj, "req": req or {}}
            if claims is not None:
                activation["claims"] = claims
            for expr in exprs:
                if expr is None:
                    continue
                try:
                    if self.sandbox is None:
                        accepted = expr.evaluate_bool(activation)
                    else:
                        await on_task()
                        accepted = await self.sandbox.cel(
                            expr, activation, namespace=receiver.metadata.namespace, kind="receiver_filter"
                        )
                        if not isinstance(accepted, bool):
                            raise _TargetError(
                                f"failed to evaluate resource filter for '{label}': not a bool"
                            )
                except (CELError, SandboxFailure) as exc:
                    raise _TargetError(f"failed to evaluate resource filter for '{label}': {exc}") from None
                if not accepted:
                    log.info(
                        "receiver %s/%s: resource '%s' NOT annotated because CEL expression returned false",
                        receiver.metadata.namespace,
                        receiver.metadata.name,
                        label,
                    )
                    result.skipped.append(label)
                    return
        value = go_time_string(self.clock.now(), self.clock.monotonic())
        await self._call(
            self.cluster.annotate(ref.api_version, kind, ns, name, {RECONCILE_REQUEST_ANNOTATION: value}),
            "failed to annotate resource: '%s': unable to annotate %s \"%s/%s\"",
            label,
            kind,
            ns,
            name,
        )
        log.info(
            "receiver %s/%s: resource '%s' annotated",
            receiver.metadata.namespace,
            receiver.metadata.name,
            label,
        )
        result.annotated.append(label)


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    if type(metadata) is dict:  # what every cluster answers: no ABC check per target
        return metadata
    return metadata if isinstance(metadata, Mapping) else {}


def _answer_name(obj: Mapping[str, Any], ref: ObjectReference) -> str | None:
    """The name of a looked-up object, None when the answer is about another namespace."""
    metadata = _metadata(obj)
    namespace = metadata.get("namespace") or ref.namespace
    name = metadata.get("name")
    return name if isinstance(name, str) and namespace == ref.namespace else None


def _listed_name(obj: Mapping[str, Any], ref: ObjectReference) -> str | None:
    """The validated name of a listed object of ``ref``'s namespace (None: not one to annotate)."""
    name = _answer_name(obj, ref)
    if name is None:
        return None
    try:
        return validate_object_ref(ref.api_version, ref.kind, ref.namespace, name, use=Use.TARGET).name
    except InvalidReference:
        return None


class _TargetError(Exception):
    pass


async def on_task() -> None:
    """Go on running on a task. The receiver endpoint runs a webhook's coroutine without one until it first
    yields (most never do: every check, and local mode's cluster, complete at once), then hands the rest to a
    task (``Resumed``). Code that needs a task (``asyncio.timeout``, an HTTP client's timers) or does I/O calls
    this first: outside a task it yields once, which is where the endpoint makes one; on a task it is free."""
    if asyncio.current_task() is None:
        await asyncio.sleep(0)


class Resumed:
    """Awaits a coroutine that already ran to its first suspension, where it yielded ``first``: what it yields
    goes to the task, what the task sends or throws (a result, a cancellation) goes back in. How a call that
    was started without a task (``Trigger._call``, the receiver endpoint) goes on on one."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self._coro, self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation or an error thrown in by the task
                try:
                    value = coro.throw(exc)
                except StopIteration as done:
                    return done.value
                continue
            try:
                value = coro.send(sent)
            except StopIteration as done:
                return done.value
