"""How the controller reaches NATS: the credentials and TLS (``NATSAuth``) and the replica rule
(``replicas_for``), shared by the state store (``store/nats.py``) and the history stream
(``history/nats.py``), which sit side by side in the layers and do not import each other."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

MAX_REPLICAS = 5
"""JetStream's own limit on a stream's replicas."""


@dataclass(frozen=True)
class NATSAuth:
    """How to authenticate and secure the connection (all optional; files are mounted Secrets)."""

    creds_file: str | None = None
    user: str | None = None
    password: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None

    def ssl_context(self) -> ssl.SSLContext | None:
        if not (self.tls_ca_file or self.tls_cert_file):
            return None
        ctx = ssl.create_default_context(cafile=self.tls_ca_file)
        if self.tls_cert_file:
            ctx.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        return ctx

    def __repr__(self) -> str:  # never print the password
        return f"NATSAuth(creds_file={self.creds_file!r}, user={self.user!r}, password=***)"


def replicas_for(server_info: dict[str, Any]) -> int:
    """The replica count to use when none is asked for: the size of the JetStream cluster the client is
    connected to (the server's INFO: ``cluster`` is set on a clustered server, ``connect_urls`` lists every
    member's client address, itself included), capped at ``MAX_REPLICAS``; 1 on a single server. A cluster
    that does not advertise its members (``no_advertise``) is taken to have three: the usual size, and the
    smallest that survives the loss of one node; a smaller one then refuses the streams loudly at start."""
    if not server_info.get("cluster"):
        return 1
    members = len(set(server_info.get("connect_urls") or ()))
    return max(1, min(members if members else 3, MAX_REPLICAS))
