"""``generic-oidc``: an OIDC ID token in ``Authorization: Bearer`` checked against ``spec.oidcProviders``.

Reference §5.6, in Flux's order and with its messages:

1. no ``oidcProviders`` → ``generic-oidc receiver has no oidcProviders configured``;
2. ``Authorization`` must start with ``Bearer `` and carry a token;
3. the UNVERIFIED ``iss`` picks the provider whose ``issuerURL`` equals it exactly (so only configured issuers
   are ever contacted);
4. discovery + key set (``oidc.OIDCClient``, cached), signature, ``iss``, ``aud`` ∋ audience (default
   ``notification-controller``), ``exp`` (``failed to verify OIDC token: ...``);
5. CEL ``variables`` in order into ``vars`` (each sees ``claims`` and the earlier ``vars``), then every
   ``validations`` entry; the failing messages are joined → ``token validation failed: m1; m2``.

The claims are exposed to the resource filters as ``claims``. CEL is imported on the first request that gets
to step 5 (issue 17), so a process that never serves this type never loads it. When an expression is
outside the inline-safe subset (``Expression.inline_safe``), the whole chain runs in one sandbox job
(``sandbox/``, issue 23); a sandbox refusal fails the request as an evaluation error would.
"""

from __future__ import annotations

from typing import Any

from ..api.receiver import DEFAULT_OIDC_AUDIENCE
from ..errors import VerificationError
from .base import HookRequest, Verified, VerifyContext
from .oidc import OIDCError, bearer_token, unverified_claims


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    providers = ctx.receiver.spec.oidc_providers or []
    if not providers:
        raise VerificationError("generic-oidc receiver has no oidcProviders configured")
    try:
        token = bearer_token(req.headers.single("Authorization"))
    except OIDCError as exc:
        raise VerificationError(str(exc)) from None
    try:
        iss = unverified_claims(token).get("iss")
    except OIDCError as exc:
        raise VerificationError(f"failed to parse bearer token: {exc}") from None
    if not isinstance(iss, str) or not iss:
        raise VerificationError("failed to parse bearer token: token is missing the 'iss' claim")
    provider = next((p for p in providers if p.issuer_url == iss), None)
    if provider is None:
        raise VerificationError(f"no oidcProvider configured for issuer {iss!r}")
    if ctx.oidc is None:
        raise VerificationError("failed to verify OIDC token: no OIDC client configured")
    audience = provider.audience or DEFAULT_OIDC_AUDIENCE
    try:
        discovery = await ctx.oidc.discover(provider.issuer_url)
        claims = await ctx.oidc.verify(
            token,
            jwks_url=discovery.jwks_uri,
            algorithms=discovery.algorithms,
            issuers=frozenset({provider.issuer_url}),
            audience=audience,
            now=ctx.clock.now(),
        )
    except OIDCError as exc:
        raise VerificationError(f"failed to verify OIDC token: {exc}") from None

    if ctx.sandbox is None or _all_inline(provider):
        failures = _evaluate_inline(provider, claims)
    else:
        failures = await _evaluate_in_sandbox(provider, claims, ctx)
    if failures:
        raise VerificationError("token validation failed: " + "; ".join(failures))
    return Verified(body=req.body, claims=claims)


def _all_inline(provider: Any) -> bool:
    """Every expression is inline-safe. One that does not compile counts as inline: the in-process path
    reports it, in Flux's order (a failing variable before a broken validation)."""
    from ..core.cel import CELError, OutputType, compile_expression

    try:
        expressions = [
            *(
                compile_expression(v.expression, variables=["claims", "vars"], output=OutputType.ANY)
                for v in provider.variables or []
            ),
            *(
                compile_expression(v.expression, variables=["claims", "vars"], output=OutputType.BOOL)
                for v in provider.validations
            ),
        ]
    except CELError:
        return True
    return all(e.inline_safe for e in expressions)


def _evaluate_inline(provider: Any, claims: dict[str, Any]) -> list[str]:
    from ..core.cel import CELError, OutputType, compile_expression

    variables: dict[str, Any] = {}
    for variable in provider.variables or []:
        try:
            expr = compile_expression(
                variable.expression, variables=["claims", "vars"], output=OutputType.ANY
            )
            variables[variable.name] = expr.evaluate({"claims": claims, "vars": dict(variables)})
        except CELError as exc:
            raise VerificationError(f"failed to evaluate variable {variable.name!r}: {exc}") from None
    failures: list[str] = []
    for validation in provider.validations:
        try:
            expr = compile_expression(
                validation.expression, variables=["claims", "vars"], output=OutputType.BOOL
            )
            ok = expr.evaluate_bool({"claims": claims, "vars": variables})
        except CELError as exc:
            raise VerificationError(
                f"failed to evaluate validation {validation.expression!r}: {exc}"
            ) from None
        if not ok:
            failures.append(validation.message)
    return failures


async def _evaluate_in_sandbox(provider: Any, claims: dict[str, Any], ctx: VerifyContext) -> list[str]:
    from ..sandbox import SandboxFailure

    assert ctx.sandbox is not None
    variables = [(v.name, v.expression) for v in provider.variables or []]
    validations = list(provider.validations)
    try:
        outcome = await ctx.sandbox.oidc(
            claims,
            variables,
            [v.expression for v in validations],
            namespace=ctx.receiver.metadata.namespace,
        )
    except SandboxFailure as exc:
        raise VerificationError(f"failed to evaluate the CEL expressions: {exc}") from None
    failed, index = outcome.get("failed"), outcome.get("index")
    if isinstance(index, int) and failed == "variable" and 0 <= index < len(variables):
        raise VerificationError(
            f"failed to evaluate variable {variables[index][0]!r}: {outcome.get('error')}"
        )
    if isinstance(index, int) and failed == "validation" and 0 <= index < len(validations):
        raise VerificationError(
            f"failed to evaluate validation {validations[index].expression!r}: {outcome.get('error')}"
        )
    results = outcome.get("results")
    if not isinstance(results, list) or len(results) != len(validations):
        raise VerificationError("failed to evaluate the CEL expressions: unexpected sandbox answer")
    return [v.message for v, ok in zip(validations, results, strict=True) if ok is not True]
