"""The top-level packages import one another in one direction only.

The graph is read from the source with :mod:`ast`, every ``import`` counted wherever it stands (in a
function, under ``TYPE_CHECKING``): a lazy import is still a dependency, and a cycle through one is
still a cycle. Folders map to their installed names through ``[tool.setuptools.package-dir]``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.layout import ROOT, installed_folders

#: What each package may import of ours: the direction the architecture reads
#: (``strata_cli → strata_bench → strata_serve → strata_actors → strata``; the stdio MCP server and the
#: adapters are clients of the HTTP API).
ALLOWED: dict[str, set[str]] = {
    "strata": set(),
    "strata_actors": {"strata"},
    "strata_serve": {"strata", "strata_actors"},
    # The stdio MCP server is a client of the HTTP API (the /mcp endpoint is part of the API).
    "strata_mcp": {"strata", "strata_serve"},
    "strata_adapters": {"strata", "strata_serve"},
    "strata_bench": {"strata", "strata_actors", "strata_serve", "strata_mcp", "strata_adapters"},
    "strata_cli": {"strata", "strata_actors", "strata_serve", "strata_mcp", "strata_adapters", "strata_bench"},
}


def imported_names(path: Path, package: str) -> Iterator[tuple[str, int]]:
    """The absolute module names ``path`` imports, with their line numbers."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: it stays inside its own package
                yield package, node.lineno
            elif node.module:
                yield node.module, node.lineno


def edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) → where each such import stands."""
    names = installed_folders()
    found: dict[tuple[str, str], list[str]] = {}
    for package, folder in names.items():
        for path in sorted(folder.rglob("*.py")):
            for module, line in imported_names(path, package):
                top = module.split(".")[0]
                if top in names and top != package:
                    found.setdefault((package, top), []).append(f"{path.relative_to(ROOT)}:{line}")
    return found


def test_every_package_is_named_in_the_rule() -> None:
    assert set(installed_folders()) == set(ALLOWED)


def test_each_package_imports_only_what_sits_below_it() -> None:
    wrong = {
        f"{importer} → {imported}": places
        for (importer, imported), places in edges().items()
        if imported not in ALLOWED[importer]
    }
    assert not wrong, f"imports against the direction of the architecture: {wrong}"


def test_no_package_imports_the_tests() -> None:
    """The shipped packages stand without the test suite (the bench scripts once borrowed its milvus-lite helper)."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for package, folder in installed_folders().items()
        for path in sorted(folder.rglob("*.py"))
        for module, line in imported_names(path, package)
        if module.split(".")[0] == "tests"
    ]
    assert not wrong, f"shipped code imports tests: {wrong}"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            if found := visit(nxt, [*path, node]):
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        if found := visit(start, []):
            return found
    return None


def test_no_cycle_between_top_level_packages() -> None:
    graph: dict[str, set[str]] = {}
    for importer, imported in edges():
        graph.setdefault(importer, set()).add(imported)
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' → '.join(cycle or [])}"


@pytest.mark.parametrize(
    ("graph", "cyclic"),
    [({"a": {"b"}, "b": {"c"}}, False), ({"a": {"b"}, "b": {"a"}}, True), ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True)],
)
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], cyclic: bool) -> None:
    assert (_cycle(graph) is not None) is cyclic
