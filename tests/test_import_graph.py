"""No import cycles in posixlake/, nfs/ or cli/, counting every import: module-level ones,
function-local (lazy) ones and package re-exports (``TYPE_CHECKING`` blocks do not run).

A module that imports a name from a package depends on the package's ``__init__`` (and on
all that it imports), unless the name is a submodule (a compiled one counts, known by its
``.pyi`` stub). nfs/ has its own, finer rules in
tests/nfs/test_layering.py (which way each edge may point).
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from tests.source_modules import source_modules

ROOT = Path(__file__).resolve().parents[1]


def _resolve(known: dict[str, Path], name: str, member: str | None) -> str | None:
    if member and f"{name}.{member}" in known:
        return f"{name}.{member}"
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _without_type_checking(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = [ast.Pass()]
    return tree


def import_graph(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` -> the modules of ``package`` it imports, anywhere."""
    known = source_modules(ROOT, (package,))
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        deps: set[str] = set()
        for node in ast.walk(_without_type_checking(ast.parse(path.read_text()))):
            targets: list[tuple[str, str | None]]
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [(node.module, a.name) for a in node.names]
            else:
                continue
            for name, member in targets:
                target = _resolve(known, name, member)
                if target is not None and target != module:
                    deps.add(target)
        graph[module] = deps
    return graph


@pytest.mark.parametrize("package", ["posixlake", "nfs", "cli"])
def test_the_import_graph_has_no_cycle(package: str) -> None:
    graph = import_graph(package)
    assert len(graph) > 5
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as err:
        pytest.fail(f"import cycle in {package}/: {' -> '.join(err.args[1])}")


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    with pytest.raises(CycleError):
        list(TopologicalSorter(graph).static_order())
