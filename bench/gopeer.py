"""The Go peer (``bench/gopeer/main.go``): build it, give it the controller's manifests, run it.

The moonshot column of issue 29: Flux's event path (decode, duplicate limiter, match every Alert, build
the generic payload, POST through a pooled ``net/http`` client) as cheap as Go makes it; main.go says what
it does and where it is cheaper than Flux. It is built here with Debian's ``golang-go`` (``bench/deps.sh``
installs it), standard library only, offline (``GOPROXY=off``, no module to download), into
``bench/.build/gopeer-<hash of the sources>`` (git-ignored): a changed source builds a new binary, an
unchanged one is reused across runs.

Go's standard library has no YAML parser, so :func:`write_config` turns the manifests directory the
controller reads into the JSON file the peer reads (the same Alerts and Providers, nothing else).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import orjson
import yaml

from .procs import ROOT, Helper

SOURCE = ROOT / "bench" / "gopeer"
BUILD = ROOT / "bench" / ".build"


class GoPeerUnavailable(RuntimeError):
    """No Go toolchain, or the peer did not build: the message says which."""


def go_binary() -> str | None:
    return shutil.which("go") or ("/usr/lib/go/bin/go" if Path("/usr/lib/go/bin/go").exists() else None)


def source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCE.iterdir()):
        if path.suffix in (".go", ".mod") or path.name == "go.mod":
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


async def build() -> Path:
    """The peer's binary, built once per source version (cached under bench/.build)."""
    out = BUILD / f"gopeer-{source_hash()}"
    if out.exists():
        return out
    go = go_binary()
    if go is None:
        raise GoPeerUnavailable("go is not installed: run `bash bench/deps.sh` (Debian's golang-go)")
    BUILD.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GOPROXY": "off",  # standard library only: nothing to download, ever
        "GOFLAGS": "-mod=mod",
        "GOCACHE": str(BUILD / "gocache"),
        "GOPATH": str(BUILD / "gopath"),
        "CGO_ENABLED": "0",
    }
    tmp = out.with_name(out.name + ".tmp")
    proc = await asyncio.create_subprocess_exec(
        go,
        "build",
        "-trimpath",
        "-o",
        str(tmp),
        ".",
        cwd=SOURCE,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    text, _ = await asyncio.wait_for(proc.communicate(), 300)
    if proc.returncode != 0:
        raise GoPeerUnavailable(f"go build of bench/gopeer failed:\n{text.decode(errors='replace')[-1500:]}")
    tmp.replace(out)
    return out


def write_config(manifests: Path, out: Path) -> Path:
    """``{"alerts": [...], "providers": [...]}`` from every YAML document under ``manifests``."""
    alerts: list[Any] = []
    providers: list[Any] = []
    for path in sorted(manifests.glob("*.y*ml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict):
                continue
            if doc.get("kind") == "Alert":
                alerts.append(doc)
            elif doc.get("kind") == "Provider":
                providers.append(doc)
    out.write_bytes(orjson.dumps({"alerts": alerts, "providers": providers}))
    return out


async def peer(manifests: Path, work: Path, log_dir: Path) -> Helper:
    """A not yet started Helper running the peer on ``manifests`` (``async with`` it)."""
    binary = await build()
    config = write_config(manifests, work / f"gopeer-{manifests.name}.json")
    return Helper("gopeer", ["--config", str(config)], log_dir, program=[str(binary)])
