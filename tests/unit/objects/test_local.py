"""Local mode: loading a manifests directory (issue: invalid documents reported with file, index, field)."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from notification_controller.api.alert import Alert
from notification_controller.api.common import Secret
from notification_controller.api.objects import parse_object
from notification_controller.api.provider import Provider
from notification_controller.errors import ConfigError, ManifestError
from notification_controller.objects.base import ObjectStore
from notification_controller.objects.local import LocalCluster, LocalManifests, load_directory

GOOD = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: slack, namespace: apps}
spec: {type: slack, address: "https://hooks.slack.com/services/x"}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: a}
spec:
  providerRef: {name: slack}
  eventSources: [{kind: Kustomization, name: '*'}]
"""


def test_multi_document_list_and_other_kinds(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yml").write_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: List
            items:
              - apiVersion: v1
                kind: Secret
                metadata: {name: s, namespace: apps}
                data: {token: aHVudGVyMg==}
                stringData: {user: bob}
              - apiVersion: source.toolkit.fluxcd.io/v1
                kind: GitRepository
                metadata: {name: repo, labels: {team: a}}
            """
        )
    )
    result = load_directory(tmp_path)
    assert result.errors == []
    kinds = sorted(o.KIND for o in result.objects)
    assert kinds == ["Alert", "Provider", "Secret"]
    secret = next(o for o in result.objects if isinstance(o, Secret))
    assert secret.data == {"token": b"hunter2", "user": b"bob"}
    alert = next(o for o in result.objects if isinstance(o, Alert))
    assert alert.metadata.namespace == "default"
    assert alert.metadata.uid  # a stable uid is derived for local objects
    assert result.others[0]["metadata"] == {"name": "repo", "namespace": "default", "labels": {"team": "a"}}


@pytest.mark.parametrize(
    ("document", "field", "fragment"),
    [
        (
            "kind: Alert\napiVersion: notification.toolkit.fluxcd.io/v1beta3\nmetadata: {name: x}\nspec: {providerRef: {name: p}}",
            "spec.eventSources",
            "required field is missing",
        ),
        (
            "kind: Provider\napiVersion: notification.toolkit.fluxcd.io/v1beta3\nmetadata: {name: x}\nspec: {type: carrier-pigeon}",
            "spec.type",
            "must be one of",
        ),
        (
            "kind: Provider\napiVersion: notification.toolkit.fluxcd.io/v1beta3\nmetadata: {name: x}\nspec: {type: slack, timeout: 1h}",
            "spec.timeout",
            "pattern",
        ),
        (
            "kind: Provider\napiVersion: notification.toolkit.fluxcd.io/v1beta3\nmetadata: {name: x}\nspec: {type: slack, commitStatusExpr: x}",
            "spec",
            "commitStatusExpr is only supported",
        ),
        (
            "kind: Receiver\napiVersion: notification.toolkit.fluxcd.io/v1\nmetadata: {name: x}\nspec: {type: github, resources: [{kind: GitRepository, name: r}]}",
            "spec",
            "secretRef is required",
        ),
        (
            "kind: Alert\napiVersion: notification.toolkit.fluxcd.io/v1beta3\nmetadata: {name: x}\nspec: {providerRef: {name: p}, eventSources: [], typo: 1}",
            "spec.typo",
            "unknown field",
        ),
    ],
)
def test_invalid_documents_are_reported_and_skipped(
    tmp_path: Path, document: str, field: str, fragment: str
) -> None:
    (tmp_path / "ok.yaml").write_text(GOOD)
    other = GOOD.split("---")[0].replace("name: slack", "name: teams")
    (tmp_path / "bad.yaml").write_text("---\n" + other + "---\n" + document + "\n")
    result = load_directory(tmp_path)
    assert len(result.objects) == 3  # the good documents of both files still load
    [error] = result.errors
    assert error.source == "bad.yaml"
    assert error.index == 1
    assert error.field == field
    assert fragment in str(error)


def test_a_large_list_loads_in_linear_time(tmp_path: Path) -> None:
    """Each object's defining line was worked out at load by composing its document again, and a
    ``kind: List`` is one document: 1,000 items did not load in 120 s. Now only a duplicate's line is."""
    items = [
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Provider",
            "metadata": {"name": f"p{i}", "namespace": "apps"},
            "spec": {"type": "generic", "address": "https://example.com"},
        }
        for i in range(2_000)
    ]
    items.append(items[7])
    (tmp_path / "list.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    start = time.process_time()
    result = load_directory(tmp_path)
    assert time.process_time() - start < 10  # ~0.2 s; quadratic: minutes
    assert len(result.objects) == 2_000
    [error] = result.errors
    assert "duplicate Provider apps/p7 (first defined in list.json:1)" in str(error)


def test_duplicates_are_reported_and_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD.split("---")[0].replace("services/x", "services/other"))
    result = load_directory(tmp_path)
    [error] = result.errors
    assert str(error).startswith("b.yaml:3: metadata.name: ")  # 1-based lines (issue 25 item 4)
    assert "duplicate Provider apps/slack (first defined in a.yaml:3)" in str(error)
    provider = next(o for o in result.objects if isinstance(o, Provider))
    assert provider.spec.address == "https://hooks.slack.com/services/x"


def test_unreadable_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("a: [unclosed\n")
    [error] = load_directory(tmp_path).errors
    assert "broken.yaml" in str(error) and "line" in str(error)


def test_a_yaml_syntax_error_skips_only_that_document(tmp_path: Path) -> None:
    """Document 1 is broken YAML: documents 0 and 2 of the same file still load, and the error gives the
    parser's reason and the line in the file (not in the document)."""
    provider, alert = GOOD.split("---\n")
    (tmp_path / "mixed.yaml").write_text(provider + "---\nkind: Alert\nspec: [unclosed\n---\n" + alert)
    result = load_directory(tmp_path)
    assert sorted(o.KIND for o in result.objects) == ["Alert", "Provider"]
    [error] = result.errors
    assert error.source == "mixed.yaml" and error.index == 1
    assert "cannot parse YAML at line 8" in str(error)
    assert "expected" in str(error)  # the parser's own reason ("expected ',' or ']'...")
    assert "unclosed" not in str(error)  # never the document's content


def test_manifests_may_name_a_single_file(tmp_path: Path) -> None:
    path = tmp_path / "only.yaml"
    path.write_text(GOOD)
    (tmp_path / "ignored.yaml").write_text(GOOD.replace("name: slack", "name: other"))
    result = load_directory(path)
    assert result.errors == []
    assert sorted(o.metadata.name for o in result.objects) == ["a", "slack"]
    store = ObjectStore()
    LocalManifests(path, store, LocalCluster(store)).load()
    assert store.provider("apps", "slack") is not None


def test_a_missing_manifests_path_is_fatal_at_start(tmp_path: Path) -> None:
    store = ObjectStore()
    feeder = LocalManifests(tmp_path / "typo", store, LocalCluster(store))
    with pytest.raises(ConfigError, match="no such file or directory"):
        feeder.load()
    assert not store.synced


def test_reload_applies_deletions_and_keeps_controller_status(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(GOOD)
    store = ObjectStore()
    cluster = LocalCluster(store)
    feeder = LocalManifests(tmp_path, store, cluster)
    feeder.load()
    assert store.synced
    provider = store.provider("apps", "slack")
    assert isinstance(provider, Provider)
    assert provider.metadata.generation == 1
    path.write_text(GOOD + "\n# the same objects\n")
    feeder.load()  # an unchanged spec keeps its generation (specs compared by value)
    assert [p.metadata.generation for p in store.providers()] == [1]
    path.write_text(GOOD.split("---")[0].replace("services/x", "services/y"))
    feeder.load()
    assert store.alert("default", "a") is None
    changed = store.provider("apps", "slack")
    assert changed is not None and changed.metadata.generation == 2


def test_parse_object_rejects_non_mappings() -> None:
    with pytest.raises(ManifestError, match="not a mapping"):
        parse_object(["x"])


def test_errors_name_the_1_based_line_of_the_field_and_every_error(tmp_path: Path) -> None:
    """Issue 25 item 4: ``file:line`` (1-based, the offending key's line, also inside a ``kind: List``),
    every error of the document (no "(and 1 more)"), with "did you mean"."""
    (tmp_path / "a.yaml").write_text(
        GOOD
        + textwrap.dedent(
            """            ---
            apiVersion: v1
            kind: List
            items:
              - apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Alert
                metadata: {name: typos}
                spec:
                  providerRef: {name: slack}
                  eventSevirity: info
                  eventSources: [{kind: Kustomisation, name: '*'}]
            """
        )
    )
    [error] = load_directory(tmp_path).errors
    assert str(error) == (
        "a.yaml:22: spec.eventSources[0].kind: must be one of 'Bucket', 'GitRepository', 'Kustomization', "
        "'HelmRelease', 'HelmChart', 'HelmRepository', 'ImageRepository', 'ImagePolicy', "
        "'ImageUpdateAutomation', 'OCIRepository', 'ArtifactGenerator' or 'ExternalArtifact' "
        "(did you mean 'Kustomization'?); spec.eventSevirity: unknown field (did you mean 'eventSeverity'?)"
    )
    assert (error.line, error.index, error.field) == (22, 2, "spec.eventSources[0].kind")
