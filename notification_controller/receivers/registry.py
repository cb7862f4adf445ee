"""The explicit map from receiver type to verifier, and the common steps around it (reference §5.2 step 4).

Adding a type = one module with ``async def verify(req, ctx) -> Verified`` + one line in ``VERIFIERS``.
``tests/conformance/test_receiver_conformance.py`` asserts registry == CRD enum == ``docs/receivers/*.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ..api.receiver import ReceiverType
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
