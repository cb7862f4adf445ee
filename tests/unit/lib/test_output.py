"""lib/output.py: the one ``-o`` vocabulary prints the same data as JSON and YAML, and nothing a terminal acts on."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import yaml

from notification_controller.lib.output import FORMATS, dump, escape_cell, table

ROWS: list[dict[str, Any]] = [
    {"name": "on-call", "ready": "True", "message": "evil\x1b[2J\u202e", "suspended": False},
    {"name": "ünïcode", "ready": "False", "message": "", "suspended": True},
]


def test_the_vocabulary() -> None:
    assert FORMATS == ("text", "json", "yaml")


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_carry_the_same_data_in_ascii(output: str) -> None:
    out = io.StringIO()
    dump(ROWS, output, out)
    text = out.getvalue()
    assert text.isascii() and "\x1b" not in text  # escaped, as JSON and YAML escape
    assert (json.loads(text) if output == "json" else yaml.safe_load(text)) == ROWS


def test_table_aligns_upper_case_headers() -> None:
    out = io.StringIO()
    table(["name", "ready"], [["a", "True"], ["longer-name", "False"]], out)
    assert out.getvalue().splitlines() == ["NAME         READY", "a            True", "longer-name  False"]


def test_escape_cell_leaves_nothing_a_terminal_acts_on() -> None:
    cell = escape_cell(ROWS[0]["message"])
    assert cell == r"evil\x1b[2J\u202e" and cell.isprintable()
