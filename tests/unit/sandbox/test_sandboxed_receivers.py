"""Receiver CEL through the sandbox (issue 23): a resource filter and generic-oidc's claims chain that are
not inline-safe run in a worker and give the same answers as in process; a hostile one fails that request
(the resource is not annotated, the token is refused) within the sandbox's timeout instead of freezing the
receiver port."""

from __future__ import annotations

import time
from typing import Any

import pytest

from notification_controller.api.receiver import OIDCProvider
from notification_controller.errors import VerificationError
from notification_controller.lib.clock import SystemClock
from notification_controller.objects.base import ObjectStore
from notification_controller.objects.local import LocalCluster
from notification_controller.receivers import generic_oidc
from notification_controller.receivers.base import VerifyContext
from notification_controller.receivers.targets import Trigger, compile_filters
from notification_controller.sandbox import SandboxPool, SandboxSettings
from tests.support.receiver_kit import GIT, make_receiver

N = "res.metadata.name.split('')"
SLOW = f"{N}.all(a, {N}.all(b, {N}.all(c, {N}.all(d, a == d))))"  # 250⁴ steps


def cluster_with(name: str) -> LocalCluster:
    cluster = LocalCluster(ObjectStore())
    cluster.others[("GitRepository", "default", name)] = {
        "apiVersion": GIT,
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": "default", "labels": {"team": "a"}},
    }
    return cluster


@pytest.mark.timeout(60)
async def test_resource_filters_run_in_the_sandbox_with_the_same_answers() -> None:
    name = "w" * 250
    async with SandboxPool(SandboxSettings(workers=1, timeout=0.5)) as pool:
        for source, annotated in (
            ("res.metadata.labels.exists(k, k == 'team')", True),
            ("res.metadata.labels.exists(k, k == 'other')", False),
        ):
            receiver, _ = make_receiver(
                "generic",
                resources=[{"apiVersion": GIT, "kind": "GitRepository", "name": name}],
                resource_filter=source,
            )
            filters = compile_filters(receiver, ["res", "req"])
            trigger = Trigger(cluster_with(name), SystemClock(), sandbox=pool)
            result = await trigger.run(receiver, filters, req={}, claims=None)
            assert bool(result.annotated) is annotated, result
        assert pool.starts == 1

        receiver, _ = make_receiver(
            "generic",
            resources=[{"apiVersion": GIT, "kind": "GitRepository", "name": name}],
            resource_filter=SLOW,
        )
        started = time.monotonic()
        result = await Trigger(cluster_with(name), SystemClock(), sandbox=pool).run(
            receiver, compile_filters(receiver, ["res", "req"]), req={}, claims=None
        )
        assert not result.annotated and "sandbox" in result.errors[0], result
        assert time.monotonic() - started < 10


def oidc_provider(variables: list[dict[str, str]], validations: list[dict[str, str]]) -> OIDCProvider:
    return OIDCProvider.model_validate(
        {"issuerURL": "https://issuer.example", "variables": variables, "validations": validations}
    )


@pytest.mark.timeout(60)
async def test_the_oidc_chain_runs_in_one_sandbox_job_with_the_same_answers() -> None:
    claims: dict[str, Any] = {"groups": ["a", "b"], "sub": "x" * 60000}
    provider = oidc_provider(
        [{"name": "n", "expression": "claims.groups.map(g, g + '-x')"}],
        [
            {"expression": "'a-x' in vars.n", "message": "must be a"},
            {"expression": "vars.n.size() > 5", "message": "too few"},
        ],
    )
    receiver, _ = make_receiver("generic-oidc", oidc_providers=[])
    async with SandboxPool(SandboxSettings(workers=1, timeout=0.5)) as pool:
        ctx = VerifyContext(receiver=receiver, secret=None, clock=SystemClock(), sandbox=pool)
        assert not generic_oidc._all_inline(provider)
        assert await generic_oidc._evaluate_in_sandbox(provider, claims, ctx) == ["too few"]
        assert generic_oidc._evaluate_inline(provider, claims) == ["too few"]

        hostile = oidc_provider(
            [],
            [
                {
                    "expression": "claims.sub.split('').all(a, claims.sub.split('').all(b, a == b))",
                    "message": "m",
                }
            ],
        )
        started = time.monotonic()
        with pytest.raises(VerificationError, match="sandbox"):
            await generic_oidc._evaluate_in_sandbox(hostile, claims, ctx)
        assert time.monotonic() - started < 10

        broken = oidc_provider(
            [{"name": "v", "expression": "claims.nope.map(x, x)"}], [{"expression": "true", "message": "m"}]
        )
        with pytest.raises(VerificationError, match="failed to evaluate variable 'v'"):
            await generic_oidc._evaluate_in_sandbox(broken, claims, ctx)
