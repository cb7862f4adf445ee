"""The ``notification-controller`` command: one dispatcher for every subcommand, and the controller's flags.

The installed console script, ``python -m notification_controller`` and the image's ENTRYPOINT all land in
``main``: a first argument that is a flag (or none) runs the controller, so Flux's Deployment args
(``--watch-all-namespaces=true --log-level=info``) work unchanged; otherwise the first argument names a
subcommand in ``COMMANDS``, a plain dict of name -> ``"module:function"`` imported only when called (the
commands are siblings that do not import each other: pyproject's import contracts). A new command is one
line there. ``run``'s flags and environment become ``Settings``, then ``app.run``.

Flag names are Flux's where Flux has the flag (``--events-addr``, ``--receiverAddr`` ...); Go's flag
syntax is accepted too: ``-flag``, ``--flag=value``, ``--flag value``, and booleans as ``--flag``,
``--flag=true|false``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
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
    p = argparse.ArgumentParser(
        prog="notification-controller",
        usage="notification-controller [COMMAND] [FLAGS]",
        description=commands_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
        if section == "tracing":  # OpenTelemetry's own variable, as the SDKs read it (docs/tracing.md)
            values["otlp_endpoint"] = values["otlp_endpoint"] or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
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


COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("notification_controller.cli:run_main", "run the controller (the default: flags only)"),
    "get": (
        "notification_controller.get:main",
        "show Alerts, Providers, Receivers or Silences and their status",
    ),
    "explain": (
        "notification_controller.explain:explain_main",
        "say, for every Alert, whether an event matches it and what its Provider would receive",
    ),
    "send": ("notification_controller.explain:send_main", "send one sample event through one Provider"),
    "check": ("notification_controller.check:main", "validate manifests (files, directories or stdin)"),
    "dead-letters": (
        "notification_controller.deadletters:main",
        "list, replay or drop what a durable store gave up on",
    ),
    "silence": (
        "notification_controller.silences:main",
        "add, list or expire Silences (hold matching notifications for a while)",
    ),
    "history": (
        "notification_controller.history_cli:main",
        "show what was decided about past events: delivered, failed, suppressed, dropped...",
    ),
    "version": ("notification_controller.cli:version_main", "print the version"),
}
"""Subcommand -> (``"module:function"`` taking the arguments after the name and returning the exit status,
one line of help). Imported lazily: ``run`` never loads the tools, a tool never loads the controller."""


def _available(target: str) -> bool:
    module = target.partition(":")[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def commands_help() -> str:
    lines = ["Flux's notification-controller, in Python.", "", "commands:"]
    for name, (target, help_) in COMMANDS.items():
        if _available(target):
            lines.append(f"  {name:<14}{help_}")
    lines += [
        "",
        "'notification-controller COMMAND --help' for a command's flags. Without a command (or with 'run'),",
        "the controller runs with the flags below.",
    ]
    return "\n".join(lines)


def version_main(argv: Sequence[str]) -> int:
    """The same line as ``--version`` (lib/buildinfo.py: the version is pyproject's)."""
    if list(argv) in (["-h"], ["--help"]):
        print("usage: notification-controller version\n\nprint the version and exit")
        return 0
    if argv:
        print("usage: notification-controller version", file=sys.stderr)
        return 2
    print(describe())
    return 0


def run_main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args == ["--flags-table"]:
        print(flags_table())
        return 0
    settings = parse_args(args)
    from .app import run

    return run(settings)


def _dispatch(args: list[str]) -> int:
    if not args or args[0].startswith("-"):
        return run_main(args)
    name, rest = args[0], args[1:]
    entry = COMMANDS.get(name)
    if entry is None:
        print(
            f"notification-controller: unknown command {name!r} (commands: {', '.join(COMMANDS)}; "
            "flags without a command run the controller)",
            file=sys.stderr,
        )
        return 2
    module_name, _, function = entry[0].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        print(f"notification-controller: {name!r} is not available in this build", file=sys.stderr)
        return 2
    result = getattr(module, function)(rest)
    return int(result or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: dispatch, and leave quietly when the reader of stdout goes away (``| head``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            return _dispatch(args)
        finally:  # also after argparse's SystemExit (--help): the flush is where a closed pipe shows
            sys.stdout.flush()
    except BrokenPipeError:
        # Python's documented recipe: point stdout at devnull so the interpreter's final flush is silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by a closed pipe
