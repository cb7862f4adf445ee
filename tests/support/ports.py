"""Free local ports for the controller processes the tests start (the controller binds them itself)."""

from __future__ import annotations

import contextlib
import socket

LISTENERS = ("events", "receiver", "metrics", "health")


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1. The sockets stay bound until all are chosen: released one at
    a time, the kernel may hand the same port out twice (health and metrics once got the same one)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port() -> int:
    return free_ports(1)[0]


def listener_ports() -> dict[str, int]:
    """A distinct free port for each of the controller's four listeners."""
    return dict(zip(LISTENERS, free_ports(len(LISTENERS)), strict=True))
