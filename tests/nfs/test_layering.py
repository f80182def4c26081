"""The layering of nfs/ (docs: bytes go up, results come down; only server.py uses asyncio).

Every module of nfs/ (the nfs3 subpackage included) is listed in `ALLOWED` with the nfs
modules it may import. Every import counts: module level, function-local (lazy) and
``if TYPE_CHECKING`` alike. A module missing from `ALLOWED` fails, and so does a cycle
in the import graph (where importing ``nfs.nfs3.x`` from outside the package also runs
``nfs/nfs3/__init__.py``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import nfs

NFS_DIR = Path(nfs.__file__).parent

ALLOWED: dict[str, set[str]] = {
    # the protocol core, sans-IO
    "xdr": set(),
    "record": set(),
    "rpcauth": {"xdr"},
    "drc": set(),
    "rpc": {"drc", "rpcauth", "xdr"},  # re-exports rpcauth
    "nfs3.codec": {"xdr"},
    "nfs3.types": {"nfs3.codec", "xdr"},
    "nfs3.args": {"nfs3.codec", "nfs3.types", "xdr"},
    "nfs3.results": {"nfs3.codec", "nfs3.types", "xdr"},
    "nfs3": {"nfs3.args", "nfs3.results", "nfs3.types"},  # re-exports the wire types only
    "vfs": {"nfs3.types", "rpc"},
    "nfs3.handles": {"nfs3.types", "vfs"},
    "nfs3.service": {"nfs3.handles", "nfs3.types", "vfs"},
    "nfs3.procedures": {
        "nfs3.args",
        "nfs3.handles",
        "nfs3.results",
        "nfs3.service",
        "nfs3.types",
        "rpc",
        "vfs",
    },
    "nfs3.program": {
        "nfs3.args",
        "nfs3.procedures",
        "nfs3.service",
        "nfs3.types",
        "rpc",
        "vfs",
        "xdr",
    },
    "mount": {"nfs3", "nfs3.handles", "rpc", "vfs", "xdr"},
    "portmap": {"rpc", "xdr"},
    # file systems behind the Vfs protocol
    "_fstree": {"nfs3", "rpc", "vfs"},
    "memfs": {"_fstree", "nfs3", "rpc", "vfs"},
    "scratchfs": {"_fstree", "memfs", "nfs3", "vfs"},
    "identity": {"nfs3", "rpc", "vfs"},
    # the table view and its private parts
    "diff": set(),
    "_staging": set(),
    "_journal": set(),
    "_render_cache": set(),
    "_schema_sql": set(),
    "_segstore": set(),
    "_segments": {"_segstore"},
    "_segkeys": {"_segments"},
    "_writers": {"_journal", "_staging", "rpc"},
    "_region": {"_staging"},
    "_apply": {"_region", "_staging", "diff"},  # diff lazily
    "_tablestate": {
        "_apply",
        "_journal",
        "_render_cache",
        "_schema_sql",
        "_segkeys",
        "_segments",
        "_staging",
        "_writers",
        "memfs",
        "nfs3",
        "rpc",
        "scratchfs",
        "vfs",
    },
    "_tablewrites": {
        "_apply",
        "_journal",
        "_staging",
        "_tablestate",
        "_writers",
        "nfs3",
        "rpc",
        "vfs",
    },
    "_pathops": {"nfs3", "rpc", "vfs"},
    "_tableattrs": {"_tablestate", "_tablewrites", "_writers", "nfs3", "rpc", "vfs"},
    "tableview": {
        "_apply",
        "_journal",
        "_pathops",
        "_render_cache",
        "_tableattrs",
        "_schema_sql",
        "_segkeys",
        "_segments",
        "_staging",
        "_tablestate",
        "_tablewrites",
        "_writers",
        "memfs",
        "nfs3",
        "rpc",
        "scratchfs",
        "vfs",
    },
    # the transport (the only asyncio), the stack it serves, the package's lazy re-export
    "_serving": {
        "drc",
        "mount",
        "nfs3.handles",
        "nfs3.program",
        "nfs3.service",
        "nfs3.types",
        "nfs4.service",
        "nfs4.state",
        "portmap",
        "rpc",
        "tableview",  # lazily: posixlake loads only when a table is served
        "vfs",
    },
    # NFSv4.0 beside v3 (nfs/nfs4/)
    "nfs4": set(),
    "nfs4.types": {"nfs3.codec", "xdr"},
    "nfs4.ops": {"nfs3.codec", "nfs4.types", "xdr"},
    "nfs4.state": {"nfs4.ops", "nfs4.types"},
    "nfs4.attrs": {"nfs3.types", "nfs4.types", "vfs"},
    "nfs4.service": {
        "nfs3.handles",
        "nfs3.service",
        "nfs3.types",
        "nfs4",
        "nfs4.attrs",
        "nfs4.ops",
        "nfs4.state",
        "nfs4.types",
        "rpc",
        "vfs",
        "xdr",
    },
    "_sender": set(),  # the write side of a connection (sockets and threads, no asyncio)
    "server": {"_sender", "_serving", "nfs3.service", "nfs4.state", "record", "rpc"},
    "__init__": {"server", "vfs"},  # server lazily (``nfs.NfsServer``)
}

POSIXLAKE_USERS = {
    "tableview",
    "_tablestate",
    "_tablewrites",
    "_apply",
    "_journal",  # posixlake.storage.local.fsync_dir
    "_segments",
    "_segkeys",
    "_segstore",
    "diff",
}
"""The modules that may import posixlake (the table side); the protocol core never does."""


def modules() -> set[str]:
    """Return the name of every module of nfs/: ``"rpc"``, ``"nfs3"`` (a package), ``"nfs3.types"``."""
    found = set()
    for path in NFS_DIR.rglob("*.py"):
        parts = list(path.relative_to(NFS_DIR).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        found.add(".".join(parts))
    return found


def _source(module: str) -> Path:
    path = NFS_DIR.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def imports(module: str) -> tuple[set[str], set[str]]:
    """Return (nfs modules, top-level packages) that `module` imports anywhere in its source."""
    known = modules()
    ours: set[str] = set()
    packages: set[str] = set()
    for node in ast.walk(ast.parse(_source(module).read_text())):
        targets: list[tuple[str, str | None]]
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [(node.module, a.name) for a in node.names]
        else:
            continue
        for name, member in targets:
            parts = name.split(".")
            packages.add(parts[0])
            if parts[0] != "nfs":
                continue
            inner = ".".join(parts[1:])
            sub = f"{inner}.{member}" if inner and member else member
            if (
                sub is not None and sub in known
            ):  # ``from nfs.nfs3 import types`` imports nfs.nfs3.types
                ours.add(sub)
            else:
                ours.add(inner or "__init__")
    return ours, packages


def test_every_module_is_listed() -> None:
    assert modules() == set(ALLOWED)


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_imports_point_one_way(module: str) -> None:
    ours, packages = imports(module)
    assert ours <= ALLOWED[module], f"nfs.{module} imports {sorted(ours - ALLOWED[module])}"
    if module not in POSIXLAKE_USERS:
        assert "posixlake" not in packages, f"nfs.{module} imports posixlake"
    assert ("asyncio" in packages) == (module == "server")


def graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Add the implicit edges: importing ``nfs.a.b`` from outside ``nfs.a`` first runs ``nfs.a``.

    (Inside the package, its ``__init__`` is already running or done.)
    """
    full = {m: set(deps) for m, deps in edges.items()}
    for m, deps in edges.items():
        for dep in deps:
            parent = dep.rpartition(".")[0]
            if parent and m != parent and not m.startswith(parent + "."):
                full[m].add(parent)
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
    assert "tableview" in imports("_serving")[0]  # inside make_vfs
    assert "diff" in imports("_apply")[0]  # inside functions


def test_the_protocol_core_loads_without_asyncio() -> None:
    code = (
        "import sys, nfs, nfs.nfs3, nfs.nfs3.program, nfs.mount, nfs.portmap, nfs.memfs, "
        "nfs.record; print('asyncio' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=NFS_DIR.parent
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("module", ["nfs.vfs", "nfs.nfs3.program", "nfs.nfs3.types"])
def test_any_module_imports_first(module: str) -> None:
    code = f"import {module}"  # a cycle would fail for some first import
    subprocess.run([sys.executable, "-c", code], check=True, cwd=NFS_DIR.parent)


def test_nfs_server_is_exported_lazily() -> None:
    from nfs.server import NfsServer

    assert nfs.NfsServer is NfsServer
