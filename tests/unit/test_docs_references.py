"""THREAT_MODEL.md names a test for every control: each named test file and test function must exist.

A control whose test was renamed or moved would otherwise keep citing a test that proves nothing. References
look like `` `tests/x/test_y.py::test_z` `` (or `` `test_y.py::test_z` `` when one file has that name); `` test_prefix_* `` matches by prefix. A bare `` `::test_z` `` follows a file named before it: the most recent one that
has such a test (tables cite the file once, then its tests by name).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("THREAT_MODEL.md",)
REF = re.compile(r"`((?:tests/[\w/.-]+/)?test_[\w-]+\.py)?((?:::[\w*\[\]-]+)?)")


@cache
def function_names(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text())
    return frozenset(
        node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    )


def references(text: str) -> list[tuple[int, tuple[str, ...], str]]:
    """(line, candidate files, test name or '') for every reference: a file named with the test, or for a
    bare ``::name`` every file named before it, most recent first."""
    found: list[tuple[int, tuple[str, ...], str]] = []
    seen: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in REF.finditer(line):
            path, name = match.group(1), match.group(2).removeprefix("::").split("[")[0]
            if path:
                seen.append(path)
                found.append((number, (path,), name))
            elif name:
                found.append((number, tuple(reversed(seen)), name))
    return found


def _resolve(path: str) -> Path:
    """A path from the repository root, or a bare file name that exactly one test file has."""
    if "/" in path:
        return ROOT / path
    matches = sorted((ROOT / "tests").rglob(path))
    return matches[0] if len(matches) == 1 else ROOT / "tests" / f"(0 or several files named {path})"


def _has(file: Path, name: str) -> bool:
    names = function_names(file)
    return any(n.startswith(name[:-1]) for n in names) if name.endswith("*") else name in names


def missing(text: str) -> list[str]:
    problems = []
    for number, paths, name in references(text):
        files = [_resolve(path) for path in paths]
        if len(paths) == 1 and not files[0].is_file():
            problems.append(f"line {number}: no file {paths[0]}")
        elif name and not any(file.is_file() and _has(file, name) for file in files):
            problems.append(
                f"line {number}: no test {name} in {paths[0] if paths else '(no file named before)'}"
            )
    return problems


def test_every_test_the_threat_model_names_exists() -> None:
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        assert len(references(text)) > 50, "the parser found too few references: it no longer reads the doc"
        assert missing(text) == [], doc


def test_the_check_fails_for_a_renamed_test_or_a_moved_file() -> None:
    good = (
        "`tests/unit/test_docs_references.py::test_every_test_the_threat_model_names_exists`, `::test_the_*`"
    )
    assert missing(good) == []
    assert missing("`tests/unit/test_docs_references.py::test_gone`") != []
    assert missing("`tests/unit/test_moved_away.py`") != []
    assert missing("`tests/unit/test_docs_references.py::test_nothing_*`") != []
    assert missing("`::test_the_check_fails_for_a_renamed_test_or_a_moved_file`") != [], (
        "no file named before"
    )
