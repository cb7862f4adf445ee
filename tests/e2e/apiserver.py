"""A real Kubernetes API server (kube-apiserver v1.20.2 + etcd) for end-to-end tests.

The kube-apiserver binary is built once from Debian's ``kubernetes`` source package by
``tests/e2e/build-apiserver.sh`` and cached under ``~/.cache/notification-controller/``;
etcd comes from Debian's ``etcd-server`` package.  There is no kube-controller-manager,
scheduler or kubelet: objects are stored and served, RBAC is enforced, admission runs
(minus the ``ServiceAccount`` plugin), but nothing reconciles (namespaces never finish
deleting, no default ServiceAccount appears, pods never run).

Only the standard library, ``cryptography`` and ``pyyaml`` are used.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.pki import make_ca
from tests.support.ports import free_port, free_ports

__all__ = [
    "BUILD_SCRIPT",
    "KubeTestServer",
    "KubeTestServerError",
    "ensure_apiserver_binary",
]

BUILD_SCRIPT: Final = Path(__file__).resolve().with_name("build-apiserver.sh")
DEFAULT_KUBECTL: Final = "/usr/bin/kubectl"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
LEGACY_SERVICE_ACCOUNT_ISSUER: Final = "kubernetes/serviceaccount"
ADMIN_USER: Final = "e2e-admin"
# Admission plugins that wait for objects only kube-controller-manager would create.
DISABLED_ADMISSION_PLUGINS: Final = ("ServiceAccount",)


class KubeTestServerError(RuntimeError):
    """Building or running the test API server failed."""


def ensure_apiserver_binary(timeout: float = 3600.0) -> Path:
    """Return the kube-apiserver binary, building it with build-apiserver.sh if needed.

    ``KUBE_APISERVER_BIN`` overrides the script.  Fast (well under a second) once cached.
    """
    override = os.environ.get("KUBE_APISERVER_BIN")
    if override:
        path = Path(override)
        if not os.access(path, os.X_OK):
            raise KubeTestServerError(f"KUBE_APISERVER_BIN={override} is not an executable file")
        return path
    env = dict(os.environ)
    env.setdefault("DEBIAN_FRONTEND", "noninteractive")
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise KubeTestServerError(f"{BUILD_SCRIPT} timed out after {timeout:.0f}s") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise KubeTestServerError(f"{BUILD_SCRIPT} failed with exit code {proc.returncode}:\n{tail}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise KubeTestServerError(f"{BUILD_SCRIPT} printed no binary path")
    path = Path(lines[-1].strip())
    if not os.access(path, os.X_OK):
        raise KubeTestServerError(f"{BUILD_SCRIPT} printed {path}, which is not executable")
    return path


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "<no log>"
    return "\n".join(text.splitlines()[-lines:])


class _Process:
    """A child process whose output goes to a log file."""

    def __init__(self, name: str, args: list[str], log_path: Path) -> None:
        self.name = name
        self.args = args
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc: subprocess.Popen[bytes] = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=timeout)
            else:
                self.proc.wait()
        finally:
            self._log.close()


class KubeTestServer:
    """etcd + kube-apiserver on free 127.0.0.1 ports, with an admin token and kubeconfig.

    Usage::

        with KubeTestServer() as kube:
            kube.kubectl("get", "ns").check_returncode()

    Attributes available after :meth:`start`: ``url``, ``token``, ``kubeconfig`` (Path),
    ``ca_file`` (Path of the CA that signed the serving certificate), ``workdir``,
    ``etcd_url``, ``port``.
    """

    def __init__(
        self,
        apiserver_bin: str | os.PathLike[str] | None = None,
        *,
        etcd_bin: str | os.PathLike[str] | None = None,
        kubectl_bin: str | os.PathLike[str] = DEFAULT_KUBECTL,
        workdir: str | os.PathLike[str] | None = None,
        request_timeout: str = "30s",
        startup_timeout: float = 120.0,
        extra_apiserver_args: list[str] | None = None,
        keep_workdir: bool | None = None,
    ) -> None:
        self._apiserver_bin = Path(apiserver_bin) if apiserver_bin is not None else None
        etcd = str(etcd_bin) if etcd_bin is not None else (os.environ.get("ETCD_BIN") or shutil.which("etcd"))
        self._etcd_bin = etcd
        self.kubectl_bin = str(kubectl_bin)
        self.request_timeout = request_timeout
        self.startup_timeout = startup_timeout
        self.extra_apiserver_args = list(extra_apiserver_args or [])
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="kube-e2e-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        if keep_workdir is None:
            keep_workdir = os.environ.get("NC_E2E_KEEP_WORKDIR", "") not in ("", "0")
        self.keep_workdir = keep_workdir

        self.token: str = base64.b32encode(os.urandom(20)).decode("ascii").lower()
        self.port: int = 0
        self.etcd_port: int = 0
        self.ca_file: Path = self.workdir / "ca.crt"
        self.kubeconfig: Path = self.workdir / "admin.kubeconfig"
        self.sa_key_file: Path = self.workdir / "sa.key"
        self.sa_pub_file: Path = self.workdir / "sa.pub"
        self._tls_cert_file = self.workdir / "apiserver.crt"
        self._tls_key_file = self.workdir / "apiserver.key"
        self._token_file = self.workdir / "tokens.csv"
        self._sa_key: rsa.RSAPrivateKey | None = None
        self._etcd: _Process | None = None
        self._apiserver: _Process | None = None
        self._ssl: ssl.SSLContext | None = None
        self._closed = False
        self._started = False

    # ------------------------------------------------------------------ properties
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def apiserver_log(self) -> Path:
        return self.workdir / "kube-apiserver.log"

    @property
    def etcd_log(self) -> Path:
        return self.workdir / "etcd.log"

    def ssl_context(self) -> ssl.SSLContext:
        """An SSL context that trusts the server's CA."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        return self._ssl

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> KubeTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> KubeTestServer:
        """Generate credentials, start etcd and kube-apiserver, write the kubeconfig."""
        if self._started:
            return self
        if self._closed:
            raise KubeTestServerError("server was closed")
        self._started = True
        atexit.register(self.close)
        try:
            if self._apiserver_bin is None:
                self._apiserver_bin = ensure_apiserver_binary()
            if not self._etcd_bin:
                raise KubeTestServerError("etcd not found on PATH (apt-get install etcd-server)")
            if not os.access(self.kubectl_bin, os.X_OK):
                raise KubeTestServerError(f"kubectl not found at {self.kubectl_bin}")
            self._write_credentials()
            self._start_etcd()
            self._start_apiserver_on_free_port()
            self._write_kubeconfig(self.kubeconfig, self.token, user=ADMIN_USER, namespace="default")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop both processes and remove the work directory (unless kept)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        for attr in ("_apiserver", "_etcd"):
            proc: _Process | None = getattr(self, attr)
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.stop()
                setattr(self, attr, None)
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver only (etcd keeps running with all the data)."""
        if self._apiserver is not None:
            self._apiserver.stop()
            self._apiserver = None

    def start_apiserver(self) -> None:
        """(Re)start kube-apiserver on the same port and wait until it is ready."""
        if self._closed or not self._started:
            raise KubeTestServerError("start() the server first")
        if self._apiserver is not None and self._apiserver.running():
            return
        self._apiserver = None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            # The old listener may linger for a moment; retry on "address already in use".
            try:
                self._launch_apiserver()
                return
            except KubeTestServerError as exc:
                if "address already in use" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    # ------------------------------------------------------------------ kubectl / REST
    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = False,
        timeout: float = 120.0,
        kubeconfig: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this server (admin kubeconfig unless ``kubeconfig`` is given)."""
        cmd = [
            self.kubectl_bin,
            f"--kubeconfig={kubeconfig if kubeconfig is not None else self.kubeconfig}",
            f"--request-timeout={self.request_timeout}",
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        proc = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise KubeTestServerError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"
            )
        return proc

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """One REST call; returns (HTTP status, parsed JSON body or text). Never raises on 4xx/5xx."""
        data: bytes | None
        if body is None:
            data = None
        elif isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method.upper())
        req.add_header("Authorization", f"Bearer {token if token is not None else self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as resp:
                status: int = resp.status
                raw: bytes = resp.read()
        except urllib.error.HTTPError as err:
            status = err.code
            with err:
                raw = err.read()
        text = raw.decode("utf-8", errors="replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    # ------------------------------------------------------------------ service accounts
    def ensure_service_account(self, namespace: str, name: str) -> dict[str, Any]:
        """Return the ServiceAccount object, creating it if it does not exist."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        status, obj = self.request("GET", f"{path}/{name}")
        if status == 404:
            status, obj = self.request(
                "POST",
                path,
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            )
            if status == 409:
                status, obj = self.request("GET", f"{path}/{name}")
        if status not in (200, 201) or not isinstance(obj, dict):
            raise KubeTestServerError(f"cannot get/create ServiceAccount {namespace}/{name}: {status} {obj}")
        return obj

    def service_account_token(
        self,
        namespace: str,
        name: str,
        *,
        expiration_seconds: int = 3600,
        audiences: list[str] | None = None,
    ) -> str:
        """A bound token for the ServiceAccount from the TokenRequest API (created if missing)."""
        self.ensure_service_account(namespace, name)
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = audiences
        status, obj = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        if status not in (200, 201) or not isinstance(obj, dict):
            raise KubeTestServerError(f"TokenRequest for {namespace}/{name} failed: {status} {obj}")
        token = obj.get("status", {}).get("token")
        if not isinstance(token, str) or not token:
            raise KubeTestServerError(f"TokenRequest for {namespace}/{name} returned no token: {obj}")
        return token

    def legacy_service_account_token(self, namespace: str, name: str) -> str:
        """Mint a legacy (secret-based, non-expiring) token the way the token controller would.

        Creates the ServiceAccount if missing and a ``kubernetes.io/service-account-token``
        Secret holding the signed JWT (the apiserver checks the Secret's copy).
        """
        sa = self.ensure_service_account(namespace, name)
        uid = str(sa["metadata"]["uid"])
        secret_name = f"{name}-token-{uuid.uuid4().hex[:5]}"
        claims = {
            "iss": LEGACY_SERVICE_ACCOUNT_ISSUER,
            "kubernetes.io/serviceaccount/namespace": namespace,
            "kubernetes.io/serviceaccount/secret.name": secret_name,
            "kubernetes.io/serviceaccount/service-account.name": name,
            "kubernetes.io/serviceaccount/service-account.uid": uid,
            "sub": f"system:serviceaccount:{namespace}:{name}",
        }
        token = self._sign_jwt(claims)
        status, obj = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {
                    "name": secret_name,
                    "annotations": {
                        "kubernetes.io/service-account.name": name,
                        "kubernetes.io/service-account.uid": uid,
                    },
                },
                "data": {
                    "token": base64.b64encode(token.encode()).decode(),
                    "namespace": base64.b64encode(namespace.encode()).decode(),
                    "ca.crt": base64.b64encode(self.ca_file.read_bytes()).decode(),
                },
            },
        )
        if status not in (200, 201):
            raise KubeTestServerError(f"cannot create token Secret {namespace}/{secret_name}: {status} {obj}")
        return token

    def create_service_account_kubeconfig(
        self,
        namespace: str,
        sa_name: str,
        *,
        legacy: bool = False,
        expiration_seconds: int = 3600,
    ) -> Path:
        """Write a kubeconfig that authenticates as ``system:serviceaccount:<namespace>:<sa_name>``.

        Uses the TokenRequest API (bound token, ``expiration_seconds``), or a minted legacy
        secret-based token with ``legacy=True``.  Creates the ServiceAccount if missing.
        """
        if legacy:
            token = self.legacy_service_account_token(namespace, sa_name)
        else:
            token = self.service_account_token(namespace, sa_name, expiration_seconds=expiration_seconds)
        path = self.workdir / f"sa-{namespace}-{sa_name}{'-legacy' if legacy else ''}.kubeconfig"
        self._write_kubeconfig(path, token, user=f"{namespace}-{sa_name}", namespace=namespace)
        return path

    # ------------------------------------------------------------------ internals
    def _sign_jwt(self, claims: dict[str, Any]) -> str:
        if self._sa_key is None:
            raise KubeTestServerError("service-account key not generated yet")
        der = self._sa_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        header = {"alg": "RS256", "kid": _b64url(hashlib.sha256(der).digest())}
        signing_input = (
            _b64url(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + _b64url(json.dumps(claims, separators=(",", ":")).encode())
        )
        signature = self._sa_key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return signing_input + "." + _b64url(signature)

    def _write_credentials(self) -> None:
        now = datetime.datetime.now(datetime.UTC)
        not_before = now - datetime.timedelta(hours=1)
        not_after = now + datetime.timedelta(days=30)

        ca_key, ca_cert = make_ca("kube-e2e-ca", not_before, not_after)

        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = [
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
            x509.DNSName("kubernetes.default.svc.cluster.local"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        ]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        self.ca_file.write_bytes(_pem_cert(ca_cert))
        self._tls_cert_file.write_bytes(_pem_cert(cert) + _pem_cert(ca_cert))
        self._tls_key_file.write_bytes(_pem_key(key))
        self._tls_key_file.chmod(0o600)

        self._sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key_file.write_bytes(_pem_key(self._sa_key))
        self.sa_key_file.chmod(0o600)
        self.sa_pub_file.write_bytes(
            self._sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        # token,user,uid,"group1,group2"
        self._token_file.write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        self._token_file.chmod(0o600)

    def _write_kubeconfig(self, path: Path, token: str, *, user: str, namespace: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(self.ca_file.read_bytes()).decode(),
                    },
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {"name": "e2e", "context": {"cluster": "e2e", "user": user, "namespace": namespace}}
            ],
            "current-context": "e2e",
            "preferences": {},
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)

    def _start_etcd(self) -> None:
        assert self._etcd_bin is not None
        data_dir = self.workdir / "etcd-data"
        for _attempt in range(5):
            self.etcd_port, peer_port = free_ports(2)
            peer = f"http://127.0.0.1:{peer_port}"
            data_dir.mkdir(mode=0o700, exist_ok=True)
            self._etcd = _Process(
                "etcd",
                [
                    self._etcd_bin,
                    "--name=e2e",
                    f"--data-dir={data_dir}",
                    f"--listen-client-urls={self.etcd_url}",
                    f"--advertise-client-urls={self.etcd_url}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=e2e={peer}",
                    "--initial-cluster-state=new",
                    "--logger=zap",
                    "--log-level=warn",
                ],
                self.etcd_log,
            )
            try:
                self._wait_ready(self._etcd, self._etcd_health)
                return
            except KubeTestServerError as exc:
                self._etcd.stop()
                self._etcd = None
                if "address already in use" not in str(exc):
                    raise
                shutil.rmtree(data_dir, ignore_errors=True)
        raise KubeTestServerError("could not find free ports for etcd")

    def _etcd_health(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2.0) as resp:
                body = json.loads(resp.read())
        except (OSError, ValueError):
            return False
        return isinstance(body, dict) and str(body.get("health")) == "true"

    def _start_apiserver_on_free_port(self) -> None:
        for _attempt in range(5):
            self.port = free_port()
            try:
                self._launch_apiserver()
                return
            except KubeTestServerError as exc:
                if "address already in use" not in str(exc):
                    raise
        raise KubeTestServerError("could not find a free port for kube-apiserver")

    def _apiserver_args(self) -> list[str]:
        assert self._apiserver_bin is not None
        return [
            str(self._apiserver_bin),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            "--insecure-port=0",
            f"--cert-dir={self.workdir / 'certs'}",
            f"--tls-cert-file={self._tls_cert_file}",
            f"--tls-private-key-file={self._tls_key_file}",
            f"--client-ca-file={self.ca_file}",
            f"--token-auth-file={self._token_file}",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            f"--service-account-key-file={self.sa_pub_file}",
            f"--service-account-signing-key-file={self.sa_key_file}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            "--service-account-lookup=true",
            f"--disable-admission-plugins={','.join(DISABLED_ADMISSION_PLUGINS)}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
            *self.extra_apiserver_args,
        ]

    def _launch_apiserver(self) -> None:
        proc = _Process("kube-apiserver", self._apiserver_args(), self.apiserver_log)
        try:
            self._wait_ready(proc, self._apiserver_ready)
        except BaseException:
            proc.stop()
            raise
        self._apiserver = proc

    def _apiserver_ready(self) -> bool:
        try:
            status, _ = self.request("GET", "/readyz", timeout=5.0)
        except (OSError, ssl.SSLError):
            return False
        return status == 200

    def _wait_ready(self, proc: _Process, probe: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not proc.running():
                log = _tail(proc.log_path)
                raise KubeTestServerError(
                    f"{proc.name} exited with code {proc.proc.returncode} during startup; "
                    f"log {proc.log_path}:\n{log}"
                )
            if probe():
                return
            time.sleep(0.25)
        raise KubeTestServerError(
            f"{proc.name} not ready after {self.startup_timeout:.0f}s; log {proc.log_path}:\n{_tail(proc.log_path)}"
        )
