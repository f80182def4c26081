"""/partitions served to Debian's libnfs-utils (nfs-ls, nfs-cat, nfs-cp): a real client.

A partition is listed and read over the wire as in process; a copy onto a partition's
data.csv changes that partition's rows only (one commit once the writer is done), and a
copy holding a row of another partition is refused and commits nothing.
"""

from __future__ import annotations

import datetime
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nfs.protocol.server import NfsServer
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from tests.nfs.idle import FakeClock, quiet

TOOLS = ("nfs-ls", "nfs-cat", "nfs-cp")
_missing = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = pytest.mark.skipif(
    bool(_missing),
    reason=f"libnfs-utils not installed (missing {', '.join(_missing)}; apt install libnfs-utils)",
)

DAYS = [datetime.date(2024, 1, d) for d in (1, 2, 3)]


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(args, capture_output=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}): {proc.stderr.decode()}")
    return proc


@pytest.fixture
def db(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / "t",
        {"id": "Int64", "region": "String", "day": "Date", "note": "String"},
        partition_by=["region", "day"],
        engine="local",
    )
    d.insert(
        [
            {"id": i, "region": ["eu", "us"][i % 2], "day": DAYS[i % 3], "note": f"n, {i}"}
            for i in range(3000)
        ]
    )
    return d


@pytest.fixture
def server(db: DatabaseOps, tmp_path: Path) -> Iterator[NfsServer]:
    fs = TableFs(
        db,
        idle_timer=False,
        clock=FakeClock(),
        state_dir=tmp_path / "state",
        segment_cache=tmp_path / "segments",
    )
    with NfsServer(fs) as srv:
        yield srv


def names(listing: bytes) -> list[str]:
    return sorted(line.split()[-1] for line in listing.decode().splitlines() if line.strip())


def test_nfs_ls_lists_the_partitions(server: NfsServer) -> None:
    assert "partitions" in names(run("nfs-ls", server.nfs_url("/")).stdout)
    assert names(run("nfs-ls", server.nfs_url("/partitions")).stdout) == ["region=eu", "region=us"]
    assert names(run("nfs-ls", server.nfs_url("/partitions/region=us")).stdout) == [
        "day=2024-01-01",
        "day=2024-01-02",
        "day=2024-01-03",
    ]


def test_nfs_cat_reads_one_partition(server: NfsServer, db: DatabaseOps) -> None:
    table = run("nfs-cat", server.nfs_url("/data/data.csv")).stdout.splitlines()
    got = run("nfs-cat", server.nfs_url("/partitions/region=eu/day=2024-01-02/data.csv")).stdout
    rows = got.splitlines()
    assert rows[0] == table[0] == b"id,region,day,note"
    want = sorted(
        r["id"]
        for r in db.to_arrow().to_pylist()
        if r["region"] == "eu" and r["day"] == datetime.date(2024, 1, 2)
    )
    assert sorted(int(r.split(b",")[0]) for r in rows[1:]) == want
    assert set(rows[1:]) <= set(table[1:])


def test_nfs_cp_onto_a_partition_changes_only_its_rows(
    server: NfsServer, db: DatabaseOps, tmp_path: Path
) -> None:
    url = server.nfs_url("/partitions/region=eu/day=2024-01-01/data.csv")
    old = run("nfs-cat", url).stdout
    lines = old.splitlines()
    new = b"\n".join([lines[0], *lines[2:], b'99999,eu,2024-01-01,"x, y"']) + b"\n"
    (tmp_path / "new.csv").write_bytes(new)
    before = db.to_arrow().to_pylist()
    version = db.version
    run("nfs-cp", str(tmp_path / "new.csv"), url)
    quiet(server)
    assert db.version == version + 1
    after = db.to_arrow().to_pylist()

    def outside(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        keep = [r for r in rows if (r["region"], r["day"]) != ("eu", DAYS[0])]
        return sorted(keep, key=lambda r: str(r["id"]))

    assert outside(after) == outside(before)
    dropped = int(lines[1].split(b",")[0])
    mine = {r["id"] for r in after if (r["region"], r["day"]) == ("eu", DAYS[0])}
    assert dropped not in mine and 99999 in mine
    assert sorted(run("nfs-cat", url).stdout.splitlines()) == sorted(new.splitlines())


def test_nfs_cp_of_another_partition_row_is_refused(
    server: NfsServer, db: DatabaseOps, tmp_path: Path
) -> None:
    url = server.nfs_url("/partitions/region=eu/day=2024-01-01/data.csv")
    old = run("nfs-cat", url).stdout
    (tmp_path / "new.csv").write_bytes(old + b"99999,us,2024-01-01,x\n")
    version = db.version
    res = run("nfs-cp", str(tmp_path / "new.csv"), url, check=False)
    assert res.returncode != 0
    quiet(server)
    assert db.version == version
    assert run("nfs-cat", url).stdout == old
