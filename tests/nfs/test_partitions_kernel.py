"""/partitions through the Linux kernel client (nfs-vm, NFSv3 and NFSv4.0).

``ls`` and ``cat`` of a partition show its rows; ``cat partitions/*/*/data.csv`` (headers
dropped) holds the table's rows; an ``echo >>`` into a partition inserts its row in one
commit, one with another partition's value fails (EINVAL) and commits nothing, and a
``sed -i`` there changes only that partition's rows.
"""

from __future__ import annotations

import datetime
from collections import Counter
from pathlib import Path

import pytest

from nfs.protocol.server import NfsServer
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import render_csv
from tests.nfs.vmclient import require_vm, run_in_vm

pytestmark = [pytest.mark.mount, pytest.mark.slow]

SCRIPT = """
ls -1N partitions
ls -1N partitions/region=eu
echo ---
cat partitions/region=eu/day=2024-01-02/data.csv
echo ---
for f in partitions/*/*/data.csv; do tail -n +2 "$f"; done
echo ---
echo '999,eu,2024-01-02,x' >> partitions/region=eu/day=2024-01-02/data.csv
echo "append status $?"
cat partitions/region=eu/day=2024-01-02/data.csv > /tmp/wrong.csv
echo '998,us,2024-01-02,x' >> /tmp/wrong.csv
cp /tmp/wrong.csv partitions/region=eu/day=2024-01-02/data.csv
echo "wrong status $?"
sed -i 's/^2,eu,2024-01-03,n2$/2,eu,2024-01-03,edited/' partitions/region=eu/day=2024-01-03/data.csv
echo "sed status $?"
ls -1N partitions/region=eu/day=2024-01-03
"""


@pytest.fixture(scope="module", autouse=True)
def _vm() -> None:
    require_vm()


@pytest.mark.parametrize("vers", [None, "4.0"])
def test_cat_and_append_through_the_kernel(tmp_path: Path, vers: str | None) -> None:
    db = DatabaseOps.create(
        tmp_path / "t",
        {"id": "Int64", "region": "String", "day": "Date", "note": "String"},
        partition_by=["region", "day"],
        engine="local",
    )
    db.insert(
        [
            {
                "id": i,
                "region": ["eu", "us"][i % 2],
                "day": datetime.date(2024, 1, 1 + i % 3),
                "note": f"n{i}",
            }
            for i in range(60)
        ]
    )
    version = db.version
    before = db.to_arrow()
    fs = TableFs(db, state_dir=tmp_path / "state", segment_cache=tmp_path / "segments")
    with NfsServer(fs) as srv:
        res = run_in_vm(srv.port, SCRIPT, vers=vers, timeout=180)
    listing, one, together, tail = res.stdout.split("---\n")
    assert listing.split() == [
        "region=eu",
        "region=us",
        "day=2024-01-01",
        "day=2024-01-02",
        "day=2024-01-03",
    ]
    rows = one.encode().splitlines()
    assert rows[0] == b"id,region,day,note"
    assert sorted(int(r.split(b",")[0]) for r in rows[1:]) == [
        i for i in range(60) if i % 2 == 0 and i % 3 == 1
    ]
    table_before = Counter(render_csv(before).splitlines()[1:])
    assert Counter(together.encode().splitlines()) == table_before
    assert "append status 0" in tail, (res.stdout, res.stderr)
    assert "wrong status 1" in tail, (res.stdout, res.stderr)
    assert "sed status 0" in tail, (res.stdout, res.stderr)
    assert tail.split("sed status 0\n")[1].split() == ["data.csv"]  # sed's file is gone
    assert "nvalid argument" in res.stderr, res.stderr
    assert db.version == version + 2  # the append, and the sed -i: one commit each
    want = table_before + Counter([b"999,eu,2024-01-02,x", b"2,eu,2024-01-03,edited"])
    want -= Counter([b"2,eu,2024-01-03,n2"])
    assert Counter(render_csv(db.to_arrow()).splitlines()[1:]) == want


def test_a_partition_of_a_lake_table_through_the_kernel(tmp_path: Path) -> None:
    """A lake mount (NFSv4.0): cat of one partition of a table, echo >> into it (one
    commit, that table only), a row of another partition refused, and rm -r of the
    table one commit."""
    from nfs.lake.lakefs import LakeFs
    from nfs.lake.opening import tablefs_opener

    root = tmp_path / "lake"
    db = DatabaseOps.create(
        root / "ops" / "events",
        {"id": "Int64", "region": "String"},
        partition_by=["region"],
        engine="local",
    )
    db.insert([{"id": i, "region": ["eu", "us"][i % 2]} for i in range(6)])
    other = DatabaseOps.create(root / "sales", {"id": "Int64"}, engine="local")
    other.insert([{"id": 1}])
    versions = (db.version, other.version)
    state = tmp_path / "state"
    lake = LakeFs(
        str(root),
        tablefs_opener(str(root), state_dir=state, engine={"engine": "local"}),
        state_dir=state,
    )
    script = """
        p=/mnt/ops/events/partitions/region=eu/data.csv
        cat $p; echo --
        echo '10,eu' >> $p; echo "append=$?"
        { cat $p; echo '11,us'; } > /tmp/wrong.csv
        cp /tmp/wrong.csv $p; echo "wrong=$?"
        cat $p
        rm -r /mnt/ops/events 2>/dev/null; echo "rm=$?"
    """
    with NfsServer(lake) as server:
        res = run_in_vm(server.port, script, vers="4.0", timeout=180)
    assert res.returncode == 0, res.stderr
    first, tail = res.stdout.split("--\n")
    assert first == "id,region\n0,eu\n2,eu\n4,eu\n"
    assert "append=0" in tail and "wrong=1" in tail, (res.stdout, res.stderr)
    assert tail.splitlines()[-5:-1] == ["0,eu", "2,eu", "4,eu", "10,eu"]
    assert "rm=1" in tail  # the table's own files and directories stay
    after = DatabaseOps.open(root / "ops" / "events", engine="local")
    # the append, then rm -r: data/data.csv first (listed before partitions/), all rows in
    # ONE commit; partitions/ is empty by then; the table and its history stay
    assert after.version == versions[0] + 2
    assert after.to_arrow().num_rows == 0
    assert sorted(r["id"] for r in after.to_arrow(version=versions[0] + 1).to_pylist()) == [
        0,
        1,
        2,
        3,
        4,
        5,
        10,
    ]
    assert DatabaseOps.open(root / "sales", engine="local").version == versions[1]
