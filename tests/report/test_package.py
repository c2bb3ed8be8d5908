"""The report package's shape: its modules import each other without a cycle, and renderers read
only the prepared data (never build, tables or plots). The flow rule across packages is a separate test."""

from __future__ import annotations

import ast
from pathlib import Path

import cancelctl.report

PACKAGE = Path(cancelctl.report.__file__).parent


def imports_of(path: Path) -> set[str]:
    """Every cancelctl module a file imports, at any depth (lazy imports inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cancelctl"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("cancelctl"))
    return found


def internal_graph() -> dict[str, set[str]]:
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {
        m: {i.rsplit(".", 1)[-1] for i in imports_of(PACKAGE / f"{m}.py") if i.startswith("cancelctl.report.")}
        & modules
        for m in modules
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path + [node, nxt]
            if nxt not in state and (cycle := visit(nxt, path + [node])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [])):
            return cycle
    return None


def test_no_import_cycle_inside_the_package():
    graph = internal_graph()
    assert {"prepared", "tables", "build", "render_html"} <= set(graph)
    assert find_cycle(graph) is None, find_cycle(graph)
    assert find_cycle({**graph, "prepared": graph["prepared"] | {"render_html"}}) is not None  # the check can fail


def test_renderers_read_only_the_prepared_data():
    for name, imported in internal_graph().items():
        if name.startswith("render_"):
            assert imported <= {"prepared", "formatting"}, (name, imported)

