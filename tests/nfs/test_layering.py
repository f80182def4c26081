"""The layering of nfs/ (docs: bytes go up, results come down; only the server uses asyncio).

nfs/ is three packages: `nfs.protocol`, the NFSv3 protocol library, which knows nothing of
tables, `nfs.table`, the Vfs that shows a posixlake table as files, and `nfs.lake`, the Vfs
of every table under a root (made of table faces; the table face never imports it). Every
module of nfs/ (subpackages included) is listed in `PROTOCOL`, `TABLE` or `LAKE` with the nfs modules it may
import. Every import counts: module level, function-local (lazy) and ``if TYPE_CHECKING``
alike. A module missing from the maps fails, and so does a cycle in the import graph
(where importing ``nfs.a.b`` from outside ``nfs.a`` also runs ``nfs/a/__init__.py``).

Across the boundary with posixlake: the protocol never imports posixlake (nor the table
face); nfs/ and cli/ import only posixlake's public names (no module or name with a
leading underscore) and read no private attribute of a ``DatabaseOps`` (``db._log``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import nfs

NFS_DIR = Path(nfs.__file__).parent
ROOT = NFS_DIR.parent

PROTOCOL: dict[str, set[str]] = {
    # the protocol core, sans-IO
    "protocol": set(),
    "protocol.xdr": set(),
    "protocol.record": set(),
    "protocol.rpcauth": {"protocol.xdr"},
    "protocol.drc": set(),
    "protocol.observe": set(),  # a call observer and its counters
    "protocol.rpc": {
        "protocol.drc",
        "protocol.observe",
        "protocol.rpcauth",
        "protocol.xdr",
    },  # re-exports rpcauth
    "protocol.nfs3.codec": {"protocol.xdr"},
    "protocol.nfs3.types": {"protocol.nfs3.codec", "protocol.xdr"},
    "protocol.nfs3.args": {"protocol.nfs3.codec", "protocol.nfs3.types", "protocol.xdr"},
    "protocol.nfs3.results": {"protocol.nfs3.codec", "protocol.nfs3.types", "protocol.xdr"},
    # the package re-exports the wire types only
    "protocol.nfs3": {"protocol.nfs3.args", "protocol.nfs3.results", "protocol.nfs3.types"},
    "protocol.vfs": {"protocol.nfs3.types", "protocol.rpc"},
    "protocol.nfs3.handles": {"protocol.nfs3.types", "protocol.vfs"},
    "protocol.nfs3.service": {
        "protocol.nfs3.handles",
        "protocol.nfs3.types",
        "protocol.rpc",
        "protocol.vfs",
    },
    "protocol.nfs3.procedures": {
        "protocol.nfs3.args",
        "protocol.nfs3.handles",
        "protocol.nfs3.results",
        "protocol.nfs3.service",
        "protocol.nfs3.types",
        "protocol.rpc",
        "protocol.vfs",
    },
    "protocol.nfs3.program": {
        "protocol.nfs3",
        "protocol.nfs3.args",
        "protocol.nfs3.codec",  # the argument decoders, compiled at bind
        "protocol.nfs3.procedures",
        "protocol.nfs3.service",
        "protocol.nfs3.types",
        "protocol.rpc",
        "protocol.vfs",
        "protocol.xdr",
    },
    "protocol.mount": {
        "protocol.nfs3",
        "protocol.nfs3.handles",
        "protocol.rpc",
        "protocol.vfs",
        "protocol.xdr",
    },
    "protocol.portmap": {"protocol.rpc", "protocol.xdr"},
    "protocol.identity": {"protocol.rpc"},  # a CredentialPolicy: root squash, ports
    # the example file system behind the Vfs protocol
    "protocol.fstree": {"protocol.nfs3", "protocol.rpc", "protocol.vfs"},
    "protocol.memfs": {"protocol.fstree", "protocol.nfs3", "protocol.rpc", "protocol.vfs"},
    # the stack over a Vfs, the transport (the only asyncio)
    "protocol.serving": {
        "protocol.drc",
        "protocol.mount",
        "protocol.nfs3.handles",
        "protocol.nfs3.program",
        "protocol.nfs3.service",
        "protocol.nfs3.types",
        "protocol.nfs4.service",
        "protocol.nfs4.state",
        "protocol.portmap",
        "protocol.rpc",
        "protocol.vfs",
    },
    # the write side of a connection (sockets, threads, no asyncio; READ data from files)
    "protocol.sender": {"protocol.xdr"},
    "protocol.server": {
        "protocol.nfs3.service",
        "protocol.nfs4.state",
        "protocol.record",
        "protocol.rpc",
        "protocol.sender",
        "protocol.serving",
        "protocol.vfs",
        "protocol.xdr",
    },
    # NFSv4.0 beside v3 (nfs/protocol/nfs4/)
    "protocol.nfs4": set(),
    "protocol.nfs4.types": {"protocol.nfs3.codec", "protocol.xdr"},
    "protocol.nfs4.ops": {"protocol.nfs3.codec", "protocol.nfs4.types", "protocol.xdr"},
    "protocol.nfs4.state": {"protocol.nfs4.ops", "protocol.nfs4.types"},
    "protocol.nfs4.attrs": {"protocol.nfs3.types", "protocol.nfs4.types", "protocol.vfs"},
    "protocol.nfs4.service": {
        "protocol.nfs3.handles",
        "protocol.nfs3.service",
        "protocol.nfs3.types",
        "protocol.nfs4",
        "protocol.nfs4.attrs",
        "protocol.nfs4.ops",
        "protocol.nfs4.state",
        "protocol.nfs4.types",
        "protocol.rpc",
        "protocol.vfs",
        "protocol.xdr",
    },
}

TABLE: dict[str, set[str]] = {
    # what the table face may import of itself; any protocol module is allowed besides
    "table": set(),
    "table.diff": set(),
    "table.staging": set(),
    "table.journal": set(),
    "table.render_cache": set(),
    "table.schema_sql": set(),
    "table.segstore": set(),
    "table.segments": {"table.segstore"},
    "table.segkeys": {"table.segments"},
    "table.writers": {"table.journal", "table.staging"},
    "table.region": {"table.staging"},
    "table.apply": {"table.region", "table.staging", "table.diff"},  # diff lazily
    "table.scratchfs": set(),
    "table.access": {"table.partitions"},  # which ids are a partition's rows
    "table.partitions": {"table.segments"},  # a type only
    "table.pathops": set(),
    "table.changelog": set(),  # the growing changes.csv's bytes (from posixlake.feed)
    # the one state object, and the collaborators of TableFs that share it (one job each)
    "table.state": {
        "table.apply",
        "table.changelog",
        "table.journal",
        "table.render_cache",
        "table.scratchfs",
        "table.segkeys",
        "table.segments",
        "table.staging",
        "table.writers",
    },
    "table.reads": {
        "table.apply",
        "table.render_cache",
        "table.schema_sql",
        "table.staging",
        "table.state",
        "table.writers",
    },
    "table.stagings": {
        "table.journal",
        "table.reads",
        "table.region",  # a WRITE's parts equal to its base (journaled as base records)
        "table.staging",
        "table.state",
        "table.writers",
    },
    "table.recovery": {
        "table.apply",
        "table.journal",
        "table.reads",
        "table.staging",
        "table.stagings",
        "table.state",
        "table.writers",
    },
    "table.writes": {
        "table.apply",
        "table.partfiles",  # a partition's data.csv, written as data.csv is
        "table.partitions",
        "table.reads",
        "table.region",  # the line check skips the records a rewrite shares with its base
        "table.staging",
        "table.stagings",
        "table.state",
        "table.writers",
    },
    "table.changes": {"table.apply", "table.changelog", "table.reads", "table.state"},
    "table.partfiles": {
        "table.apply",  # the Scope of a partition's rows
        "table.partitions",
        "table.staging",
        "table.reads",
        "table.segstore",
        "table.state",
        "table.writers",
    },
    "table.attrs": {
        "table.changes",
        "table.partfiles",
        "table.partitions",
        "table.reads",
        "table.state",
        "table.writers",
        "table.writes",
    },
    "table.names": {
        "table.partfiles",
        "table.partitions",
        "table.reads",
        "table.staging",
        "table.state",
        "table.writers",
        "table.writes",
    },
    # the Vfs facade: builds the state and its collaborators, delegates each call
    "table.tablefs": {
        "table.apply",
        "table.attrs",
        "table.changes",
        "table.journal",
        "table.names",
        "table.partfiles",
        "table.partitions",
        "table.pathops",
        "table.reads",
        "table.recovery",
        "table.render_cache",
        "table.scratchfs",
        "table.segments",
        "table.stagings",
        "table.state",
        "table.writers",
        "table.writes",
    },
    "table.server": {"table.tablefs"},  # the original's NfsServer(db, port)
}

LAKE: dict[str, set[str]] = {
    # the lake face: tables under a root, each one a table face (any protocol module too)
    "lake": {"lake.discovery", "lake.lakefs"},
    "lake.create": set(),
    "lake.discovery": set(),
    "lake.ids": {"table.partitions", "table.state"},  # partition ids: numbered, kept
    # the facade: routes each Vfs call to a part or to a table's face
    "lake.lakefs": {
        "lake.discovery",
        "lake.ids",
        "lake.listing",
        "lake.newrows",
        "lake.newtables",
        "lake.state",
        "lake.tables",
        "table.state",
        "table.tablefs",
    },
    # the lake's one state object (slots, clocks, lock, the new tables)
    "lake.state": {"lake.ids", "lake.newrows", "table.tablefs"},
    # the open tables: LRU, opening, eviction, kept generations, the write verifier
    "lake.tables": {"lake.ids", "lake.state", "table.partitions", "table.state", "table.tablefs"},
    # the cached listing: tables, lake directories, their ids and attributes
    "lake.listing": {"lake.ids", "lake.state", "lake.tables"},
    # directories made by MKDIR, tables made from their schema.sql or data.csv
    "lake.newtables": {
        "lake.create",
        "lake.ids",
        "lake.listing",
        "lake.newrows",
        "lake.state",
        "table.state",
    },
    # tables made from their rows: the table face's journal and change budget
    "lake.newrows": {"table.apply", "table.journal", "table.state"},
    "lake.opening": {"lake.create", "lake.tables", "table.tablefs"},
}

UMBRELLA: dict[str, set[str]] = {
    "__init__": {"protocol.vfs", "table.server"},  # table.server lazily (``nfs.NfsServer``)
}

ALLOWED: dict[str, set[str]] = {**PROTOCOL, **TABLE, **LAKE, **UMBRELLA}


def modules() -> set[str]:
    """Return the name of every module of nfs/: ``"protocol.rpc"``, ``"protocol.nfs3"``
    (a package), ``"protocol.nfs3.types"``, ``"__init__"`` (nfs itself)."""
    found = set()
    for path in NFS_DIR.rglob("*.py"):
        parts = list(path.relative_to(NFS_DIR).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        found.add(".".join(parts))
    return found


def _source(module: str) -> Path:
    if module == "__init__":
        return NFS_DIR / "__init__.py"
    path = NFS_DIR.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _import_targets(tree: ast.AST) -> Iterator[tuple[str, str | None]]:
    """Yield (module, imported name or None) for every absolute import in `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield from ((node.module, a.name) for a in node.names)


def imports(module: str) -> tuple[set[str], set[str]]:
    """Return (nfs modules, top-level packages) that `module` imports anywhere in its source."""
    known = modules()
    ours: set[str] = set()
    packages: set[str] = set()
    for name, member in _import_targets(ast.parse(_source(module).read_text())):
        parts = name.split(".")
        packages.add(parts[0])
        if parts[0] != "nfs":
            continue
        inner = ".".join(parts[1:])
        sub = f"{inner}.{member}" if inner and member else member
        if sub is not None and sub in known:  # ``from nfs.protocol import rpc`` imports rpc
            ours.add(sub)
        else:
            ours.add(inner or "__init__")
    return ours, packages


def test_every_module_is_listed() -> None:
    assert modules() == set(ALLOWED)


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_imports_point_one_way(module: str) -> None:
    ours, packages = imports(module)
    if module in TABLE or module in LAKE:
        ours = {m for m in ours if not m.startswith("protocol")}
    assert ours <= ALLOWED[module], f"nfs.{module} imports {sorted(ours - ALLOWED[module])}"
    assert ("asyncio" in packages) == (module == "protocol.server")


@pytest.mark.parametrize("module", sorted(PROTOCOL))
def test_the_protocol_knows_nothing_of_tables(module: str) -> None:
    ours, packages = imports(module)
    assert not {m for m in ours if not m.startswith("protocol")}, f"nfs.{module}: {ours}"
    assert "posixlake" not in packages, f"nfs.{module} imports posixlake"


def _python_files(top: str) -> list[Path]:
    return sorted((ROOT / top).rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")  # __version__ is public


def private_posixlake_imports(path: Path) -> list[str]:
    """Return each import in `path` of a posixlake module or name with a leading underscore."""
    found = []
    for name, member in _import_targets(ast.parse(path.read_text())):
        parts = name.split(".")
        if parts[0] != "posixlake":
            continue
        if any(_private(p) for p in [*parts, member or ""]):
            found.append(f"{name}{'.' + member if member else ''}")
    return found


def private_db_reads(path: Path) -> list[str]:
    """Return each private attribute read of a database handle (``db._log``, ``self._db._x``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        owner = node.value
        name = (
            owner.id
            if isinstance(owner, ast.Name)
            else owner.attr
            if isinstance(owner, ast.Attribute)
            else ""
        )
        if name.lstrip("_") == "db":
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("top", ["nfs", "cli"])
def test_only_public_names_of_posixlake(top: str) -> None:
    bad = {
        str(path.relative_to(ROOT)): private_posixlake_imports(path)
        for path in _python_files(top)
        if private_posixlake_imports(path)
    }
    assert not bad, f"private posixlake imports: {bad}"


@pytest.mark.parametrize("top", ["nfs", "cli"])
def test_no_private_state_of_a_database(top: str) -> None:
    bad = [hit for path in _python_files(top) for hit in private_db_reads(path)]
    assert not bad, f"private DatabaseOps attributes read: {bad}"


def test_the_public_name_checks_can_fail(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from posixlake.delta._log import DeltaLog\n"
        "from posixlake import _original\n"
        "from posixlake.delta import DeltaLog as Log\n"
        "import posixlake._wal\n"
        "from posixlake import __version__\n"
        "def f(self, db):\n"
        "    return db._log, self._db._snapshot, db.version, self._lock\n"
    )
    assert private_posixlake_imports(sample) == [
        "posixlake.delta._log.DeltaLog",
        "posixlake._original",
        "posixlake._wal",
    ]
    assert private_db_reads(sample) == ["sample.py:7 db._log", "sample.py:7 self._db._snapshot"]


def graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Add the implicit edges: importing ``nfs.a.b`` from outside ``nfs.a`` first runs ``nfs.a``.

    (Inside the package, its ``__init__`` is already running or done.)
    """
    full = {m: set(deps) for m, deps in edges.items()}
    for m, deps in edges.items():
        for dep in deps:
            parent = dep.rpartition(".")[0]
            while parent:
                if m != parent and not m.startswith(parent + "."):
                    full[m].add(parent)
                parent = parent.rpartition(".")[0]
    return full


@pytest.mark.parametrize("which", ["allowed", "actual"])
def test_the_import_graph_has_no_cycle(which: str) -> None:
    edges = ALLOWED if which == "allowed" else {m: imports(m)[0] for m in modules()}
    try:
        order = list(TopologicalSorter(graph(edges)).static_order())
    except CycleError as err:
        pytest.fail(f"import cycle among nfs modules: {' -> '.join(err.args[1])}")
    assert set(order) >= set(edges)


def test_the_graph_sees_lazy_imports() -> None:
    assert "table.diff" in imports("table.apply")[0]  # inside functions
    assert "table.server" in imports("__init__")[0]  # inside nfs.__getattr__


def test_the_protocol_loads_without_asyncio_or_posixlake() -> None:
    code = (
        "import sys, nfs, nfs.protocol.nfs3, nfs.protocol.nfs3.program, nfs.protocol.mount, "
        "nfs.protocol.portmap, nfs.protocol.memfs, nfs.protocol.record, nfs.protocol.serving, "
        "nfs.protocol.identity; print('asyncio' in sys.modules, 'posixlake' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False False"


@pytest.mark.parametrize(
    "module", ["nfs.protocol.vfs", "nfs.protocol.nfs3.program", "nfs.protocol.nfs3.types"]
)
def test_any_module_imports_first(module: str) -> None:
    code = f"import {module}"  # a cycle would fail for some first import
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_nfs_server_is_exported_lazily() -> None:
    from nfs.table.server import TableNfsServer

    assert nfs.NfsServer is TableNfsServer


def test_tablefs_is_composed_not_inherited() -> None:
    """TableFs is a facade over collaborators holding one state object: no base class
    carries a part of it, and no method is a stub that another module overrides."""
    from nfs.table.tablefs import TableFs

    assert TableFs.__mro__ == (TableFs, object)
    stubs = [
        path.name
        for path in (NFS_DIR / "table").glob("*.py")
        if "raise NotImplementedError" in path.read_text()
    ]
    assert stubs == []
