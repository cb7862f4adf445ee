"""Flags keep Flux's names and Go's syntax (reference §7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from notification_controller.cli import build_parser, flags_table, parse_args
from notification_controller.settings import compat_notices


def test_defaults_are_fluxs() -> None:
    s = parse_args([], environ={})
    assert (s.server.events_addr, s.server.receiver_addr, s.server.metrics_addr, s.server.health_addr) == (
        ":9090",
        ":9292",
        ":8080",
        ":9440",
    )
    assert s.events.rate_limit_interval == 300
    assert s.kube.watch_all_namespaces is True
    assert s.kube.runtime_namespace == "flux-system"
    assert (s.leader.lease_duration, s.leader.renew_deadline, s.leader.retry_period) == (35, 30, 5)
    assert (s.log.level, s.log.encoding) == ("info", "json")
    assert not s.local_mode


def test_go_flag_syntax() -> None:
    s = parse_args(
        [
            "-events-addr=:19090",
            "--receiverAddr",
            ":19292",
            "--watch-all-namespaces=false",
            "--no-cross-namespace-refs",
            "--rate-limit-interval=1m30s",
            "--feature-gates=ObjectLevelWorkloadIdentity=true",
            "--manifests",
            "examples/manifests",
        ],
        environ={"RUNTIME_NAMESPACE": "flux", "KUBECONFIG": "/tmp/kc"},
    )
    assert s.server.events_addr == ":19090"
    assert s.server.receiver_addr == ":19292"
    assert s.kube.watch_all_namespaces is False
    assert s.events.no_cross_namespace_refs is True
    assert s.events.rate_limit_interval == 90
    assert s.gate("ObjectLevelWorkloadIdentity")
    assert s.kube.runtime_namespace == "flux"
    assert s.kube.kubeconfig == "/tmp/kc"
    assert s.local_mode


@pytest.mark.parametrize(
    "argv", [["--feature-gates=Nope=true"], ["--rate-limit-interval=5"], ["--log-level=warn"]]
)
def test_invalid_flags_exit(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv, environ={})


def test_every_flux_flag_is_accepted() -> None:
    """Reference §7: every flag of Flux's controller parses (implemented, or compatibility-only)."""
    s = parse_args(
        [
            "--token-cache-max-size=0",
            "--token-cache-max-duration=10m",
            "--feature-gates=ObjectLevelWorkloadIdentity=true,CacheSecretsAndConfigMaps=true",
            "--default-service-account=notifier",
            "--watch-configs-label-selector=team=a",
            "--leader-election-release-on-cancel=false",
        ],
        environ={},
    )
    assert (s.tokens.max_size, s.tokens.max_duration) == (0, 600)
    assert s.kube.default_service_account == "notifier"
    assert s.leader.release_on_cancel is False
    notices = compat_notices(s)
    assert any(n.startswith("--watch-configs-label-selector is accepted for compatibility") for n in notices)
    assert not any(n.startswith("--default-service-account") for n in notices)  # implemented now
    assert compat_notices(parse_args([], environ={})) == []


def test_default_service_account_needs_the_gate() -> None:
    """Flux refuses it at start (InconsistentObjectLevelConfiguration)."""
    with pytest.raises(SystemExit, match="ObjectLevelWorkloadIdentity"):
        parse_args(["--default-service-account=notifier"], environ={})


def test_help_describes_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--help"], environ={})
    text = " ".join(capsys.readouterr().out.split())
    parser = build_parser()
    for action in parser._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{action.option_strings} has no help"
        assert action.option_strings[0] in text
    assert "accepted for Flux compatibility" in text


def test_the_readme_flags_table_is_generated_from_the_settings() -> None:
    """Defaults and help are written once (settings.py); the README shows exactly that table."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert flags_table() in readme, (
        "README flags table is stale: paste `python -m notification_controller --flags-table`"
    )


def test_the_token_cache_flags_reach_the_cache(tmp_path: Path) -> None:
    from notification_controller.app import App

    app = App(parse_args(["--manifests", str(tmp_path), "--token-cache-max-size=0"], environ={}))
    assert app.pipeline.deliverer.tokens is None
    app = App(parse_args(["--manifests", str(tmp_path), "--token-cache-max-size=7"], environ={}))
    tokens = app.pipeline.deliverer.tokens
    assert tokens is not None and tokens._capacity == 7


# ---- one command, every subcommand (issue 25 item 2) ------------------------------------------------------
def test_top_level_help_lists_the_commands_and_leaks_no_docstring(capsys: pytest.CaptureFixture[str]) -> None:
    from notification_controller.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    listed = [line.split()[0] for line in text.split("commands:")[1].split("\n\n")[0].strip().splitlines()]
    assert {"run", "get", "explain", "send", "dead-letters", "version"} <= set(listed)
    assert "``" not in text and "Settings" not in text.split("options:")[0]
    assert "--watch-all-namespaces" in text  # and still the controller's flags


def test_every_registered_command_resolves_lazily() -> None:
    """The registry is name -> "module:function"; each resolves to a callable (``check`` once it lands)."""
    import importlib
    import importlib.util

    from notification_controller.cli import COMMANDS

    for name, (target, help_) in COMMANDS.items():
        module_name, _, function = target.partition(":")
        assert help_ and module_name.startswith("notification_controller."), name
        if importlib.util.find_spec(module_name) is None:
            assert name == "check", f"{name}: {module_name} does not exist"
            continue
        assert callable(getattr(importlib.import_module(module_name), function)), target


@pytest.mark.parametrize(
    ("argv", "code", "stream", "needle"),
    [
        (["frobnicate"], 2, "err", "unknown command 'frobnicate'"),
        (["version", "extra"], 2, "err", "usage: notification-controller version"),
        (["version"], 0, "out", "notification-controller "),
        (["get", "gadgets"], 2, "err", "invalid choice"),
        (["dead-letters", "list", "--store", "memory", "-o", "table"], 2, "err", "invalid choice"),
        (["explain", "--manifests", "x", "--event", "y", "-o", "xml"], 2, "err", "invalid choice"),
    ],
)
def test_dispatch_outcomes(
    argv: list[str], code: int, stream: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from notification_controller.cli import main

    assert main(argv) == code
    captured = capsys.readouterr()
    assert needle in (captured.out if stream == "out" else captured.err)


def test_a_missing_command_module_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from notification_controller import cli

    monkeypatch.setitem(cli.COMMANDS, "later", ("notification_controller.not_written_yet:main", "later"))
    assert cli.main(["later"]) == 2
    assert "'later' is not available in this build" in capsys.readouterr().err


def test_fluxs_deployment_args_still_run_the_controller() -> None:
    """gotk-components' args, unchanged: a first argument that is a flag means ``run``."""
    s = parse_args(["--watch-all-namespaces=true", "--log-level=info", "--log-encoding=json"], environ={})
    assert s.kube.watch_all_namespaces is True and s.log.level == "info"
