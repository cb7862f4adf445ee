"""Formatting helpers every provider family shares (reference §4.0): Go's ``camelcase.Split``,
``formatNameAndDescription`` (``providers/formatting.py``) and Go's ``%q`` (``lib/goquote.py``).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.lib.goquote import quote as go_quote
from notification_controller.providers.formatting import format_name_and_description, split_camelcase
from tests.providers.git_support import make_event
from tests.providers.support import event


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", []),
        ("lowercase", ["lowercase"]),
        ("Class", ["Class"]),
        ("MyClass", ["My", "Class"]),
        ("MyC", ["My", "C"]),
        ("HTML", ["HTML"]),
        ("PDFLoader", ["PDF", "Loader"]),
        ("AString", ["A", "String"]),
        ("SimpleXMLParser", ["Simple", "XML", "Parser"]),
        ("vimRPCPlugin", ["vim", "RPC", "Plugin"]),
        ("GL11Version", ["GL", "11", "Version"]),
        ("99Bottles", ["99", "Bottles"]),
        ("May5", ["May", "5"]),
        ("BFG9000", ["BFG", "9000"]),
        ("BöseÜberraschung", ["Böse", "Überraschung"]),
        ("Two  spaces", ["Two", "  ", "spaces"]),
        ("ApplySucceeded", ["Apply", "Succeeded"]),
        ("HealthCheckFailed", ["Health", "Check", "Failed"]),
        ("BadUTF8\udce2\udce2\udca1", ["BadUTF8\udce2\udce2\udca1"]),
    ],
)
def test_split_camelcase(text: str, words: list[str]) -> None:
    """Reference §4.0: Go's camelcase.Split (fatih/camelcase test vectors), invalid UTF-8 kept whole."""
    assert split_camelcase(text) == words


@given(st.text(max_size=80))
def test_split_camelcase_keeps_every_character(text: str) -> None:
    assert "".join(split_camelcase(text)) == text


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("ApplySucceeded", ["Apply", "Succeeded"]),
        ("PDFLoader", ["PDF", "Loader"]),
        ("Reason2Go", ["Reason", "2", "Go"]),
        ("already lower", ["already", " ", "lower"]),
        ("", []),
    ],
)
def test_split_camelcase_of_reasons(text: str, parts: list[str]) -> None:
    assert split_camelcase(text) == parts


@given(st.text(min_size=0, max_size=40))
def test_split_camelcase_loses_nothing(text: str) -> None:
    assert "".join(split_camelcase(text)) == text


def test_format_name_and_description() -> None:
    assert format_name_and_description(make_event()) == ("kustomization/podinfo", "reconciliation succeeded")
    event = make_event(reason="ApplySucceeded", involvedObject={"kind": "HelmRelease", "name": "PodInfo"})
    assert format_name_and_description(event) == ("helmrelease/podinfo", "apply succeeded")


def test_name_and_description() -> None:
    assert format_name_and_description(event(reason="DependencyNotReady")) == (
        "kustomization/apps",
        "dependency not ready",
    )


def test_go_quote() -> None:
    assert go_quote('a"b\\c\n\x00é') == '"a\\"b\\\\c\\n\\x00é"'
