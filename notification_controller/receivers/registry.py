"""The explicit map from receiver type to verifier, and the common steps around it (reference §5.2 step 4).

Adding a type = one module with ``async def verify(req, ctx) -> Verified`` + one line in ``VERIFIERS``.
``tests/conformance/test_receiver_conformance.py`` asserts registry == CRD enum == ``docs/receivers/*.md``.

``path_is_current`` is the step before all of them (issue 11 item 9). Flux finds a Receiver by
``status.webhookPath``, which only the leader's reconcile rewrites: after the token in the Secret is rotated,
every replica that has not seen that reconcile (a standby, or the leader before its queue gets to it) would
still serve the old path, and ``generic`` checks nothing else. So each request recomputes the path from the
Secret as the store holds it *now* and compares it, in constant time, with the requested one; a stale path
is answered exactly like an unknown one (404).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from types import MappingProxyType

from ..api.common import Secret
from ..api.receiver import Receiver, ReceiverType
from ..core.webhook import webhook_path
from ..errors import VerificationError
from . import (
    acr,
    bitbucket,
    cdevents,
    dockerhub,
    gcr,
    generic,
    generic_hmac,
    generic_oidc,
    github,
    gitlab,
    harbor,
    nexus,
    quay,
)
from .base import TOKEN_KEY, HookRequest, Verified, Verifier, VerifyContext

VERIFIERS: Mapping[ReceiverType, Verifier] = MappingProxyType(
    {
        ReceiverType.GENERIC: generic.verify,
        ReceiverType.GENERIC_HMAC: generic_hmac.verify,
        ReceiverType.GENERIC_OIDC: generic_oidc.verify,
        ReceiverType.GITHUB: github.verify,
        ReceiverType.GITLAB: gitlab.verify,
        ReceiverType.BITBUCKET: bitbucket.verify,
        ReceiverType.HARBOR: harbor.verify,
        ReceiverType.DOCKERHUB: dockerhub.verify,
        ReceiverType.QUAY: quay.verify,
        ReceiverType.GCR: gcr.verify,
        ReceiverType.NEXUS: nexus.verify,
        ReceiverType.ACR: acr.verify,
        ReceiverType.CDEVENTS: cdevents.verify,
    }
)

# Types that never authenticate the sender (the secret webhook path is the only protection).
UNAUTHENTICATED: frozenset[ReceiverType] = frozenset(
    {ReceiverType.GENERIC, ReceiverType.DOCKERHUB, ReceiverType.QUAY, ReceiverType.ACR, ReceiverType.CDEVENTS}
)


def path_is_current(path: str, receiver: Receiver, secret: Secret | None) -> bool:
    """Whether ``path`` (found in ``receiver``'s status) is the path its spec and current Secret give.

    * A spec that breaks the CRD's cross-field rules (an API server < 1.25 stores it; the reconciler marks
      it Stalled) has no current path: e.g. a ``generic`` Receiver whose ``secretRef`` was removed would
      otherwise authenticate nothing while its old status still reads Ready.
    * ``generic-oidc`` has no Secret: its path is computed from the empty token, as the reconciler does.
    * A missing Secret or ``token`` key is left to ``verify`` (400 with Flux's message, reference §5.2).
    """
    if receiver.spec.validation_errors():
        return False
    if receiver.spec.type == ReceiverType.GENERIC_OIDC:
        token = b""
    elif secret is None or TOKEN_KEY not in secret.data:
        return True
    else:
        token = secret.data[TOKEN_KEY]
    meta = receiver.metadata
    expected = webhook_path(token, meta.name, meta.namespace).encode("ascii")
    return hmac.compare_digest(expected, path.encode("utf-8", errors="surrogateescape"))


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    """Check the Secret (every type but generic-oidc), then run the type's verifier."""
    receiver = ctx.receiver
    ref = receiver.spec.secret_ref
    if ref is not None:
        where = f"{receiver.metadata.namespace}/{ref.name}"
        if ctx.secret is None:
            raise VerificationError(f'unable to read secret, error: Secret "{where}" not found')
        if TOKEN_KEY not in ctx.secret.data:
            raise VerificationError(f"invalid \"{where}\" secret data: required field 'token'")
    verifier = VERIFIERS.get(receiver.spec.type)
    if verifier is None:  # unreachable while the enum and the registry agree (a test asserts it)
        raise VerificationError(f"recevier type {receiver.spec.type!r} not supported")
    return await verifier(req, ctx)
