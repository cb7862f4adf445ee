"""The pure parts of ``notification-controller silence``: flags to a Silence the controller's own parser
accepts, what ``expire`` writes, what ``list`` computes and prints, and the atomic file write a polling
controller relies on. The command as users run it: tests/integration/test_silence_cli.py; on a real API
server: tests/e2e/test_silence_cli_e2e.py."""

from __future__ import annotations

import argparse
import io
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from notification_controller.api.objects import parse_object
from notification_controller.api.silence import Silence
from notification_controller.objects import local
from notification_controller.silences import (
    CREATED_BY_CLI,
    SUFFIXES,
    Directory,
    SilenceError,
    UsageError,
    expire_patch,
    expired,
    generated_name,
    kubeconfig_user,
    local_user,
    new_silence,
    parse_for,
    parse_matchers,
    parse_starts_at,
    regex_error,
    render_list,
    row,
    select,
    write_atomically,
)

NOW = datetime(2026, 11, 27, 10, 0, 0, tzinfo=UTC)


def _args(**over: Any) -> argparse.Namespace:
    values: dict[str, Any] = {
        "match": ["kind=Kustomization", "name=~apps-.*"],
        "duration": "2h",
        "starts_at": None,
        "namespace": "apps",
        "name": None,
        "created_by": None,
        "comment": "deploy freeze",
        "no_summary": False,
        "all_namespaces": False,
    }
    values.update(over)
    return argparse.Namespace(**values)


def _silence(spec: dict[str, Any], **meta: Any) -> Silence:
    obj = parse_object(
        {
            "apiVersion": "notification-controller.io/v1alpha1",
            "kind": "Silence",
            "metadata": {"name": "s", "namespace": "apps", **meta},
            "spec": {"matchers": [{"name": "kind", "value": "Kustomization"}], **spec},
        }
    )
    assert isinstance(obj, Silence)
    return obj


def test_add_builds_a_silence_the_controller_parses() -> None:
    made = new_silence(_args(), NOW, "alice")
    manifest = made.manifest()
    silence = parse_object(manifest)
    assert isinstance(silence, Silence)
    assert silence.metadata.annotations == {CREATED_BY_CLI: "true"}
    assert [str(m) for m in silence.spec.matchers] == ["kind=Kustomization", "name=~apps-.*"]
    assert silence.window() == (NOW, NOW + timedelta(hours=2))
    assert silence.spec.created_by == "alice" and silence.spec.comment == "deploy freeze"
    assert silence.spec.summary is True and silence.spec.all_namespaces is False
    # explicit start and end: local mode has no creation time to count a duration from
    assert manifest["spec"]["startsAt"] == "2026-11-27T10:00:00Z"
    assert manifest["spec"]["endsAt"] == "2026-11-27T12:00:00Z"
    assert "duration" not in manifest["spec"]


def test_add_flags_reach_the_spec() -> None:
    made = new_silence(
        _args(
            starts_at="2026-11-27T23:30:00+01:00",
            duration="30m",
            name="freeze",
            created_by="bob",
            no_summary=True,
            all_namespaces=True,
        ),
        NOW,
        "alice",
    )
    spec = made.manifest()["spec"]
    assert made.name == "freeze"
    assert spec["startsAt"] == "2026-11-27T22:30:00Z" and spec["endsAt"] == "2026-11-27T23:00:00Z"
    assert spec["createdBy"] == "bob" and spec["summary"] is False and spec["allNamespaces"] is True


def test_generated_names_are_readable_valid_and_distinct() -> None:
    assert generated_name(NOW, "3fa2") == "silence-20261127-100000-3fa2"
    names = {generated_name(NOW) for _ in range(50)}
    assert len(names) > 40  # 4 random hex digits; add refuses a clash rather than overwriting
    for name in names:
        parse_object(new_silence(_args(name=name), NOW, "a").manifest())


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"match": []}, "at least one --match"),
        ({"match": ["kind"]}, "is not NAME=VALUE"),
        ({"match": ["colour=red"]}, "name 'colour' is not one of kind, name"),
        ({"match": ["name=~apps-(.*"]}, "not an RE2 expression: missing )"),
        ({"match": ["name=~(?<!x)y"]}, "not an RE2 expression"),
        ({"match": ["kind=x"] * 33}, "more than the limit of 32"),
        ({"match": ["name=" + "x" * 1025]}, "longer than 1024"),
        ({"duration": "2 hours"}, "--for: invalid duration '2 hours'"),
        ({"duration": "0s"}, "must be longer than 0s"),
        ({"duration": "100000h"}, "longer than 3650 days"),
        ({"starts_at": "tomorrow"}, "not an RFC 3339 time"),
        ({"starts_at": "2026-11-27T22:00:00"}, "has no time zone"),
        ({"starts_at": "9999-12-31T23:00:00Z"}, "past the year 9999"),
        ({"name": "Deploy_Freeze"}, "--name: invalid name 'Deploy_Freeze'"),
        ({"namespace": "a/b"}, "--namespace: invalid namespace"),
        ({"comment": "x" * 1025}, "--comment is longer than 1024"),
        ({"created_by": "x" * 257}, "--created-by is longer than 256"),
    ],
)
def test_bad_input_is_one_clear_usage_error(flags: dict[str, Any], says: str) -> None:
    with pytest.raises(UsageError) as caught:
        new_silence(_args(**flags), NOW, "alice")
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_regex_check_is_quiet_and_names_the_reason(capfd: pytest.CaptureFixture[str]) -> None:
    assert regex_error("name=~apps-.*") is None and regex_error("name=apps-(") is None
    assert regex_error("name=~'apps-('") == "missing ): apps-("
    assert regex_error('metadata.env!~"(?P<x"') is not None
    assert capfd.readouterr().err == ""  # RE2's default options would log "Error parsing ..." on fd 2


def test_matchers_parse_like_the_api() -> None:
    parsed = parse_matchers(["severity!=info", "metadata.env=~prod|staging", "alert='on call'"])
    assert [(m.name, m.match_type.value, m.value) for m in parsed] == [
        ("severity", "!=", "info"),
        ("metadata.env", "=~", "prod|staging"),
        ("alert", "=", "on call"),
    ]


def test_durations_and_times() -> None:
    assert parse_for("1h30m") == timedelta(minutes=90)
    assert parse_starts_at("2026-11-27T22:00:00Z") == datetime(2026, 11, 27, 22, tzinfo=UTC)


def test_expire_ends_now_and_never_starts_a_pending_one() -> None:
    active = new_silence(_args(), NOW - timedelta(hours=1), "a").manifest()
    ended = expired(active, NOW)
    assert ended["spec"]["endsAt"] == "2026-11-27T10:00:00Z"
    assert ended["spec"]["startsAt"] == "2026-11-27T09:00:00Z"
    assert _state(ended, NOW) == "Expired"

    pending = new_silence(_args(starts_at="2026-11-28T00:00:00Z"), NOW, "a").manifest()
    ended = expired(pending, NOW)
    assert ended["spec"]["startsAt"] == ended["spec"]["endsAt"] == "2026-11-27T10:00:00Z"
    assert _state(ended, NOW) == "Expired"
    assert pending["spec"]["endsAt"] == "2026-11-28T02:00:00Z"  # the input is not changed

    by_duration = {**active, "spec": {**active["spec"], "duration": "2h"}}
    del by_duration["spec"]["endsAt"]
    assert "duration" not in expired(by_duration, NOW)["spec"]  # endsAt and duration are exclusive


def test_expire_patch_is_a_merge_patch_with_the_version_read() -> None:
    current = new_silence(_args(starts_at="2026-11-28T00:00:00Z"), NOW, "a").manifest()
    current["metadata"]["resourceVersion"] = "42"
    current["spec"]["duration"] = "1h"
    patch = expire_patch(current, NOW)
    assert patch == {
        "metadata": {"resourceVersion": "42"},
        "spec": {"endsAt": "2026-11-27T10:00:00Z", "duration": None, "startsAt": "2026-11-27T10:00:00Z"},
    }
    del current["metadata"]["resourceVersion"], current["spec"]["duration"]
    current["spec"]["startsAt"] = "2026-11-27T09:00:00Z"
    assert expire_patch(current, NOW) == {"spec": {"endsAt": "2026-11-27T10:00:00Z"}}


def _state(manifest: dict[str, Any], now: datetime) -> str:
    obj = parse_object(manifest)
    assert isinstance(obj, Silence)
    return str(row(obj, now)["state"])


def test_state_follows_the_clock() -> None:
    made = new_silence(_args(starts_at="2026-11-27T11:00:00Z"), NOW, "a").manifest()
    assert _state(made, NOW) == "Pending"
    assert _state(made, NOW + timedelta(hours=1)) == "Active"
    assert _state(made, NOW + timedelta(hours=3)) == "Expired"


def test_held_comes_from_the_status_when_the_controller_wrote_one() -> None:
    fresh = _silence({"endsAt": "2026-11-27T12:00:00Z", "startsAt": "2026-11-27T09:00:00Z"})
    assert row(fresh, NOW)["held"] is None
    raw = fresh.model_dump(by_alias=True, mode="json")
    raw["status"] = {"observedGeneration": 1, "held": 7, "state": "Active"}
    assert row(Silence.model_validate(raw), NOW)["held"] == 7


def test_state_without_a_window_is_the_status_or_unknown() -> None:
    local_duration = _silence({"duration": "1h"})  # local mode: no startsAt, no creation time
    assert row(local_duration, NOW)["state"] == "Unknown"
    raw = local_duration.model_dump(by_alias=True, mode="json")
    raw["status"] = {"state": "Active"}
    assert row(Silence.model_validate(raw), NOW)["state"] == "Active"


def test_list_selects_like_amtool_and_escapes_every_cell() -> None:
    rows = [
        row(
            _silence({"startsAt": "2026-11-27T09:00:00Z", "endsAt": "2026-11-27T09:30:00Z"}, name="old"), NOW
        ),
        row(
            _silence(
                {
                    "startsAt": "2026-11-27T09:00:00Z",
                    "endsAt": "2026-11-27T12:00:00Z",
                    "comment": "freeze\x1b[2J\nFAKE  Active",
                    "createdBy": "\u202eevil",
                },
                name="now",
            ),
            NOW,
        ),
        row(
            _silence({"startsAt": "2026-11-28T09:00:00Z", "endsAt": "2026-11-28T12:00:00Z"}, name="later"),
            NOW,
        ),
    ]
    current = select(rows, namespace="apps", expired_only=False)
    assert [r["name"] for r in current] == ["now", "later"]  # by end
    assert [r["name"] for r in select(rows, namespace="apps", expired_only=True)] == ["old"]
    assert select(rows, namespace="other", expired_only=False) == []

    out = io.StringIO()
    render_list(current, namespace="apps", expired_only=False, output="text", out=out)
    header, first, second = out.getvalue().splitlines()
    assert header.split() == ["NAME", "STATE", "MATCHERS", "ENDS", "HELD", "CREATED", "BY", "COMMENT"]
    assert first.split()[:5] == ["now", "Active", "kind=Kustomization", "2026-11-27T12:00:00Z", "-"]
    assert "\\x1b[2J\\nFAKE" in first and "\\u202eevil" in first and "\x1b" not in out.getvalue()
    assert second.split()[:2] == ["later", "Pending"]

    out = io.StringIO()
    render_list(current, namespace=None, expired_only=False, output="text", out=out)
    assert out.getvalue().split()[:2] == ["NAMESPACE", "NAME"]
    out = io.StringIO()
    render_list([], namespace="apps", expired_only=True, output="text", out=out)
    assert out.getvalue() == "no expired silences in namespace 'apps'\n"
    out = io.StringIO()
    render_list(current, namespace="apps", expired_only=False, output="yaml", out=out)
    assert yaml.safe_load(out.getvalue()) == current


def test_the_created_by_default() -> None:
    assert local_user({"USER": "alice", "LOGNAME": "x"}) == "alice"
    assert local_user({"LOGNAME": "bob"}) == "bob"
    assert local_user({})  # the passwd entry, or "unknown" in a container without one


def test_kubeconfig_user_is_the_current_contexts(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        yaml.safe_dump(
            {
                "current-context": "prod",
                "contexts": [
                    {"name": "dev", "context": {"cluster": "c", "user": "dev-user"}},
                    {"name": "prod", "context": {"cluster": "c", "user": "oncall@prod"}},
                ],
            }
        )
    )
    assert kubeconfig_user(config) == "oncall@prod"
    config.write_text("current-context: none\ncontexts: []\n")
    assert kubeconfig_user(config) is None
    config.write_text(": not yaml : [")
    assert kubeconfig_user(config) is None
    assert kubeconfig_user(tmp_path / "missing") is None


def test_the_files_are_the_ones_local_mode_reads() -> None:
    assert SUFFIXES == local.SUFFIXES  # a suffix the controller loads is one the command scans
    assert ".tmp" not in local.SUFFIXES  # the temporary name is never loaded half-written


def test_an_atomic_write_is_never_seen_half_done(tmp_path: Path) -> None:
    """A reader polling as the controller does sees the old file or the new one, never a truncated one
    (fails with ``path.write_text``: the reader sees the file empty or short between truncate and write)."""
    path = tmp_path / "silence-x.yaml"
    versions = [f"# version {i}\n" + "x" * (256 * 1024) + "\n" for i in range(2)]
    write_atomically(path, versions[0], replace=False)
    stop = threading.Event()
    seen: list[int] = []

    def read() -> None:
        while not stop.is_set():
            seen.append(len(path.read_text()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(300):
            write_atomically(path, versions[i % 2], replace=True)
    finally:
        stop.set()
        reader.join(10)
    assert seen and set(seen) == {len(versions[0])}
    assert [p.name for p in tmp_path.iterdir()] == ["silence-x.yaml"]  # no temporary file left


def test_add_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "silence-x.yaml"
    path.write_text("mine\n")
    with pytest.raises(SilenceError, match="already exists"):
        write_atomically(path, "theirs\n", replace=False)
    assert path.read_text() == "mine\n" and [p.name for p in tmp_path.iterdir()] == ["silence-x.yaml"]


def test_a_directory_refuses_to_edit_a_file_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "team").mkdir()
    gitops = tmp_path / "team" / "freeze.yaml"
    manifest = new_silence(_args(name="freeze"), NOW - timedelta(hours=1), "a").manifest()
    del manifest["metadata"]["annotations"]
    text = "# kept in Git\n" + yaml.safe_dump(manifest)
    gitops.write_text(text)
    directory = Directory(tmp_path)
    with pytest.raises(SilenceError, match=r"defined in .*freeze.yaml, which 'silence add' did not write"):
        directory.expire("apps", "freeze", NOW)
    assert gitops.read_text() == text
    with pytest.raises(SilenceError, match="already exists in"):
        directory.add(new_silence(_args(name="freeze"), NOW, "a"))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["freeze.yaml", "team"]
    with pytest.raises(SilenceError, match="not found"):
        directory.expire("apps", "other", NOW)


def test_expire_twice_changes_nothing(tmp_path: Path) -> None:
    directory = Directory(tmp_path)
    path = directory.add(new_silence(_args(name="x"), NOW - timedelta(hours=1), "a"))
    assert path.name == "silence-x.yaml"
    first = directory.expire("apps", "x", NOW)
    assert first.already is None and first.manifest["spec"]["endsAt"] == "2026-11-27T10:00:00Z"
    text = path.read_text()
    again = directory.expire("apps", "x", NOW + timedelta(minutes=5))
    assert again.already == "2026-11-27T10:00:00Z" and path.read_text() == text


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SilenceError, match="no such directory"):
        Directory(tmp_path / "typo")
    (tmp_path / "file.yaml").write_text("")
    with pytest.raises(SilenceError, match="not a directory"):
        Directory(tmp_path / "file.yaml")


def test_a_directory_lists_silences_as_kubectl_takes_them(tmp_path: Path) -> None:
    """Written by hand: ``matchType: =`` plain (YAML 1.1's value type to PyYAML, a string to Kubernetes and
    to local mode), timestamps unquoted, in a multi-document file next to other kinds."""
    (tmp_path / "all.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n"
        "apiVersion: notification-controller.io/v1alpha1\nkind: Silence\n"
        "metadata: {name: freeze, namespace: apps}\n"
        "spec:\n  matchers:\n  - {name: kind, value: Kustomization, matchType: =}\n"
        "  startsAt: 2026-11-27T09:00:00Z\n  endsAt: 2026-11-27T11:00:00Z\n"
    )
    (tmp_path / "broken.yaml").write_text("apiVersion: [\n")
    directory = Directory(tmp_path)
    rows = directory.rows(NOW)
    assert [(r["name"], r["state"], r["matchers"], r["createdByCli"]) for r in rows] == [
        ("freeze", "Active", ["kind=Kustomization"], False)
    ]
    assert [w.split(": ", 1)[1] for w in directory.warnings] == ["skipped (ParserError)"]


def test_the_docs_example_is_a_valid_silence() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "silences.md").read_text()
    section = page[page.index("\n## Silences\n") :]
    example = section[section.index("```yaml\n") + 8 : section.index("```\n", section.index("```yaml\n") + 8)]
    silence = parse_object(yaml.safe_load(example))
    assert isinstance(silence, Silence) and len(silence.spec.matchers) == 3
    assert row(silence, datetime(2026, 12, 25, tzinfo=UTC))["state"] == "Active"


def test_a_rewrite_keeps_the_permissions(tmp_path: Path) -> None:
    path = tmp_path / "silence-x.yaml"
    write_atomically(path, "one\n", replace=False)
    path.chmod(0o640)
    write_atomically(path, "two\n", replace=True)
    assert path.read_text() == "two\n" and path.stat().st_mode & 0o777 == 0o640
