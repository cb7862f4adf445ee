"""The local OIDC issuer (gcr, generic-oidc) as a fixture."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.receiver_kit import LocalIssuer


@pytest.fixture
async def issuer() -> AsyncIterator[LocalIssuer]:
    async with LocalIssuer() as running:
        yield running
