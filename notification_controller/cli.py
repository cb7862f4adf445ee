"""Flags and environment → ``Settings``, then ``app.run``. Nothing else.

Flag names are Flux's where Flux has the flag (``--events-addr``, ``--receiverAddr`` ...); Go's flag
syntax is accepted too: ``-flag``, ``--flag=value``, ``--flag value``, and booleans as ``--flag``,
``--flag=true|false``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .lib.buildinfo import describe
from .lib.duration import parse_duration
from .settings import KNOWN_GATES, SECTIONS, Flag, Settings, all_flags, flag_fields


def go_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "t", "true", "yes"):
        return True
    if lowered in ("0", "f", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def feature_gates(value: str) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for item in filter(None, (p.strip() for p in value.split(","))):
        name, _, raw = item.partition("=")
        if name not in KNOWN_GATES:
            raise argparse.ArgumentTypeError(
                f"unknown feature gate {name!r} (known: {', '.join(KNOWN_GATES)})"
            )
        gates[name] = go_bool(raw or "true")
    return gates


def _normalise(argv: Sequence[str]) -> list[str]:
    """Go accepts ``-flag``; argparse wants ``--flag``."""
    return ["-" + a if a.startswith("-") and not a.startswith("--") and len(a) > 2 else a for a in argv]


def _format_default(flag: Flag, default: Any) -> str:
    if flag.show_default is not None:
        return flag.show_default
    if isinstance(default, bool):
        return str(default).lower()
    if default is None or default == {}:
        return ""
    return str(default)


_METAVARS = {"int": "N", "float": "NUMBER", "duration": "DURATION", "path": "PATH", "gates": "NAME=BOOL,..."}
_PARSERS: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": go_bool,
    "duration": duration,
    "path": Path,
    "gates": feature_gates,
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="notification-controller", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=describe(), help="print the version and exit")
    for section, name, flag, default in all_flags():
        help_text = flag.help + (
            " [accepted for Flux compatibility; no effect here]" if flag.compat_only else ""
        )
        shown = _format_default(flag, default)
        if shown:
            help_text += f" (default {shown})"
        kwargs: dict[str, Any] = {
            "dest": f"{section}.{name}" if section else name,
            "default": default,
            "help": help_text.replace("%", "%%"),
        }
        if flag.kind == "bool":  # Go-style: --flag, --flag=true, --flag=false
            kwargs.update(type=go_bool, nargs="?", const=True, metavar="BOOL")
        else:
            kwargs.update(type=_PARSERS[flag.kind], metavar=_METAVARS.get(flag.kind, "VALUE"))
        if flag.choices:
            kwargs["choices"] = flag.choices
        p.add_argument(flag.name, *flag.aliases, **kwargs)
    return p


def flags_table() -> str:
    """The README's flags table, generated from the settings (a test compares the two)."""
    rows = ["| flag | default | meaning |", "|---|---|---|"]
    for _, _, flag, default in all_flags():
        names = " / ".join(f"`{n}`" for n in (flag.name, *flag.aliases))
        shown = _format_default(flag, default)
        meaning = flag.help + (" (Flux compatibility only: no effect)" if flag.compat_only else "")
        rows.append(f"| {names} | {f'`{shown}`' if shown else ''} | {meaning} |")
    return "\n".join(rows)


def parse_args(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    ns = vars(build_parser().parse_args(_normalise(list(sys.argv[1:] if argv is None else argv))))
    sections: dict[str, Any] = {}
    for section, cls in SECTIONS:
        values = {name: ns[f"{section}.{name}"] for name, _, _ in flag_fields(cls)}
        if section == "kube":
            values["kubeconfig"] = values["kubeconfig"] or env.get("KUBECONFIG") or None
            values["runtime_namespace"] = env.get("RUNTIME_NAMESPACE", "flux-system")
        sections[section] = cls(**values)
    top = {name: ns[name] for name, _, _ in flag_fields(Settings)}
    settings = Settings(**sections, **top)
    check(settings)
    return settings


def check(settings: Settings) -> None:
    """Flag combinations Flux refuses at start, and flags accepted only for compatibility (logged)."""
    if settings.kube.default_service_account and not settings.gate("ObjectLevelWorkloadIdentity"):
        raise SystemExit(
            "invalid flags: --default-service-account requires the ObjectLevelWorkloadIdentity feature gate "
            "(InconsistentObjectLevelConfiguration)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--flags-table"]:
        print(flags_table())
        return 0
    if args[:1] == ["version"]:  # the same line as --version (lib/buildinfo.py: the version is pyproject's)
        if args[1:]:
            print("usage: notification-controller version", file=sys.stderr)
            return 2
        print(describe())
        return 0
    settings = parse_args(args)
    from .app import run

    return run(settings)
