"""``notification-controller get alerts|providers|receivers|silences``: ``flux get`` without Flux's CLI or a
cluster.

In a cluster ``kubectl get`` and ``flux get alerts`` read the status the controller writes; in local mode
(``--manifests``) there is no API server, and the status lived only in the logs (issue 25 item 8). This
command reads it from the running controller's ``/status`` (server/health.py, on ``--health-addr``), or,
with ``--kubeconfig``, from the cluster once (read-only, through kube/'s client). Both go through
``server.health.summarise``, so the two modes print the same columns for the same object.

Columns are ``flux get``'s (cmd/flux/get_alert.go and friends): NAME, READY, MESSAGE, SUSPENDED, with
NAMESPACE first under ``-A``; Silences (ours, issue 26) have no ``suspend``: NAME, READY, STATE, ENDS, HELD,
MESSAGE, the CRD's columns and the controller's Ready (in local mode the only place their status shows); an object without a Ready condition reads ``False`` / "waiting to be
reconciled", as there. ``-o text|json|yaml`` as every command. Exit status: 0 shown (an empty list says so
in words), 1 the source could not be read, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .lib.output import add_output_flag, dump, escape_cell, table
from .server.health import summarise

KINDS = {
    "alerts": "Alert",
    "alert": "Alert",
    "providers": "Provider",
    "provider": "Provider",
    "receivers": "Receiver",
    "receiver": "Receiver",
    "silences": "Silence",
    "silence": "Silence",
}
DEFAULT_NAMESPACE = "flux-system"
DEFAULT_ADDR = "127.0.0.1:9440"
"""The controller's ``--health-addr`` as ``make run`` binds it (``:9440`` in a pod)."""
TIMEOUT = 10.0


class SourceError(Exception):
    """The controller or the cluster could not be read."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="notification-controller get",
        description="Show Alerts, Providers, Receivers or Silences and their Ready status, as 'flux get' does.",
    )
    parser.add_argument("kind", choices=sorted(KINDS), metavar="alerts|providers|receivers|silences")
    parser.add_argument("name", nargs="?", help="only this object")
    parser.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help=f"default {DEFAULT_NAMESPACE}")
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--addr",
        default=DEFAULT_ADDR,
        help=f"the running controller's --health-addr (local mode; default {DEFAULT_ADDR})",
    )
    source.add_argument("--kubeconfig", help="read from this cluster instead (once, read-only)")
    add_output_flag(parser)
    return parser


def from_controller(addr: str, kind: str) -> list[dict[str, Any]]:
    host = addr if "://" in addr else f"http://{addr if not addr.startswith(':') else '127.0.0.1' + addr}"
    url = f"{host.rstrip('/')}/status?kind={kind}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:  # noqa: S310 (http only, our address)
            data = json.loads(response.read(16 << 20))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise SourceError(f"the controller at {addr} did not answer /status: {reason}") from None
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise SourceError(f"the controller at {addr} answered /status without items")
    return [i for i in items if isinstance(i, dict)]


async def from_cluster(kubeconfig: str, kind: str, namespace: str | None) -> list[dict[str, Any]]:
    from .errors import ControllerError
    from .kube.client import KubeClient
    from .kube.informer import ALERTS, PROVIDERS, RECEIVERS, SILENCES  # the versions the controller watches

    resource = {"Alert": ALERTS, "Provider": PROVIDERS, "Receiver": RECEIVERS, "Silence": SILENCES}[kind]
    try:
        client = await KubeClient.connect(kubeconfig)
    except (ControllerError, OSError, ValueError) as exc:
        raise SourceError(f"cannot use {kubeconfig}: {exc}") from None
    try:
        items, _ = await client.list(resource.path(namespace))
    except (ControllerError, OSError) as exc:
        if kind == "Silence" and getattr(exc, "status", 0) == 404:
            raise SourceError(
                f"{resource.plural}.{resource.group} is not installed in this cluster"
            ) from None
        raise SourceError(f"cannot list {resource.plural}: {exc}") from None
    finally:
        await client.close()
    return [summarise({**raw, "kind": kind}) for raw in items]


def render(rows: list[dict[str, Any]], kind: str, namespace: str | None, output: str, out: TextIO) -> None:
    """``namespace`` None: every namespace (a NAMESPACE column first)."""
    if output != "text":
        dump(rows, output, out)
        return
    if not rows:
        where = "any namespace" if namespace is None else f"namespace {namespace!r}"
        out.write(f"no {kind} objects found in {where}\n")
        return
    all_namespaces = namespace is None
    columns = ["namespace"] if all_namespaces else []
    if kind == "Silence":
        columns += ["name", "ready", "state", "ends", "held", "message"]
    else:
        columns += ["name", "ready", "message", "suspended"]
    cells = [
        [escape_cell(str(row["suspended"]).title() if c == "suspended" else str(row[c])) for c in columns]
        for row in rows
    ]
    table(columns, cells, out)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    out = out or sys.stdout
    kind = KINDS[args.kind]
    namespace = None if args.all_namespaces else args.namespace
    try:
        if args.kubeconfig:
            if not Path(args.kubeconfig).is_file():
                raise SourceError(f"{args.kubeconfig}: no such kubeconfig file")
            rows = asyncio.run(from_cluster(args.kubeconfig, kind, namespace))
        else:
            rows = from_controller(args.addr, kind)
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rows = [
        r
        for r in rows
        if (namespace is None or r["namespace"] == namespace) and (not args.name or r["name"] == args.name)
    ]
    rows.sort(key=lambda r: (r["namespace"], r["name"]))
    if args.name and not rows:
        print(f"error: {kind} '{args.name}' not found in namespace '{args.namespace}'", file=sys.stderr)
        return 1
    render(rows, kind, namespace, args.output, out)
    return 0
