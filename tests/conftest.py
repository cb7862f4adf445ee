"""Suite-wide fixtures.

The ``looptime`` plugin creates an event loop for synchronous tests through the policy and never closes
it; with ``filterwarnings = error`` the resulting ResourceWarning then fails whichever async test runs
next. Close any such stray loop after every test.

Hypothesis runs without its per-example deadline (200 ms by default): on this 2-core machine, under the
load of the rest of the suite, one slow example is noise, not a finding; every test still has pytest-timeout's
bound, and speed is measured in ``bench/``, not in tests.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@pytest.fixture(autouse=True)
def _no_stray_event_loop() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            return
    if not loop.is_running() and not loop.is_closed():
        loop.close()
        asyncio.set_event_loop(None)
