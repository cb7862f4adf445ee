"""``check``: every planted error of a manifests directory is one line at its file:line, and nothing else;
the repository's examples and Flux's own doc examples pass (a manifest Flux accepts must pass); stdin; the
exit statuses (issue 25 item 4)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from notification_controller.check import main

ROOT = Path(__file__).resolve().parents[2]

PROVIDERS = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata:
  name: slack
  namespace: apps
spec:
  type: slack
  address: https://hooks.example.invalid/x
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata:
  name: typo
  namespace: apps
spec:
  type: slck
  adress: https://example.invalid
"""
# errors: line 16 type slck (did you mean 'slack'), line 17 adress (did you mean 'address')

ALERTS = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata:
  name: many
  namespace: apps
spec:
  providerRef:
    name: slack
  eventSevirity: info
  eventSources:
    - kind: Kustomisation
      name: app
  inclusionList:
    - "ok.*"
    - "(unclosed"
  filter: event.severity
  template:
    title: "{{ event.reason "
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alertt
metadata:
  name: misspelt-kind
  namespace: apps
spec: {}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata:
  name: missing-field
  namespace: apps
spec:
  providerRef:
    name: nowhere
  eventSources:
    - kind: GitRepository
      name: '*'
  filter: "event.reasn == 'Progressing'"
"""
# errors: 9 eventSevirity, 11 Kustomisation, 15 regex, 16 filter not bool, 18 template title,
#         21 kind Alertt, 34 providerRef nowhere (not in the files), 38 event.reasn

RECEIVERS = """\
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata:
  name: hook
  namespace: apps
spec:
  type: githubb
  secretRef:
    name: token
  resources:
    - kind: GitRepository
      name: app
---
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata:
  name: [broken
"""
# errors: 7 type githubb (did you mean 'github'), 17 bad YAML

EXPECTED = [
    ("alerts.yaml", 9, "spec.eventSevirity", "did you mean 'eventSeverity'"),
    ("alerts.yaml", 11, "spec.eventSources[0].kind", "did you mean 'Kustomization'"),
    ("alerts.yaml", 15, "spec.inclusionList[1]", "failed to compile inclusion regex"),
    ("alerts.yaml", 16, "spec.filter", "expected bool, got string"),
    ("alerts.yaml", 18, "spec.template.title", "spec.template.title"),
    ("alerts.yaml", 21, "kind", "did you mean 'Alert'"),
    ("alerts.yaml", 34, "spec.providerRef.name", "Provider 'nowhere' not found"),
    ("alerts.yaml", 38, "spec.filter", "undefined field 'reasn' (did you mean 'reason'?)"),
    ("providers.yaml", 16, "spec.type", "did you mean 'slack'"),
    ("providers.yaml", 17, "spec.adress", "did you mean 'address'"),
    ("receivers.yaml", 7, "spec.type", "did you mean 'github'"),
    ("receivers.yaml", 17, "", "cannot parse YAML"),
]

LINE = re.compile(
    r"^(?P<file>[^:]+):(?P<line>\d+): (?P<who>\S+ \S+/\S+): (?:(?P<field>[^ :]+): )?(?P<msg>.*)$"
)


def _run(argv: list[str], stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    code = main(argv, stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    for name, text in (("alerts.yaml", ALERTS), ("providers.yaml", PROVIDERS), ("receivers.yaml", RECEIVERS)):
        (tmp_path / name).write_text(text)
    return tmp_path


def test_every_planted_error_is_one_line_at_its_file_and_line(planted: Path) -> None:
    code, out = _run([str(planted), "--no-warnings"])
    lines = out.splitlines()
    assert code == 1
    assert len(lines) == len(EXPECTED), out
    for line, (file, number, field, fragment) in zip(lines, EXPECTED, strict=True):
        match = LINE.match(line)
        assert match is not None, line
        assert Path(match["file"]).name == file, line
        assert int(match["line"]) == number, line
        if field:
            assert match["field"] == field, line
        assert fragment in line, line


def test_a_secret_missing_from_the_files_is_a_warning_not_a_finding(planted: Path) -> None:
    (planted / "alerts.yaml").unlink()
    (planted / "providers.yaml").unlink()
    (planted / "receivers.yaml").write_text(RECEIVERS.split("---")[0].replace("githubb", "github"))
    code, out = _run([str(planted)])
    assert code == 0
    [warning] = out.splitlines()
    assert "receivers.yaml:9: warning: Receiver apps/hook: spec.secretRef.name: Secret 'token'" in warning
    secret = "---\napiVersion: v1\nkind: Secret\nmetadata: {name: token, namespace: apps}\nstringData: {token: x}\n"
    (planted / "secret.yaml").write_text(secret)
    assert _run([str(planted)]) == (0, "")


def test_json_and_yaml_outputs_hold_the_same_findings(planted: Path) -> None:
    code, out = _run([str(planted), "-o", "json", "--no-warnings"])
    records = json.loads(out)
    assert code == 1 and [(Path(r["file"]).name, r["line"]) for r in records] == [
        (f, n) for f, n, _, _ in EXPECTED
    ]
    code, out = _run([str(planted), "-o", "yaml", "--no-warnings"])
    assert code == 1 and yaml.safe_load(out) == records


@pytest.mark.parametrize("clean", ["examples/manifests", "tests/data/flux-doc-examples"])
def test_clean_directories_pass(clean: str) -> None:
    """Every Flux doc example works with Flux's controller: ``check`` must not refuse one."""
    code, out = _run([str(ROOT / clean), "--no-warnings"])
    assert (code, out) == (0, "")


def test_stdin() -> None:
    code, out = _run(["-"], stdin=ALERTS)
    assert code == 1 and out.startswith("<stdin>:9: Alert apps/many: spec.eventSevirity:")
    code, out = _run(["-"], stdin=PROVIDERS.split("---")[0])
    assert (code, out) == (0, "")


@pytest.mark.parametrize("argv", [[], ["/nonexistent/manifests"], ["-o", "xml", "x"], ["-", "-"]])
def test_usage_errors_exit_2(argv: list[str]) -> None:
    assert _run(argv)[0] == 2


def test_python_m_runs_it(planted: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "notification_controller.check", str(planted / "providers.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and len(proc.stdout.splitlines()) == 2, proc.stderr


def test_a_closed_pipe_is_no_traceback(tmp_path: Path) -> None:
    """``check … | head -1``: the reader goes away after one line of thousands."""
    alert = "apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Alert\nmetadata: {name: a%d}\n"
    alert += "spec: {providerRef: {name: p}, eventSevirity: info, eventSources: []}\n---\n"
    (tmp_path / "many.yaml").write_text("".join(alert % i for i in range(3000)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "notification_controller.check", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().decode().startswith(str(tmp_path / "many.yaml") + ":4: ")
    proc.stdout.close()
    assert proc.wait(timeout=120) == 1
    assert proc.stderr.read() == b""
    proc.stderr.close()


SILENCES = """\
apiVersion: notification-controller.io/v1alpha1
kind: Silence
metadata:
  name: ok
  namespace: apps
spec:
  matchers:
    - name: kind
      value: Kustomization
      matchType: =
  duration: 2h
---
apiVersion: notification-controller.io/v1alpha1
kind: Silence
metadata:
  name: broken
  namespace: apps
spec:
  matchers:
    - name: kind
      value: Kustomization
    - name: name
      value: "apps-("
      matchType: =~
  duration: 2h
  comment: COMMENT
---
apiVersion: notification-controller.io/v1alpha1
kind: Silence
metadata:
  name: typo
  namespace: apps
spec:
  matchers:
    - name: colour
      value: red
  endsAt: 2026-11-27T12:00:00Z
"""


def test_silences_are_checked_field_by_field(tmp_path: Path) -> None:
    """Issue 26: a Silence's errors at their lines, as the reconciler words them (RE2, the CRD's bounds), and
    a plain ``matchType: =`` (as kubectl takes it) is fine."""
    (tmp_path / "silences.yaml").write_text(SILENCES.replace("COMMENT", "c" * 1025))
    code, out = _run([str(tmp_path), "--no-warnings"])
    lines = out.splitlines()
    assert code == 1, out
    found = [LINE.match(line) for line in lines]
    assert [(Path(m["file"]).name, int(m["line"]), m["who"], m["field"]) for m in found if m] == [
        ("silences.yaml", 23, "Silence apps/broken", "spec.matchers[1].value"),
        ("silences.yaml", 26, "Silence apps/broken", "spec.comment"),
        ("silences.yaml", 35, "Silence apps/typo", "spec.matchers[0].name"),
    ], out
    assert "is not an RE2 expression" in lines[0]
    assert "spec.comment is longer than 1024 characters" in lines[1]
    assert "'colour' is not one of kind, name, namespace" in lines[2]
