"""A table made by copying data.csv into a new lake directory, through the real NfsServer:
libnfs-utils' nfs-cp (NFSv3) and the Linux kernel client (nfs-vm, NFSv4.0)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from nfs.lake.lakefs import LakeFs
from nfs.lake.newrows import rows_table_creator
from nfs.lake.opening import table_creator, tablefs_opener
from nfs.protocol.nfs3 import Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.server import NfsServer
from nfs.protocol.vfs import BOUNDED_PEER_PREFIX
from posixlake import DatabaseOps, S3Config
from posixlake.storage import storage_options_for
from tests.nfs.conftest import FakeClock

needs_libnfs = pytest.mark.skipif(
    shutil.which("nfs-cp") is None or shutil.which("nfs-cat") is None,
    reason="libnfs-utils not installed (apt install libnfs-utils)",
)
ROWS = b"id,zip,amount\n1,007,1.5\n2,10115,-3\n3,,0.25\n"


def run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, capture_output=True, timeout=120, check=False)


def lake_fs(root: Path, state: Path, clock: FakeClock | None = None) -> LakeFs:
    """The lake with tables made by writing; ``clock``: injected, no idle timers."""
    timed: dict[str, object] = {"clock": clock, "idle_timer": False} if clock else {}
    opener = tablefs_opener(str(root), state_dir=state, engine={"engine": "local"}, tablefs=timed)
    creator = table_creator(str(root), engine={"engine": "local"})
    rows = rows_table_creator(str(root))
    if clock is None:
        return LakeFs(str(root), opener, state_dir=state, creator=creator, rows_creator=rows)
    return LakeFs(
        str(root),
        opener,
        state_dir=state,
        creator=creator,
        rows_creator=rows,
        clock=clock,
        idle_timer=False,
    )


@needs_libnfs
def test_nfs_cp_of_data_csv_into_a_new_directory_makes_the_table(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    with DatabaseOps.create(root / "old", {"id": "Int64"}, engine="local"):
        pass
    clock = FakeClock()
    lake = lake_fs(root, tmp_path / "state", clock)
    src = tmp_path / "rows.csv"
    src.write_bytes(ROWS)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"a,b\n1,2,3\n")
    with NfsServer(lake) as server:
        # libnfs has no mkdir tool: the directory is made in process, as a client's MKDIR
        lake.mkdir(lake.root_dir(), "sales", Sattr3(), CallContext.local())
        lake.mkdir(lake.root_dir(), "broken", Sattr3(), CallContext.local())
        cp = run("nfs-cp", str(src), server.nfs_url("/sales/data.csv"))
        assert cp.returncode == 0, cp.stderr
        assert not (root / "sales").exists()  # NFSv3: made when the writer is done
        clock.advance(60)
        lake.poll()
        db = DatabaseOps.open(root / "sales", engine="local")
        assert db.version == 0
        assert db.arrow_schema.field("zip").type == pa.string()
        assert db.arrow_schema.field("amount").type == pa.float64()
        cat = run("nfs-cat", server.nfs_url("/sales/data/data.csv"))
        assert cat.returncode == 0, cat.stderr
        assert cat.stdout == ROWS
        # a second cp onto the made table's data.csv name: refused, nothing changes
        again = run("nfs-cp", str(src), server.nfs_url("/sales/data.csv"))
        assert again.returncode != 0
        assert DatabaseOps.open(root / "sales", engine="local").version == 0
        # bad CSV: refused, nothing made
        run("nfs-cp", str(bad), server.nfs_url("/broken/data.csv"))
        clock.advance(60)
        lake.poll()
        assert not (root / "broken").exists()


@pytest.mark.mount
@pytest.mark.slow
def test_the_kernel_client_makes_a_table_with_mkdir_and_cp(tmp_path: Path) -> None:
    from tests.nfs.vmclient import require_vm, run_in_vm

    require_vm()
    root = tmp_path / "lake"
    with DatabaseOps.create(root / "old", {"id": "Int64"}, engine="local"):
        pass
    lake = lake_fs(root, tmp_path / "state")
    script = """
        printf 'id,zip,amount\\n1,007,1.5\\n2,10115,-3\\n3,,0.25\\n' > /tmp/rows.csv
        mkdir /mnt/sales; echo "mkdir=$?"
        cp /tmp/rows.csv /mnt/sales/data.csv; echo "cp=$?"
        ls /mnt/sales
        cat /mnt/sales/data/data.csv
        mkdir -p /mnt/more/data && cp /tmp/rows.csv /mnt/more/data/data.csv; echo "cp2=$?"
    """
    with NfsServer(lake) as server:
        res = run_in_vm(server.port, script, vers="4.0", timeout=180)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "mkdir=0" in out and "cp=0" in out, out + res.stderr
    listed = out.split("cp=0\n", 1)[1].split("id,zip", 1)[0].split()
    assert listed == ["changes.csv", "data", "schema.sql", "versions"], out + res.stderr
    assert out.endswith("id,zip,amount\n1,007,1.5\n2,10115,-3\n3,,0.25\ncp2=0\n"), out
    for name in ("sales", "more"):  # data.csv, or data/data.csv after mkdir -p
        db = DatabaseOps.open(root / name, engine="local")
        assert db.version == 0
        assert db.arrow_schema.field("zip").type == pa.string()
        assert len(db.to_arrow()) == 3


@pytest.mark.s3
def test_a_table_made_from_its_rows_on_s3(moto_server: Any, tmp_path: Path) -> None:
    from tests.storage.conftest import REGION, S3_KEY, S3_SECRET, make_bucket

    bucket = make_bucket("s3", moto_server.endpoint)
    root = f"s3://{bucket}/lake"
    config = S3Config(moto_server.endpoint, S3_KEY, S3_SECRET, REGION)
    with DatabaseOps.create(f"{root}/old", {"id": "Int64"}, storage=config, engine="local"):
        pass
    state = tmp_path / "state"
    opener = tablefs_opener(
        root, state_dir=state, storage=config, engine={"engine": "local"}, tablefs={}
    )
    lake = LakeFs(
        root,
        opener,
        storage_options=storage_options_for(root, config),
        state_dir=state,
        creator=table_creator(root, storage=config, engine={"engine": "local"}),
        rows_creator=rows_table_creator(root, storage=config),
        idle_timer=False,
    )
    ctx = CallContext.local(peer=BOUNDED_PEER_PREFIX + "c/o")
    try:
        new = lake.mkdir(lake.root_dir(), "sales", Sattr3(), ctx)
        fid = lake.create(new, "data.csv", Sattr3(size=0), ctx, guarded=False)
        lake.write(fid, 0, ROWS, StableHow.UNSTABLE, ctx)
        lake.finish(fid, ctx)
        db = DatabaseOps.open(f"{root}/sales", storage=config, engine="local")
        assert db.version == 0
        assert db.arrow_schema.field("zip").type == pa.string()
        assert sorted(r["id"] for r in db.to_arrow().to_pylist()) == [1, 2, 3]
        assert "sales" in lake.tables()
        assert bytes(lake.read(fid, 0, 1 << 16, ctx)[0]) == ROWS
    finally:
        lake.close()
