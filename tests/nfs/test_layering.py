"""The layering of nfs/ (STYLE.md): bytes go up, results come down; only server.py uses asyncio."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import nfs

NFS_DIR = Path(nfs.__file__).parent

ALLOWED: dict[str, set[str]] = {
    "xdr": set(),
    "record": set(),
    "rpc": {"xdr"},
    "vfs": set(),  # nfs3 / rpc only under TYPE_CHECKING
    "nfs3": {"rpc", "vfs", "xdr"},
    "mount": {"nfs3", "rpc", "vfs", "xdr"},
    "portmap": {"rpc", "xdr"},
    "memfs": {"nfs3", "rpc", "vfs"},
    "identity": {"nfs3", "rpc", "vfs"},
    "scratchfs": {"memfs", "nfs3", "vfs"},
    "server": {"mount", "nfs3", "portmap", "record", "rpc", "vfs"},
}


def runtime_imports(module: str) -> tuple[set[str], set[str]]:
    """Return (nfs submodules, top-level packages) imported outside TYPE_CHECKING blocks."""
    tree = ast.parse((NFS_DIR / f"{module}.py").read_text())
    ours: set[str] = set()
    packages: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom) and child.module:
                names = [child.module]
            elif isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            else:
                visit(child)
                continue
            for name in names:
                parts = name.split(".")
                packages.add(parts[0])
                if parts[0] == "nfs" and len(parts) > 1:
                    ours.add(parts[1])

    visit(tree)
    return ours, packages


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_imports_point_one_way(module: str) -> None:
    ours, packages = runtime_imports(module)
    assert ours <= ALLOWED[module], f"nfs.{module} imports {sorted(ours - ALLOWED[module])}"
    assert "posixlake" not in packages
    assert ("asyncio" in packages) == (module == "server")


def test_the_protocol_core_loads_without_asyncio() -> None:
    code = (
        "import sys, nfs, nfs.nfs3, nfs.mount, nfs.portmap, nfs.memfs, nfs.record; "
        "print('asyncio' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=NFS_DIR.parent
    )
    assert out.stdout.strip() == "False"


def test_nfs_server_is_exported_lazily() -> None:
    from nfs.server import NfsServer

    assert nfs.NfsServer is NfsServer
