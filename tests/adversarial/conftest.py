"""Registers the ``slow`` marker of the adversarial suite (``-m "not slow"`` skips the multi-second tests)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: adversarial test that waits on real timers (seconds); the suite stays under 3 min"
    )
