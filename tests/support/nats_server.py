"""A real ``nats-server`` for the ``nats`` provider tests, plus the key material its auth modes need.

``run_nats_server(config)`` starts the Debian ``nats-server`` binary on 127.0.0.1 with a random port
(``-p -1``; the port is read from the server's log, so there is no free-port race), waits until it
listens and stops it afterwards. When the binary is missing the test is skipped, except under CI
(``CI=true``), where a missing server is a failure: CI must install it (``apt-get install nats-server``).

``nkey_user()`` makes a user nkey pair; ``jwt_auth()`` makes an operator, an account and a user, the
server configuration that trusts them (memory resolver) and the user's ``.creds`` file, so the tests can
exercise decentralised JWT authentication without the ``nsc`` tool.

``run_nats_server(jetstream=True, store_dir=DIR)`` adds JetStream (``-js -sd DIR``) for the state layer's
tests (``notification_controller/store/nats.py``); pass the same ``store_dir`` and the ``port`` of a
previous run to restart "the same" server and check what survived.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

LISTEN_RE = re.compile(rb"Listening for client connections on [^\s:]+:(\d+)")


def nats_server_binary() -> str:
    """The path of ``nats-server``; skip the test (fail under CI) when it is not installed."""
    found = shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if os.path.exists("/usr/sbin/nats-server") else None
    )
    if found is None:
        message = "nats-server is not installed (apt-get install nats-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


@dataclass
class NATSServer:
    url: str
    port: int


@contextlib.asynccontextmanager
async def run_nats_server(
    config: str = "",
    *,
    timeout: float = 15.0,
    jetstream: bool = False,
    store_dir: str | None = None,
    port: int = -1,
) -> AsyncIterator[NATSServer]:
    binary = nats_server_binary()
    with tempfile.TemporaryDirectory(prefix="nats-test-") as tmp:
        conf = os.path.join(tmp, "server.conf")
        with open(conf, "w", encoding="utf-8") as fh:
            fh.write(config)
        js_args = ["-js", "-sd", store_dir or os.path.join(tmp, "js")] if jetstream else []
        proc = await asyncio.create_subprocess_exec(
            binary,
            "-a",
            "127.0.0.1",
            "-p",
            str(port),
            "-c",
            conf,
            *js_args,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            assert proc.stderr is not None
            port = 0
            log: list[bytes] = []
            async with asyncio.timeout(timeout):
                while not port:
                    line = await proc.stderr.readline()
                    if not line:
                        raise RuntimeError("nats-server exited: " + b"".join(log).decode(errors="replace"))
                    log.append(line)
                    match = LISTEN_RE.search(line)
                    if match:
                        port = int(match.group(1))
            drain = asyncio.create_task(_drain(proc.stderr))
            try:
                yield NATSServer(f"nats://127.0.0.1:{port}", port)
            finally:
                drain.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await drain
        finally:
            if proc.returncode is None:
                proc.terminate()
                try:
                    async with asyncio.timeout(10):
                        await proc.wait()
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


# ----------------------------------------------------------------------------------------------------
# Key material
# ----------------------------------------------------------------------------------------------------


def _nkeys() -> Any:
    """The ``nkeys`` module (``nats-py[nkeys]``), imported lazily so the module loads without it."""
    import nkeys

    return nkeys


@dataclass(frozen=True)
class NKey:
    seed: str  # "S..."
    public: str  # "U...", "A...", "O..."

    def sign(self, data: bytes) -> bytes:
        nkeys = _nkeys()

        keypair = nkeys.from_seed(bytearray(self.seed.encode()))
        try:
            return bytes(keypair.sign(data))
        finally:
            keypair.wipe()


def make_nkey(prefix: int) -> NKey:
    nkeys = _nkeys()

    seed = nkeys.encode_seed(os.urandom(32), prefix)
    keypair = nkeys.from_seed(bytearray(seed))
    public = keypair.public_key.decode()
    keypair.wipe()
    return NKey(bytes(seed).decode(), public)


def nkey_user() -> NKey:
    nkeys = _nkeys()

    return make_nkey(nkeys.PREFIX_BYTE_USER)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _encode_jwt(claims: dict[str, Any], signer: NKey) -> str:
    claims = dict(claims)
    claims["iat"] = int(time.time())
    claims["iss"] = signer.public
    claims["jti"] = base64.b32encode(
        hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()
    ).decode()
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64(json.dumps(claims).encode())
    signature = _b64(signer.sign(f"{header}.{payload}".encode()))
    return f"{header}.{payload}.{signature}"


@dataclass(frozen=True)
class JWTAuth:
    server_config: str
    creds: str
    user: NKey


def jwt_auth() -> JWTAuth:
    """Operator → account → user, the server config trusting them, and the user's ``.creds`` content."""
    nkeys = _nkeys()

    operator = make_nkey(nkeys.PREFIX_BYTE_OPERATOR)
    account = make_nkey(nkeys.PREFIX_BYTE_ACCOUNT)
    user = nkey_user()
    no_limit = -1
    operator_jwt = _encode_jwt(
        {"name": "test-operator", "sub": operator.public, "nats": {"type": "operator", "version": 2}},
        operator,
    )
    account_jwt = _encode_jwt(
        {
            "name": "test-account",
            "sub": account.public,
            "nats": {
                "limits": {
                    "subs": no_limit,
                    "data": no_limit,
                    "payload": no_limit,
                    "imports": no_limit,
                    "exports": no_limit,
                    "wildcards": True,
                    "conn": no_limit,
                    "leaf": no_limit,
                },
                "default_permissions": {"pub": {}, "sub": {}},
                "type": "account",
                "version": 2,
            },
        },
        operator,
    )
    user_jwt = _encode_jwt(
        {
            "name": "test-user",
            "sub": user.public,
            "nats": {
                "pub": {},
                "sub": {},
                "subs": no_limit,
                "data": no_limit,
                "payload": no_limit,
                "type": "user",
                "version": 2,
            },
        },
        account,
    )
    config = (
        f"operator: {operator_jwt}\n"
        "resolver: MEMORY\n"
        f"resolver_preload: {{\n  {account.public}: {account_jwt}\n}}\n"
    )
    creds = (
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{user.seed}\n"
        "------END USER NKEY SEED------\n"
    )
    return JWTAuth(config, creds, user)
