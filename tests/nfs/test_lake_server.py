"""A lake served by the real NfsServer to real clients: libnfs-utils (nfs-ls, nfs-cat,
nfs-cp) on a local lake and an S3 lake (moto_server), and the Linux kernel client (nfs-vm)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nfs.lake.lakefs import LakeFs
from nfs.lake.opening import tablefs_opener
from nfs.protocol.server import NfsServer
from posixlake import DatabaseOps
from posixlake.storage import AzureConfig, S3Config, storage_options_for
from tests.nfs.conftest import FakeClock
from tests.storage.conftest import REGION, S3_KEY, S3_SECRET, make_bucket

TOOLS = ("nfs-ls", "nfs-cat", "nfs-cp")
_missing = [t for t in TOOLS if shutil.which(t) is None]
needs_libnfs = pytest.mark.skipif(
    bool(_missing), reason=f"libnfs-utils not installed (apt install libnfs-utils): {_missing}"
)
SCHEMA = {"id": "Int64", "name": "String"}


def run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, capture_output=True, timeout=120, check=False)


def ls(server: NfsServer, path: str) -> set[str]:
    res = run("nfs-ls", server.nfs_url(path))
    assert res.returncode == 0, res.stderr
    return {line.split()[-1] for line in res.stdout.decode().splitlines()} - {".", ".."}


def make(uri: str, rows: int, storage: Any = None) -> DatabaseOps:
    db = DatabaseOps.create(uri, SCHEMA, primary_key="id", storage=storage, engine="local")
    db.insert([{"id": i, "name": f"n{i}"} for i in range(rows)])
    return db


def serve(root: str, state: Path, clock: FakeClock, storage: Any = None) -> NfsServer:
    opener = tablefs_opener(
        root,
        state_dir=state,
        storage=storage,
        engine={"engine": "local"},
        tablefs={"idle_timer": False, "clock": clock},
    )
    options = storage_options_for(root, storage) if storage is not None else None
    lake = LakeFs(root, opener, storage_options=options, state_dir=state, clock=clock)
    return NfsServer(lake)


def check_lake(server: NfsServer, clock: FakeClock, tmp_path: Path, version_of: Any) -> None:
    """ls of the lake, cat of a table, cp onto one table changes only that one."""
    assert ls(server, "/") == {"sales", "ops"}
    assert ls(server, "/ops") == {"events"}
    assert ls(server, "/sales") == {"data", "schema.sql", "versions", "changes.csv"}
    cat = run("nfs-cat", server.nfs_url("/ops/events/data/data.csv"))
    assert cat.returncode == 0, cat.stderr
    assert cat.stdout == b"id,name\n0,n0\n1,n1\n2,n2\n"
    before = {t: version_of(t) for t in ("sales", "ops/events")}
    new = tmp_path / "new.csv"
    new.write_bytes(b"id,name\n0,n0\n1,n1\n9,nine\n")
    cp = run("nfs-cp", str(new), server.nfs_url("/sales/data/data.csv"))
    assert cp.returncode == 0, cp.stderr
    clock.advance(60)  # the writer is quiet: NFSv3 has no close
    lake = server.vfs
    assert isinstance(lake, LakeFs)
    lake.poll()
    assert version_of("sales") == before["sales"] + 1
    assert version_of("ops/events") == before["ops/events"]
    again = run("nfs-cat", server.nfs_url("/sales/data/data.csv"))
    assert again.stdout == new.read_bytes()


@needs_libnfs
def test_libnfs_reads_and_writes_a_local_lake(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    make(str(root / "sales"), 2)
    make(str(root / "ops" / "events"), 3)
    clock = FakeClock()

    def version_of(table: str) -> int:
        return DatabaseOps.open(root / table, engine="local").version

    with serve(str(root), tmp_path / "state", clock) as server:
        check_lake(server, clock, tmp_path, version_of)


@pytest.fixture
def s3_root(moto_server: Any) -> Iterator[tuple[str, S3Config]]:
    bucket = make_bucket("s3", moto_server.endpoint)
    yield f"s3://{bucket}/lake", S3Config(moto_server.endpoint, S3_KEY, S3_SECRET, REGION)


@needs_libnfs
@pytest.mark.s3
def test_libnfs_reads_and_writes_an_s3_lake(s3_root: tuple[str, S3Config], tmp_path: Path) -> None:
    root, config = s3_root
    make(f"{root}/sales", 2, config)
    make(f"{root}/ops/events", 3, config)
    clock = FakeClock()

    def version_of(table: str) -> int:
        return DatabaseOps.open(f"{root}/{table}", storage=config, engine="local").version

    with serve(root, tmp_path / "state", clock, config) as server:
        check_lake(server, clock, tmp_path, version_of)
        # a table made by another process shows within the listing TTL
        make(f"{root}/ops/fresh", 1, config)
        clock.advance(1)
        assert ls(server, "/ops") == {"events", "fresh"}


@pytest.mark.mount
@pytest.mark.slow
def test_the_kernel_client_lists_reads_and_appends_to_one_table(tmp_path: Path) -> None:
    from tests.nfs.vmclient import require_vm, run_in_vm

    require_vm()
    root = tmp_path / "lake"
    sales = make(str(root / "sales"), 2)
    events = make(str(root / "ops" / "events"), 3)
    before = (sales.version, events.version)
    state = tmp_path / "state"
    opener = tablefs_opener(str(root), state_dir=state, engine={"engine": "local"})
    lake = LakeFs(str(root), opener, state_dir=state)
    script = """
        ls /mnt; echo --; ls /mnt/ops; echo --
        cat /mnt/ops/events/data/data.csv; echo --
        echo '7,seven' >> /mnt/sales/data/data.csv; echo "append=$?"
        rmdir /mnt/ops/events 2>&1; echo "rmdir=$?"
        mv /mnt/sales /mnt/renamed 2>&1; echo "mv=$?"
        ls /mnt
    """
    with NfsServer(lake) as server:
        res = run_in_vm(server.port, script, vers="4.0", timeout=180)
    assert res.returncode == 0, res.stderr
    parts = res.stdout.split("--\n")
    assert parts[0].split() == ["ops", "sales"]
    assert parts[1].split() == ["events"]
    assert parts[2] == "id,name\n0,n0\n1,n1\n2,n2\n"
    tail = parts[3]
    assert "append=0" in tail
    assert "Permission denied" in tail and "rmdir=1" in tail and "mv=1" in tail
    assert tail.rstrip().splitlines()[-1].split() == ["ops", "sales"]
    after_sales = DatabaseOps.open(root / "sales", engine="local")
    assert after_sales.version == before[0] + 1
    assert sorted(r["id"] for r in after_sales.to_arrow().to_pylist()) == [0, 1, 7]
    assert DatabaseOps.open(root / "ops" / "events", engine="local").version == before[1]


@pytest.mark.mount
@pytest.mark.slow
def test_the_kernel_client_makes_a_table_by_writing_its_schema(tmp_path: Path) -> None:
    from nfs.lake.opening import table_creator
    from tests.nfs.vmclient import require_vm, run_in_vm

    require_vm()
    root = tmp_path / "lake"
    make(str(root / "old"), 1)
    state = tmp_path / "state"
    opener = tablefs_opener(str(root), state_dir=state, engine={"engine": "local"})
    creator = table_creator(str(root), engine={"engine": "local"})
    lake = LakeFs(str(root), opener, state_dir=state, creator=creator)
    script = """
        mkdir /mnt/sales; echo "mkdir=$?"
        printf 'CREATE TABLE data (\\n  id BIGINT NOT NULL,\\n  name STRING,\\n  PRIMARY KEY (id)\\n);\\n' > /tmp/schema.sql
        cp /tmp/schema.sql /mnt/sales/schema.sql; echo "cp=$?"
        ls /mnt/sales
        echo '1,one' >> /mnt/sales/data/data.csv; echo "append=$?"
        cat /mnt/sales/data/data.csv
    """
    with NfsServer(lake) as server:
        res = run_in_vm(server.port, script, vers="4.0", timeout=180)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "mkdir=0" in out and "cp=0" in out and "append=0" in out, out + res.stderr
    listed = out.split("cp=0\n", 1)[1].split("append=", 1)[0].split()
    assert listed == ["changes.csv", "data", "schema.sql", "versions"], out + res.stderr
    assert out.rstrip().endswith("id,name\n1,one")
    db = DatabaseOps.open(root / "sales", engine="local")
    assert db.primary_key() in ("id", ["id"])
    assert db.to_arrow().to_pylist() == [{"id": 1, "name": "one"}]


@needs_libnfs
@pytest.mark.azure
def test_libnfs_reads_and_writes_an_azure_lake(azurite_server: Any, tmp_path: Path) -> None:
    container = make_bucket("azure", azurite_server.endpoint)
    root = f"az://{container}/lake"
    config = AzureConfig.emulator(azurite_server.endpoint)
    make(f"{root}/sales", 2, config)
    make(f"{root}/ops/events", 3, config)
    clock = FakeClock()

    def version_of(table: str) -> int:
        return DatabaseOps.open(f"{root}/{table}", storage=config, engine="local").version

    with serve(root, tmp_path / "state", clock, config) as server:
        check_lake(server, clock, tmp_path, version_of)
