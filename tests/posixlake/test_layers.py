"""The shape of posixlake/, nfs/ and cli/, read from the code: no import circles (type-only
imports counted), nothing in the project using the lazy ``posixlake.NfsServer``
re-export, and the groups of DatabaseOps reaching their table through its public names.

tests/test_import_graph.py checks the import graphs without ``TYPE_CHECKING`` blocks; this
file also counts them: a module that names another in an annotation depends on it as
much as one that calls it (``mypy`` and a reader follow both), so ``if TYPE_CHECKING:`` is
no way out of a circle.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from tests.source_modules import source_modules

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("posixlake", "cli", "nfs")


def _imports(module: str, path: Path) -> list[tuple[str, str | None]]:
    """Every (module, imported name) that ``module`` imports, anywhere in the file."""
    is_package = path.name == "__init__.py"
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package upwards
                package = module.split(".")
                if not is_package:
                    package.pop()
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            found += [(base, a.name) for a in node.names]
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Each module of ``packages`` -> the modules of ``packages`` it imports, type-only
    and function-local imports included. ``from pkg import name`` depends on ``pkg``
    (its ``__init__`` runs), or on ``pkg.name`` when that is a module."""
    known = source_modules(root, packages)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        deps: set[str] = set()
        for name, member in _imports(module, path):
            target: str | None = f"{name}.{member}" if member else None
            if target not in known:
                target = name
                while target and target not in known:
                    target = target.rpartition(".")[0]
            if target and target != module:
                deps.add(target)
        graph[module] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as err:
        return list(err.args[1])
    return None


def test_posixlake_nfs_and_cli_import_no_circle_type_only_imports_included() -> None:
    """The lazy ``posixlake.NfsServer`` re-export is an edge posixlake -> nfs.table, so the
    table face imports ``DatabaseOps`` from ``posixlake.database``, not the package."""
    graph = import_graph()
    assert len(graph) > 50
    assert "posixlake.database" in graph["posixlake"]
    assert "posixlake.buffer" in graph["posixlake._ops.core"]
    cycle = _cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or ())


def test_the_cycle_check_sees_a_type_only_circle(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import B\n")
    (tmp_path / "pkg" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
    )
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert _cycle(graph) is not None


def _nfs_server_uses(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "posixlake"
            and any(a.name == "NfsServer" for a in node.names)
        ) or (
            isinstance(node, ast.Attribute)
            and node.attr == "NfsServer"
            and isinstance(node.value, ast.Name)
            and node.value.id == "posixlake"
        ):
            lines.append(node.lineno)
    return lines


def test_nothing_in_the_project_uses_the_lazy_nfs_server_reexport() -> None:
    used = {
        str(path.relative_to(ROOT)): lines
        for package in ("posixlake", "nfs", "cli", "scripts", "benchmarks")
        for path in (ROOT / package).rglob("*.py")
        if (lines := _nfs_server_uses(path))
    }
    assert used == {}
    # posixlake reaches nfs only there, lazily, for the original project's users
    outside = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in (ROOT / "posixlake").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(
            n == "nfs" or n.startswith("nfs.")
            for n in (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
        )
        and path != ROOT / "posixlake" / "__init__.py"
    ]
    assert outside == []


GROUP_MODULES = ("users", "backups", "maintenance")


@pytest.mark.parametrize("name", GROUP_MODULES)
def test_a_group_reaches_its_table_through_public_names(name: str) -> None:
    """``db.users``, ``db.backups``, ``db.optimize``: no ``other._private`` (their own
    ``self._table`` is theirs; the Table's names are public)."""
    path = ROOT / "posixlake" / "_ops" / f"{name}.py"
    reaches = [
        f"{name}.py:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]
    assert reaches == []


def test_facade_state_is_declared_where_it_is_set() -> None:
    """No class of the facade declares an attribute it does not set (a bare ``_x: T`` in
    a class body, set by some ``__init__`` in another file); field lists (Protocols,
    NamedTuples, dataclasses) excepted."""
    declared_only = []
    for path in [ROOT / "posixlake" / "database.py", *(ROOT / "posixlake" / "_ops").glob("*.py")]:
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef):
                continue
            names = [ast.unparse(b) for b in cls.bases + cls.decorator_list]
            if any(n.endswith(("Protocol", "NamedTuple", "dataclass")) for n in names):
                continue
            declared_only += [
                f"{path.name}: {cls.name}.{ast.unparse(node.target)}"
                for node in cls.body
                if isinstance(node, ast.AnnAssign) and node.value is None
            ]
    assert declared_only == []
