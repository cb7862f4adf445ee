"""``store.yamldoc.load`` builds what ``yaml.load`` with libyaml's safe loader builds, and local-mode uids
are still uuid5s (issue 17: a faster local-mode start-up must not change what a manifest means)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from notification_controller.objects import yamldoc
from notification_controller.objects.local import _UID_NS, stable_uid


class REFERENCE(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader with the one deliberate difference of yamldoc: a plain ``=`` is a string."""


REFERENCE.add_constructor(yamldoc.VALUE_TAG, yaml.constructor.SafeConstructor.construct_yaml_str)
ROOT = Path(__file__).resolve().parents[3]


def reference(text: str) -> Any:
    return yaml.load(text, Loader=REFERENCE)  # noqa: S506 - a safe loader


def outcome(load: Any, text: str) -> tuple[str, Any]:
    try:
        return "ok", load(text)
    except yaml.YAMLError as exc:
        return type(exc).__name__, str(exc)


CASES = [
    "",
    "# only a comment\n",
    "a: 1\nb: 1.5\nc: true\nd: yes\ne: ~\nf: null\ng: ''\nh: '1'\ni: 0x1F\nj: 1_000\nl: .inf\n",
    "t: 2001-12-14t21:59:43.10-05:00\nd: 2002-12-14\n",
    "b: !!binary aGVsbG8=\ns: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\np: !!pairs [{a: 1}, {a: 2}]\n",
    "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n",
    "list: &l [1, 2]\nsame: *l\n",
    "rec: &r [*r]\n",
    "? [a, b]\n: complex key\n",
    "1: int key\n2.5: float key\nnull: null key\ntrue: bool key\n",
    "= : value key\n",
    "dup: 1\ndup: 2\n",
    "x: !!str 123\ny: !!int '7'\nz: !!float '1'\nn: !!null ''\n",
    "x: !custom tag\n",
    "x: !!python/object:os.system {}\n",
    "[a, {b: [c, {d: e}]}, '', \"q\\tr\"]\n",
    "url: https://x.example/hook?a=1&b=2\n",
    "plain: Yes\nquoted: 'Yes'\nNO: off\n",
    "a: [unclosed\n",
    "a: b: c\n",
    "a: 1\n---\nb: 2\n",
    "key: |\n  multi\n  line\nfolded: >\n  folded\n  text\n",
]


@pytest.mark.parametrize("text", CASES)
def test_same_values_and_errors_as_yaml_load(text: str) -> None:
    ours, theirs = outcome(yamldoc.load, text), outcome(reference, text)
    if text.startswith("rec:"):  # a recursive list: compare its shape, == would recurse forever
        assert ours[0] == theirs[0] == "ok"
        assert ours[1]["rec"][0] is ours[1]["rec"]
        return
    assert ours == theirs


def test_a_plain_equals_sign_is_a_string_as_in_kubernetes() -> None:
    """``yaml.load`` cannot build YAML 1.1's ``=`` (no constructor in a safe loader); Kubernetes reads it as
    the string "=" and ``kubectl kustomize`` writes a Silence's ``matchType: =`` unquoted (issue 26)."""
    text = "matchType: =\nall: [=, =~, '=']\n"
    with pytest.raises(yaml.constructor.ConstructorError):
        yaml.load(text, Loader=yaml.SafeLoader)
    assert yamldoc.load(text) == {"matchType": "=", "all": ["=", "=~", "="]}
    assert yamldoc.load("a: &x =\nb: *x\n") == {"a": "=", "b": "="}  # the anchors path too


def test_base_60_numbers_are_strings_as_in_kubernetes() -> None:
    """YAML 1.1 reads a plain ``22:00`` as 1320; Go's YAML (kubectl) as the string an Alert's ``muteTimes``
    ``startTime`` needs (issue 26). Other numbers stay numbers."""
    text = "startTime: 22:00\nends: [24:00, 1:30.5]\nn: 10\nf: 1.5\nh: 0x1f\n"
    assert yaml.load(text, Loader=yaml.SafeLoader)["startTime"] == 1320
    assert yamldoc.load(text) == {
        "startTime": "22:00",
        "ends": ["24:00", "1:30.5"],
        "n": 10,
        "f": 1.5,
        "h": 31,
    }
    assert yamldoc.load("a: &x 22:00\nb: *x\n") == {"a": "22:00", "b": "22:00"}  # the anchors path too


def test_aliases_are_shared_objects_as_with_yaml_load() -> None:
    doc = yamldoc.load("list: &l [1, 2]\nsame: *l\n")
    assert doc["list"] is doc["same"]


def test_the_tag_cache_is_shared_and_changes_nothing() -> None:
    tags = yamldoc.Tags()
    first = yamldoc.load("a: yes\nb: '1'\nc: 1\n", tags)
    second = yamldoc.load("c: 1\nb: '1'\na: yes\n", tags)
    assert first == second == {"a": True, "b": "1", "c": 1}
    assert tags.resolve.cache_info().hits >= 6  # filled by the first document, used by the second


def test_without_libyaml_the_pure_python_loader_gives_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamldoc, "BaseLoader", yaml.SafeLoader)
    for text in CASES:
        if not text.startswith(("rec:", "= :")):
            expected = outcome(lambda t: yaml.load(t, Loader=yaml.SafeLoader), text)
            assert outcome(yamldoc.load, text) == expected, text


def test_the_repository_manifests_load_the_same() -> None:
    files = [*sorted((ROOT / "examples").rglob("*.yaml")), *sorted((ROOT / "config").rglob("*.yaml"))]
    assert files
    for path in files:
        for chunk in path.read_text(encoding="utf-8").split("\n---\n"):
            assert outcome(yamldoc.load, chunk) == outcome(reference, chunk), path


SCALARS = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=12),
    st.sampled_from(
        ["yes", "No", "~", "null", "0o17", "0x1f", "1e3", "-.inf", "2020-01-01", "1:20", "<<", "="]
    ),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)
TREES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(SCALARS, children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(tree=TREES, style=st.sampled_from([None, False, True]))
def test_generated_documents_load_the_same(tree: Any, style: bool | None) -> None:
    try:
        text = yaml.safe_dump(tree, default_flow_style=style, allow_unicode=True)
    except yaml.YAMLError:
        return
    assert outcome(yamldoc.load, text) == outcome(reference, text)


@given(name=st.text(max_size=300))
def test_stable_uids_are_the_uuid5_of_the_object_path(name: str) -> None:
    """Local-mode uids (``metadata.uid`` when a manifest has none) did not change with the faster helper."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate: uuid5 itself refuses it
    assert stable_uid(name) == str(uuid.uuid5(_UID_NS, name))
