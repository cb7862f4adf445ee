"""The declarative record of every receiver type, and the common steps around the verifiers (reference §5.2).

Each ``ReceiverType`` maps to one frozen ``TypeRecord``: its verifier, whether it reads a Secret, whether it
authenticates the sender, and the variables its CEL resource filters see. The reconciler
(``controllers/receiver.py``) and the webhook server (``server/receivers.py``) read these fields instead of
testing for a type, so a new type is one module with ``async def verify(req, ctx) -> Verified`` + one line in
``TYPES`` (``LazyVerifier("<module>")``: verifiers are imported on first use). ``tests/conformance/test_receiver_conformance.py`` asserts registry == CRD enum ==
``docs/receivers/*.md``.

The Secret's ``token`` is read in one place, ``secret_token``: a missing Secret or key raises
``TokenUnavailable``, which carries both of Flux's wordings (the webhook answer's and the reconciler's
condition, reference §5.2 and §6.3), so no caller writes its own.

``path_is_current`` is the step before all of them (issue 11 item 9). Flux finds a Receiver by
``status.webhookPath``, which only the leader's reconcile rewrites: after the token in the Secret is rotated,
every replica that has not seen that reconcile (a standby, or the leader before its queue gets to it) would
still serve the old path, and ``generic`` checks nothing else. So each request recomputes the path from the
Secret as the store holds it *now* and compares it, in constant time, with the requested one; a stale path
is answered exactly like an unknown one (404).
"""

from __future__ import annotations

import functools
import hmac
import importlib
import json
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..api.common import Secret
from ..api.receiver import Receiver, ReceiverType
from ..core.webhook import webhook_path
from ..errors import VerificationError
from ..objects.base import ObjectStore
from .base import TOKEN_KEY, HookRequest, Verified, Verifier, VerifyContext

FILTER_VARIABLES: tuple[str, ...] = ("res", "req")


@functools.cache
def _load(module: str) -> Verifier:
    verifier: Verifier = importlib.import_module(f"{__package__}.{module}").verify
    return verifier


@dataclass(frozen=True)
class LazyVerifier:
    """``<module>.verify``, imported on the type's first request (issue 17).

    The reconciler reads this registry too; importing every verifier with it would load the OIDC stack
    (PyJWT, cryptography: ~5 MB) into a process that may never serve generic-oidc or gcr.
    """

    module: str

    async def __call__(self, req: HookRequest, ctx: VerifyContext) -> Verified:
        return await _load(self.module)(req, ctx)

    def load(self) -> Verifier:
        """The module's ``verify`` itself (the server keeps it with a prepared hook: one call, not two)."""
        return _load(self.module)


@dataclass(frozen=True)
class TypeRecord:
    """What the reconciler and the server need to know about one receiver type.

    * ``verify``: the type's verifier (run after the Secret check);
    * ``needs_secret``: the type reads ``spec.secretRef`` (its ``token`` makes the webhook path); the others
      use ``spec.oidcProviders`` instead and their path is made from the empty token (generic-oidc);
    * ``authenticates``: the verifier checks the sender (False: the secret path is the only protection);
    * ``filter_variables``: the variables declared to the CEL resource filters (reference §5.5);
    * ``awaits``: the verifier waits for I/O (OIDC key sets). The others never await: the server runs them
      to their end in one step, without a task (``run_now``), so a refusal costs no task.
    """

    verify: LazyVerifier
    needs_secret: bool = True
    authenticates: bool = True
    filter_variables: tuple[str, ...] = FILTER_VARIABLES
    awaits: bool = False


TYPES: Mapping[ReceiverType, TypeRecord] = MappingProxyType(
    {
        ReceiverType.GENERIC: TypeRecord(LazyVerifier("generic"), authenticates=False),
        ReceiverType.GENERIC_HMAC: TypeRecord(LazyVerifier("generic_hmac")),
        ReceiverType.GENERIC_OIDC: TypeRecord(
            LazyVerifier("generic_oidc"),
            needs_secret=False,
            filter_variables=(*FILTER_VARIABLES, "claims"),
            awaits=True,
        ),
        ReceiverType.GITHUB: TypeRecord(LazyVerifier("github")),
        ReceiverType.GITLAB: TypeRecord(LazyVerifier("gitlab")),
        ReceiverType.BITBUCKET: TypeRecord(LazyVerifier("bitbucket")),
        ReceiverType.HARBOR: TypeRecord(LazyVerifier("harbor")),
        ReceiverType.DOCKERHUB: TypeRecord(LazyVerifier("dockerhub"), authenticates=False),
        ReceiverType.QUAY: TypeRecord(LazyVerifier("quay"), authenticates=False),
        ReceiverType.GCR: TypeRecord(LazyVerifier("gcr"), awaits=True),
        ReceiverType.NEXUS: TypeRecord(LazyVerifier("nexus")),
        ReceiverType.ACR: TypeRecord(LazyVerifier("acr"), authenticates=False),
        ReceiverType.CDEVENTS: TypeRecord(LazyVerifier("cdevents"), authenticates=False),
    }
)

# Views of ``TYPES`` (the conformance kit reads them).
VERIFIERS: Mapping[ReceiverType, Verifier] = MappingProxyType({t: r.verify for t, r in TYPES.items()})
UNAUTHENTICATED: frozenset[ReceiverType] = frozenset(t for t, r in TYPES.items() if not r.authenticates)


def record(receiver_type: ReceiverType) -> TypeRecord:
    """The record of ``receiver_type`` (every enum value has one; a test asserts it)."""
    return TYPES[receiver_type]


class TokenUnavailable(VerificationError):
    """The Receiver's Secret, or its ``token`` key, is missing.

    ``str(exc)`` is the webhook server's text (Flux's receiver handler, answered 400); ``condition`` is the
    reconciler's (Flux's ``ReceiverReconciler.token``, ``Ready=False TokenNotFound``). Flux words them
    differently and both are pinned, so both are written here and nowhere else.
    """

    def __init__(self, namespace: str, name: str, *, secret_found: bool) -> None:
        where = f"{namespace}/{name}"
        if secret_found:
            message = f"invalid \"{where}\" secret data: required field '{TOKEN_KEY}'"
            self.condition = f"invalid '{where}' secret data: required fields '{TOKEN_KEY}'"
        else:
            message = f'unable to read secret, error: Secret "{where}" not found'
            self.condition = (
                f"unable to read token from secret '{where}' error: "
                f"secrets {json.dumps(name, ensure_ascii=False)} not found"
            )
        super().__init__(message)


def read_secret(receiver: Receiver, store: ObjectStore) -> Secret | None:
    """The Secret ``receiver`` reads, as ``store`` holds it now (None: the type has none, or it is missing)."""
    ref = receiver.spec.secret_ref
    if ref is None or not record(receiver.spec.type).needs_secret:
        return None
    return store.secret(receiver.metadata.namespace, ref.name)


def secret_token(receiver: Receiver, secret: Secret | None) -> bytes:
    """The raw ``token`` of ``receiver``'s Secret (never trimmed, reference §9), given ``read_secret``'s answer.

    Empty for a type without a Secret (generic-oidc) and for a spec without ``secretRef`` (which the CRD's
    cross-field rules refuse; an old API server stores it, and the reconciler marks it Stalled before this).
    Raises ``TokenUnavailable`` when the Secret or its ``token`` key is missing.
    """
    ref = receiver.spec.secret_ref
    if ref is None or not record(receiver.spec.type).needs_secret:
        return b""
    if secret is None:
        raise TokenUnavailable(receiver.metadata.namespace, ref.name, secret_found=False)
    token = secret.data.get(TOKEN_KEY)
    if token is None:
        raise TokenUnavailable(receiver.metadata.namespace, ref.name, secret_found=True)
    return token


def path_is_current(path: str, receiver: Receiver, secret: Secret | None) -> bool:
    """Whether ``path`` (found in ``receiver``'s status) is the path its spec and current Secret give.

    * A spec that breaks the CRD's cross-field rules (an API server < 1.25 stores it; the reconciler marks
      it Stalled) has no current path: e.g. a ``generic`` Receiver whose ``secretRef`` was removed would
      otherwise authenticate nothing while its old status still reads Ready.
    * A type without a Secret (generic-oidc): the path is computed from the empty token, as the reconciler does.
    * A missing Secret or ``token`` key is left to ``verify`` (400 with Flux's message, reference §5.2).
    """
    if receiver.spec.validation_errors():
        return False
    try:
        token = secret_token(receiver, secret)
    except TokenUnavailable:
        return True
    meta = receiver.metadata
    expected = webhook_path(token, meta.name, meta.namespace).encode("ascii")
    return hmac.compare_digest(expected, path.encode("utf-8", errors="surrogateescape"))


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    """Check the Secret (types that have one), then run the type's verifier."""
    receiver = ctx.receiver
    secret_token(receiver, ctx.secret)  # raises TokenUnavailable (400) with Flux's message
    entry = TYPES.get(receiver.spec.type)
    if entry is None:  # unreachable while the enum and the registry agree (a test asserts it)
        raise VerificationError(f"recevier type {receiver.spec.type!r} not supported")
    return await entry.verify(req, ctx)


def run_now(verification: Coroutine[Any, Any, Verified]) -> Verified:
    """The verdict of a verifier that never awaits (``TypeRecord.awaits`` False), run to its end in one step.

    Raises ``RuntimeError`` if it awaited after all (a verifier that started doing I/O without its record
    saying so): the conformance matrix runs every type through the server, so such a change fails there.
    """
    try:
        verification.send(None)
    except StopIteration as done:
        verdict: Verified = done.value
        return verdict
    verification.close()
    raise RuntimeError("a receiver verifier awaited although its TypeRecord says it does not")
