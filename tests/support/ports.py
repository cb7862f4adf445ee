"""Free local ports for the controller processes the tests start (the controller binds them itself)."""

from __future__ import annotations

from bench.procs import PORT_NAMES as LISTENERS  # the bench starts the same four listeners
from bench.procs import free_ports  # one helper for the bench's controllers and the tests'

__all__ = ["LISTENERS", "free_port", "free_ports", "listener_ports"]


def free_port() -> int:
    return free_ports(1)[0]


def listener_ports() -> dict[str, int]:
    """A distinct free port for each of the controller's four listeners."""
    return dict(zip(LISTENERS, free_ports(len(LISTENERS)), strict=True))
