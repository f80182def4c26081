"""A real NFS client: Debian's libnfs-utils (nfs-ls, nfs-cat, nfs-cp) against NfsServer(MemoryFs).

libnfs speaks MOUNT + NFSv3 on the given ports (``nfsport``/``mountport`` URL
arguments, no portmapper) and mounts the parent directory of the file it opens.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nfs.protocol.memfs import MemoryFs
from nfs.protocol.server import NfsServer

TOOLS = ("nfs-ls", "nfs-cat", "nfs-cp")
MISSING = [t for t in TOOLS if shutil.which(t) is None]
if MISSING:
    print(f"libnfs tests skipped: {', '.join(MISSING)} not installed (apt install libnfs-utils)")
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"libnfs-utils not installed: {', '.join(MISSING)} missing"
)


def run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, capture_output=True, timeout=60, check=False)


def ports(server: NfsServer) -> str:
    return f"version=3&nfsport={server.port}&mountport={server.port}"


@pytest.fixture
def tree(memfs: MemoryFs) -> MemoryFs:
    memfs.put("/a.txt", b"hello from memfs\n")
    memfs.put("/data/data.csv", b"id,name\n1,ann\n2,bob\n")
    memfs.put("/versions/3/data.csv", b"id,name\n")
    return memfs


def test_nfs_ls_of_the_root(nfs_server: NfsServer, tree: MemoryFs) -> None:
    res = run("nfs-ls", f"nfs://127.0.0.1/?{ports(nfs_server)}")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.decode().splitlines()
    names = sorted(line.split()[-1] for line in lines)
    assert names == ["a.txt", "data", "versions"]
    a_line = next(line for line in lines if line.endswith(" a.txt"))
    assert a_line.startswith("-rw-r--r--") and " 17 " in a_line
    assert next(line for line in lines if line.endswith(" data")).startswith("drwxr-xr-x")


def test_nfs_ls_recursive_and_of_the_share_alias(nfs_server: NfsServer, tree: MemoryFs) -> None:
    res = run("nfs-ls", "-R", f"nfs://127.0.0.1/?{ports(nfs_server)}")
    assert res.returncode == 0, res.stderr
    assert "versions/3/data.csv" in res.stdout.decode()
    res = run("nfs-ls", f"nfs://127.0.0.1/share/data?{ports(nfs_server)}")
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().split()[-1] == "data.csv"


@pytest.mark.parametrize(
    ("url_path", "content"),
    [
        ("/data/data.csv", b"id,name\n1,ann\n2,bob\n"),  # MNT /data, then LOOKUP
        ("/share/data/data.csv", b"id,name\n1,ann\n2,bob\n"),  # the original's export path
        ("/versions/3/data.csv", b"id,name\n"),
        ("/share/a.txt", b"hello from memfs\n"),
        ("//a.txt", b"hello from memfs\n"),
    ],
)
def test_nfs_cat(nfs_server: NfsServer, tree: MemoryFs, url_path: str, content: bytes) -> None:
    res = run("nfs-cat", f"nfs://127.0.0.1{url_path}?{ports(nfs_server)}")
    assert res.returncode == 0, res.stderr
    assert res.stdout == content


def test_nfs_url_reaches_a_file_in_the_root(nfs_server: NfsServer, tree: MemoryFs) -> None:
    # nfs://host/a.txt makes libnfs mount "" and, with its default nested-mount
    # discovery, give up before any NFS call: nfs_url() turns the discovery off.
    res = run("nfs-cat", nfs_server.nfs_url("/a.txt"))
    assert res.returncode == 0, res.stderr
    assert res.stdout == b"hello from memfs\n"


def test_nfs_cp_into_the_export_and_back(
    nfs_server: NfsServer, tree: MemoryFs, tmp_path: Path
) -> None:
    payload = bytes(range(256)) * 12_000 + b"tail"  # ~3 MiB: several 1 MiB WRITEs and READs
    src = tmp_path / "in.bin"
    src.write_bytes(payload)
    res = run("nfs-cp", str(src), nfs_server.nfs_url("/data/copy.bin"))
    assert res.returncode == 0, res.stderr
    assert tree.get("/data/copy.bin") == payload
    back = tmp_path / "out.bin"
    res = run("nfs-cp", nfs_server.nfs_url("/data/copy.bin"), str(back))
    assert res.returncode == 0, res.stderr
    assert back.read_bytes() == payload
    res = run("nfs-cp", str(src), f"nfs://127.0.0.1/share/top.bin?{ports(nfs_server)}")
    assert res.returncode == 0, res.stderr
    assert tree.get("/top.bin") == payload


def test_nfs_cat_of_a_missing_file_fails(nfs_server: NfsServer, tree: MemoryFs) -> None:
    res = run("nfs-cat", nfs_server.nfs_url("/data/missing.csv"))
    assert res.returncode != 0
    res = run("nfs-ls", f"nfs://127.0.0.1/nope?{ports(nfs_server)}")
    assert res.returncode != 0
