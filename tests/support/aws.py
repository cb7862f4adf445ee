"""AWS test support: botocore's SigV4 check of a captured request, and moto's server in a subprocess.

``verify_sigv4`` recomputes the signature of a request as a real AWS endpoint would (botocore's
``SigV4Auth``, what moto's own IAM check runs), from the headers the request says it signed, and compares.

``MotoServer`` runs ``python -m moto.server`` on 127.0.0.1 (a subprocess: moto's settings, such as whether
requests are authenticated, are module globals and must not leak into this process), waits until it
answers, and stops it. ``require_auth`` turns moto's IAM checks on from then on (``/moto-api/reset-auth``):
every request must then be signed by a key moto issued, with a policy that allows the action.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from types import TracebackType
from typing import Any

from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials as BotoCredentials  # type: ignore[import-untyped]

from tests.support.capture import CapturedRequest
from tests.support.ports import free_port


def verify_sigv4(req: CapturedRequest, secret_key: str, session_token: str = "") -> dict[str, str]:
    """Check the request's Authorization with botocore; return its parts (Credential, SignedHeaders...)."""
    authorization = req.headers["Authorization"]
    algorithm, _, rest = authorization.partition(" ")
    assert algorithm == "AWS4-HMAC-SHA256", authorization
    parts = dict(item.strip().split("=", 1) for item in rest.split(","))
    access_key, date, region, service, terminal = parts["Credential"].split("/")
    assert terminal == "aws4_request"
    signed = parts["SignedHeaders"].split(";")
    headers = {name: req.headers[name] for name in signed}
    assert headers["x-amz-date"].startswith(date)
    request = AWSRequest(method=req.method, url=f"http://{req.headers['Host']}{req.raw_path}", data=req.body)
    for name, value in headers.items():
        request.headers[name] = value
    request.context["timestamp"] = headers["x-amz-date"]
    auth = SigV4Auth(BotoCredentials(access_key, secret_key, session_token or None), service, region)
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    assert parts["Signature"] == expected, f"botocore computes {expected} for:\n{canonical}"
    return {"access_key": access_key, "region": region, "service": service, **parts}


class MotoServer:
    """``python -m moto.server`` on a free port of 127.0.0.1, in a subprocess."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "MOTO_PORT": str(self.port)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        deadline = time.monotonic() + 60  # generous: a loaded machine imports moto slowly
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def require_auth(self, free: int = 0) -> None:
        """After the next ``free`` actions, every request must be signed by a moto-issued key allowed by an
        IAM policy (moto cannot check an unsigned STS ``AssumeRoleWithWebIdentity``: it answers 500; a free
        action lets one through)."""
        request = urllib.request.Request(
            f"{self.url}/moto-api/reset-auth",
            data=str(free).encode(),
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def client(self, service: str, **kw: Any) -> Any:
        import boto3  # type: ignore[import-untyped]

        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=kw.pop("region_name", "us-east-1"),
            aws_access_key_id=kw.pop("aws_access_key_id", "AKIAIOSFODNN7EXAMPLE"),
            aws_secret_access_key=kw.pop("aws_secret_access_key", "not-checked-until-require-auth"),
            **kw,
        )

    async def __aenter__(self) -> MotoServer:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)
