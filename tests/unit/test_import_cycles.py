"""No import cycle in ``notification_controller``, even counting the imports a run never executes (issue 24).

import-linter's layers contract sees run-time imports; a loop through ``if TYPE_CHECKING:`` imports
(``providers/base.py -> identity.py -> common.py -> base.py`` was one) is invisible to it and to Python, yet
it still says two modules cannot be understood (or moved) apart. This test parses every module with ``ast``
and draws an edge for every import statement in it: module level, under ``TYPE_CHECKING``, and inside
functions (a lazy import is still a dependency). ``from pkg import name`` is an edge to ``pkg`` and, when
``name`` is a submodule, to ``pkg.name``; a module's own enclosing packages are no edge (Python loads them
before it whatever it imports).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "notification_controller"
ROOT = "notification_controller"


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(name, is_package, node.level, node.module)
                targets = [source, *(f"{source}.{alias.name}" for alias in node.names)]
            for target in targets:
                # A module's own packages are loaded before it whatever it imports: not an edge.
                if target in modules and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle (as a path that ends where it starts), or None: an iterative depth-first search."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        path = [start]
        colour[start] = GREY
        while stack:
            node, pending = stack[-1]
            if not pending:
                colour[node] = BLACK
                stack.pop()
                path.pop()
                continue
            nxt = pending.pop()
            if colour[nxt] == GREY:
                return [*path[path.index(nxt) :], nxt]
            if colour[nxt] == WHITE:
                colour[nxt] = GREY
                stack.append((nxt, sorted(graph[nxt])))
                path.append(nxt)
    return None


def test_the_graph_sees_type_checking_and_relative_imports() -> None:
    """Not vacuous: the graph has the edges a run-time-only view would miss."""
    graph = import_graph()
    assert len(graph) > 100
    # `if TYPE_CHECKING: from ..outbound.identity import WorkloadIdentity` in providers/base.py
    assert f"{ROOT}.outbound.identity" in graph[f"{ROOT}.providers.base"]
    # `from ..outbound import ...` in providers/common.py: the package and no submodule named by it
    assert f"{ROOT}.outbound" in graph[f"{ROOT}.providers.common"]


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"a2"}, "a2": set(), "b": {"b"}}, ["b", "b"]),
    ],
)
def test_find_cycle(graph: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert find_cycle(graph) == cycle


def test_no_import_cycle_even_counting_type_checking_imports() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])
