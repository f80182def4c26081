"""A table mounted by the Linux kernel NFS client, used with real GNU tools (nfs-vm).

Each test boots one VM (about 5-10 s under TCG) and runs several independent checks in
it. Write steps run in sequence in one VM; afterwards every step's effect is checked
through the Python API on its own Delta version (time travel): exactly one new version
per change, with the expected rows. NFSv3 has no close: a rewrite applies once its writer
has been quiet for the idle period, so a script marks "the writer is quiet now" by
creating a file named ``quiet-*`` (the served TableFs then moves its clock past the idle
period: no sleeping, on either side).
"""

from __future__ import annotations

import hashlib
import re
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from nfs.protocol.server import NfsServer
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import render_csv
from tests.nfs.vmclient import require_vm, run_in_vm

pytestmark = pytest.mark.mount

Row = tuple[Any, ...]


@pytest.fixture(scope="module", autouse=True)
def _vm() -> None:
    require_vm()  # skips when the harness is absent, fails when it is broken


def _vm_run(port: int, script: str, *, timeout: int = 150) -> tuple[dict[str, str], str]:
    """Run ``script`` in the VM; return its ``KEY value`` output lines and its stdout."""
    res = run_in_vm(port, textwrap.dedent(script), timeout=timeout, opts="noacl")
    assert res.returncode == 0, f"VM run failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    kernel = [ln for ln in res.stderr.splitlines() if "guest kernel:" in ln]
    assert not [ln for ln in kernel if "fileid changed" in ln or "not responding" in ln], kernel
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key.isupper():
            out[key] = value.strip()
    return out, res.stdout


def rows_at(db: DatabaseOps, version: int | None = None) -> list[Row]:
    table = db.to_arrow() if version is None else db.to_arrow(version=version)
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


class ShiftedClock:
    """The monotonic clock plus an offset a test moves (to pass the idle period at once)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


class QuietOnCue(TableFs):
    """A TableFs whose writers go quiet (the idle period passes) when a client creates a
    file named ``quiet-*``, or when the test calls :meth:`quiet`."""

    def __init__(self, db: DatabaseOps) -> None:
        self.shift = ShiftedClock()
        super().__init__(db, clock=self.shift, idle_seconds=30)

    def quiet(self) -> None:
        """The idle period passes: the edits that are done apply."""
        self.shift.offset += 31
        self.poll()

    def create(self, dir_id: Any, name: str, attrs: Any, ctx: Any, *, guarded: bool) -> Any:
        if name.startswith("quiet-"):
            self.quiet()
        return super().create(dir_id, name, attrs, ctx, guarded=guarded)


def _serve(db: DatabaseOps) -> NfsServer:
    return NfsServer(QuietOnCue(db))


@pytest.fixture
def fruit(tmp_path: Path) -> DatabaseOps:
    db = DatabaseOps.create(
        tmp_path / "fruit",
        {"id": "Int64", "name": "String", "category": "String", "price": "Float64"},
        engine="local",
    )
    kinds = ["fruit", "veg", "nut"]
    db.insert(
        pa.table(
            {
                "id": pa.array(range(1, 1001), pa.int64()),
                "name": pa.array([f"name{i}" for i in range(1, 1001)]),
                "category": pa.array([kinds[i % 3] for i in range(1, 1001)]),
                "price": pa.array([i * 0.5 for i in range(1, 1001)], pa.float64()),
            }
        )
    )
    db.insert({"id": 0, "name": "zero, with comma", "category": "fruit", "price": None})
    return db


def test_read_tools_sizes_mtimes_and_the_scratch_area(fruit: DatabaseOps) -> None:
    v = fruit.version
    with _serve(fruit) as srv:
        out, stdout = _vm_run(
            srv.port,
            r"""
            set -u
            cd /mnt
            f=data/data.csv
            echo "SIZE $(stat -c %s $f)"
            echo "MTIME $(stat -c %Y $f)"
            echo "LSL $(ls -l --time-style=+%s data | awk '$NF == "data.csv" {print $5, $6}')"
            echo "LINES $(wc -l < $f)"
            echo "HEAD $(head -n 1 $f)"
            echo "TAIL $(tail -n 1 $f)"
            echo "GREP $(grep -c ',fruit,' $f)"
            echo "AWK $(awk -F, 'NR > 1 && $1 > 0 {s += $4} END {printf "%.1f", s}' $f)"
            echo "SORT $(tail -n +2 $f | sort -t, -k1,1n | head -n 3 | cut -d, -f1 | tr '\n' ' ')"
            echo "CUT $(tail -n +2 $f | cut -d, -f1 | sort -n | tail -n 1)"
            echo "QUOTED $(grep -c '"zero, with comma"' $f)"
            echo "VERSIONS $(ls versions | sort -n | tr '\n' ' ')"
            echo "V1LINES $(wc -l < versions/1/data.csv)"
            echo "SCHEMA $(head -n 1 schema.sql)"
            cp $f /tmp/copy.csv && cmp -s /tmp/copy.csv $f && echo "CMP same"
            touch versions/1/data.csv 2>/dev/null && echo "RO1 writable" || echo "RO1 refused"
            rm schema.sql 2>/dev/null && echo "RO2 removed" || echo "RO2 refused"
            echo x > versions/new.txt 2>/dev/null && echo "RO3 created" || echo "RO3 refused"
            mkdir -p work/sub && echo hello > work/sub/a.txt && cp work/sub/a.txt data/copy.txt
            echo "SCRATCH1 $(cat data/copy.txt)"
            mv data/copy.txt work/moved.txt && echo "SCRATCH2 $(cat work/moved.txt) $(ls data | tr '\n' ' ')"
            head -c 300000 /dev/urandom > work/blob.bin
            s1=$(md5sum < work/blob.bin)
            sync; echo 3 > /proc/sys/vm/drop_caches
            [ "$s1" = "$(md5sum < work/blob.bin)" ] && echo "SCRATCH3 same" || echo "SCRATCH3 differ"
            echo "SCRATCH4 $(stat -c %s work/blob.bin)"
            truncate -s 10 work/blob.bin && echo "SCRATCH5 $(stat -c %s work/blob.bin)"
            rm work/sub/a.txt && rmdir work/sub && rm work/moved.txt work/blob.bin && rmdir work
            echo "SCRATCH6 $(ls | tr '\n' ' ')"
            touch data/data.csv && echo "TOUCH ok"
            """,
        )
    view = TableFs(fruit, idle_timer=False)  # the bytes served: rows in segment order
    content = view.paths.read_file("/data/data.csv")
    view.close()
    mtime = int(fruit.commit_time(fruit.version).timestamp())
    assert out["SIZE"] == str(len(content)), stdout
    assert out["MTIME"] == str(mtime)
    assert out["LSL"] == f"{len(content)} {mtime}"
    assert out["LINES"] == "1002"
    assert out["HEAD"] == "id,name,category,price"
    assert out["TAIL"] == content.decode().splitlines()[-1]
    assert out["GREP"] == str(sum(1 for i in range(1, 1001) if i % 3 == 0) + 1)
    assert out["AWK"] == f"{sum(i * 0.5 for i in range(1, 1001)):.1f}"
    assert out["SORT"] == "0 1 2"
    assert out["CUT"] == "1000"
    assert out["QUOTED"] == "1"
    assert out["VERSIONS"] == " ".join(str(i) for i in range(v + 1))
    assert out["V1LINES"] == "1001"
    assert out["SCHEMA"] == "CREATE TABLE data ("
    assert out["CMP"] == "same"
    assert (out["RO1"], out["RO2"], out["RO3"]) == ("refused", "refused", "refused")
    assert out["SCRATCH1"] == "hello"
    assert out["SCRATCH2"] == "hello data.csv"
    assert out["SCRATCH3"] == "same"
    assert out["SCRATCH4"] == "300000" and out["SCRATCH5"] == "10"
    assert out["SCRATCH6"] == "changes.csv data schema.sql versions"
    assert out["TOUCH"] == "ok"
    assert fruit.version == v  # reading, scratch files and touch changed nothing


@pytest.fixture
def small(tmp_path: Path) -> DatabaseOps:
    db = DatabaseOps.create(
        tmp_path / "small", {"id": "Int64", "name": "String", "qty": "Float64"}, engine="local"
    )
    db.insert(
        [
            {"id": 1, "name": "apple", "qty": 1.5},
            {"id": 2, "name": "banana", "qty": 2.0},
            {"id": 3, "name": "cherry", "qty": 3.0},
        ]
    )
    return db


def _steps(stdout: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"^STEP (\S+) rc=(\d+)$", stdout, re.M)}


def test_edits_without_a_key_each_make_one_version(small: DatabaseOps) -> None:
    v = small.version
    with _serve(small) as srv:
        _, stdout = _vm_run(
            srv.port,
            r"""
            set -u
            cd /mnt/data
            step() { echo "STEP $1 rc=$2"; }
            echo "4,date,4" >> data.csv; step append-cold $?
            cat data.csv > /dev/null
            echo "5,elder,5" >> data.csv; step append-warm $?
            sed -i 's/banana/BANANA/' data.csv; step sed $?
            cp data.csv /tmp/x.csv && sed -i 's/^1,apple,1.5$/1,apple,9.5/' /tmp/x.csv
            cp /tmp/x.csv data.csv; step cp $?
            touch /mnt/quiet-1
            printf 'id,name,qty\n1,apple,9.5\n2,BANANA,2\n6,fig,6\n' > /tmp/y.csv
            cat /tmp/y.csv > data.csv; step cat-redirect $?
            touch /mnt/quiet-2
            printf 'id,name,qty\n7,grape,7\n' > upload.csv
            mv upload.csv data.csv; step mv $?
            rm data.csv; step rm $?
            echo "8,kiwi,8" >> data.csv; step append-after-rm $?
            /usr/bin/printf '9,bad\n' >> data.csv; step bad-append $?
            sync; echo 3 > /proc/sys/vm/drop_caches
            echo "FINAL $(tr '\n' '|' < data.csv)"
            echo "LS $(ls | tr '\n' ' ')"
            """,
        )
    steps = _steps(stdout)
    assert steps.pop("bad-append") != 0, stdout  # the error reached close()
    assert set(steps.values()) == {0}, stdout
    expected: list[list[Row]] = [
        [(1, "apple", 1.5), (2, "banana", 2.0), (3, "cherry", 3.0), (4, "date", 4.0)],
        [
            (1, "apple", 1.5),
            (2, "banana", 2.0),
            (3, "cherry", 3.0),
            (4, "date", 4.0),
            (5, "elder", 5.0),
        ],
        [
            (1, "apple", 1.5),
            (2, "BANANA", 2.0),
            (3, "cherry", 3.0),
            (4, "date", 4.0),
            (5, "elder", 5.0),
        ],
        [
            (1, "apple", 9.5),
            (2, "BANANA", 2.0),
            (3, "cherry", 3.0),
            (4, "date", 4.0),
            (5, "elder", 5.0),
        ],
        [(1, "apple", 9.5), (2, "BANANA", 2.0), (6, "fig", 6.0)],
        [(7, "grape", 7.0)],
        [],
        [(8, "kiwi", 8.0)],
    ]
    assert small.version == v + len(expected), [h.operation for h in small.history(12)]
    for k, want in enumerate(expected, start=1):
        assert rows_at(small, v + k) == sorted(want, key=repr), f"after step {k}"
    assert "8,kiwi,8" in stdout and "9,bad" not in stdout.split("FINAL", 1)[1]


def _numbered(path: Path, n: int) -> DatabaseOps:
    """A table (id, name, value) of ``n`` rows: id i, name "name<i>", value i / 2."""
    db = DatabaseOps.create(
        path, {"id": "Int64", "name": "String", "value": "Float64"}, engine="local"
    )
    db.insert(
        pa.table(
            {
                "id": pa.array(range(n), pa.int64()),
                "name": pa.array([f"name{i}" for i in range(n)]),
                "value": pa.array([i * 0.5 for i in range(n)], pa.float64()),
            }
        )
    )
    return db


def test_cat_redirect_of_a_100k_row_file_with_one_row_changed(tmp_path: Path) -> None:
    n = 100_000
    db = _numbered(tmp_path / "big", n)
    v = db.version
    with _serve(db) as srv:
        out, stdout = _vm_run(
            srv.port,
            r"""
            set -u
            cd /mnt/data
            sed 's/^54321,name54321,/54321,CHANGED,/' data.csv > /tmp/new.csv
            echo "NEWSIZE $(stat -c %s /tmp/new.csv)"
            cat /tmp/new.csv > data.csv; echo "CAT $?"
            sync; echo 3 > /proc/sys/vm/drop_caches
            cmp -s /tmp/new.csv data.csv && echo "READBACK same" || echo "READBACK differ"
            touch /mnt/quiet-1
            echo "100000,appended,1" >> data.csv; echo "APPEND $?"
            echo "LINES $(wc -l < data.csv)"
            """,
            timeout=240,
        )
    assert int(out["NEWSIZE"]) > 2 << 20, stdout
    assert out["CAT"] == "0" and out["APPEND"] == "0"
    assert out["READBACK"] == "same"
    assert out["LINES"] == str(n + 2)
    assert db.version == v + 2, [h.operation for h in db.history(4)]
    changed = db.query("SELECT name FROM data WHERE id = 54321", version=v + 1).fetchall()
    assert changed == [("CHANGED",)]
    assert db.query("SELECT count(*) FROM data", version=v + 1).scalar() == n
    # one diff, one commit (a one-row change: an UPDATE, see replace_rows)
    assert db.history(2)[1].operation in ("MERGE", "UPDATE")
    assert db.query("SELECT count(*) FROM data").scalar() == n + 1
    assert db.history(1)[0].operation == "WRITE"  # the append is an INSERT


def test_edits_by_primary_key(tmp_path: Path) -> None:
    db = DatabaseOps.create(
        tmp_path / "keyed",
        {"id": "Int64", "name": "String", "qty": "Int32"},
        primary_key="id",
        engine="local",
    )
    db.insert([{"id": 1, "name": "a", "qty": 10}, {"id": 2, "name": "b", "qty": 20}])
    v = db.version
    fs = TableFs(db)
    with NfsServer(fs) as srv:
        out, stdout = _vm_run(
            srv.port,
            r"""
            set -u
            cd /mnt/data
            step() { echo "STEP $1 rc=$2"; }
            sed -i 's/^2,b,20$/2,B,21/' data.csv; step sed $?
            echo "3,c,30" >> data.csv; step append $?
            /usr/bin/printf '1,dup,1\n' >> data.csv; step duplicate $?
            sync; echo 3 > /proc/sys/vm/drop_caches
            echo "LINES $(wc -l < data.csv)"
            : > data.csv; step truncate $?
            echo "EMPTY $(stat -c %s data.csv)"
            """,
        )
    steps = _steps(stdout)
    assert steps.pop("duplicate") != 0, stdout
    assert set(steps.values()) == {0}, stdout
    # a truncation alone is staged for its writer (who sees it) and never applied by itself
    assert out["LINES"] == "4" and out["EMPTY"] == "0"
    assert db.version == v + 2
    fs.paths.remove_file("/data/data.csv")  # rm data.csv empties the table
    assert db.version == v + 3
    assert rows_at(db, v + 1) == [(1, "a", 10), (2, "B", 21)]
    assert rows_at(db, v + 2) == [(1, "a", 10), (2, "B", 21), (3, "c", 30)]
    assert rows_at(db, v + 3) == []


class _DeletesOnCue(TableFs):
    """A TableFs that runs an API delete while the client creates a file named "delete-now"
    (so the guest script and the host act in a known order, without waiting)."""

    def __init__(self, db: DatabaseOps, predicate: str) -> None:
        super().__init__(db)
        self._predicate = predicate

    def create(self, dir_id: Any, name: str, attrs: Any, ctx: Any, *, guarded: bool) -> Any:
        if name == "delete-now":
            self._db.delete_rows_where(self._predicate)
        return super().create(dir_id, name, attrs, ctx, guarded=guarded)


def test_a_long_lived_appender_does_not_resurrect_deleted_rows(tmp_path: Path) -> None:
    """``exec 3>>data.csv``; echo; another writer deletes rows; echo again: nothing comes back."""
    db = DatabaseOps.create(tmp_path / "log", {"id": "Int64", "name": "String"}, engine="local")
    db.insert([{"id": i, "name": f"n{i}"} for i in range(1, 6)])
    with NfsServer(_DeletesOnCue(db, "id IN (4, 5)")) as srv:
        out, stdout = _vm_run(
            srv.port,
            r"""
            set -u
            cd /mnt/data
            exec 3>>data.csv
            echo "10,first" >&3; sync
            touch /mnt/delete-now   # the host deletes ids 4 and 5 through the API, now
            echo "11,second" >&3
            exec 3>&-
            echo "CLOSED $?"
            sync; echo 3 > /proc/sys/vm/drop_caches
            echo "FINAL $(tr '\n' '|' < data.csv)"
            """,
        )
    assert out["CLOSED"] == "0", stdout
    got = sorted(rows_at(db))
    assert got == [(1, "n1"), (2, "n2"), (3, "n3"), (10, "first"), (11, "second")], stdout
    assert out["FINAL"].split("|")[0] == "id,name"


def test_a_sync_mount_rewrite_of_100k_rows_is_one_version(tmp_path: Path) -> None:
    """``mount -o sync``: every write(2) is a FILE_SYNC WRITE; the rewrite is ONE commit."""
    n = 100_000
    db = _numbered(tmp_path / "big", n)
    v = db.version
    fs = QuietOnCue(db)
    with NfsServer(fs) as srv:
        res = run_in_vm(
            srv.port,
            textwrap.dedent(
                r"""
                set -u
                cd /mnt/data
                sed 's/^54321,name54321,/54321,CHANGED,/' data.csv > /tmp/new.csv
                cat /tmp/new.csv > data.csv; echo "CAT $?"
                cmp -s /tmp/new.csv data.csv && echo "READBACK same" || echo "READBACK differ"
                """
            ),
            timeout=300,
            opts="noacl,sync",
        )
        assert db.version == v  # every write(2) FILE_SYNC; the writer may go on
        fs.quiet()
    assert res.returncode == 0, res.stderr
    assert "CAT 0" in res.stdout and "READBACK same" in res.stdout, res.stdout
    assert db.version == v + 1, [h.operation for h in db.history(5)]
    assert db.query("SELECT name FROM data WHERE id = 54321").fetchall() == [("CHANGED",)]
    assert db.query("SELECT count(*) FROM data").scalar() == n


def test_a_table_of_millions_of_rows_reads_byte_for_byte_and_edits_cost_the_change(
    tmp_path: Path,
) -> None:
    """2M rows in four data files (segments): the kernel reads the segmented file byte for
    byte, and ``echo >>`` and a ``sed -i`` of three lines far apart each make one version
    with the right rows."""
    n, files = 2_000_000, 4
    db = DatabaseOps.create(tmp_path / "big", {"id": "Int64", "name": "String"}, engine="local")
    db.set_primary_key("id")
    per = n // files
    for f in range(files):
        ids = pa.array(range(f * per, (f + 1) * per), pa.int64())
        db.insert(pa.table({"id": ids, "name": pa.array([f"n{i}" for i in ids.to_pylist()])}))
    view = TableFs(db, idle_timer=False)
    served = view.paths.read_file("/data/data.csv")
    view.close()
    # the files in commit order hold ascending ids: the full rendering, sorted by id
    assert served == render_csv(db.to_arrow().sort_by("id"))
    v = db.version
    with _serve(db) as srv:
        out, stdout = _vm_run(
            srv.port,
            r"""
            set -u
            cd /mnt/data
            echo "SHA $(sha256sum < data.csv | cut -d' ' -f1)"
            echo "SIZE $(stat -c %s data.csv)"
            echo "APPEND $(echo '9000000,appended' >> data.csv; echo $?)"
            sed -i -e 's/^1234567,n1234567$/1234567,edited/' -e 's/^17,n17$/17,first/' \
                -e 's/^1999990,n1999990$/1999990,last/' data.csv; echo "SED $?"
            sync; echo 3 > /proc/sys/vm/drop_caches
            echo "LINES $(wc -l < data.csv)"
            echo "TAIL $(tail -n 1 data.csv)"
            """,
            timeout=400,
        )
    assert out["SHA"] == hashlib.sha256(served).hexdigest(), stdout
    assert out["SIZE"] == str(len(served))
    assert out["APPEND"] == "0" and out["SED"] == "0", stdout
    assert db.version == v + 2, [h.operation for h in db.history(5)]
    assert out["LINES"] == str(n + 2)
    assert db.query("SELECT name FROM data WHERE id = 1234567").fetchall() == [("edited",)]
    edited = db.query("SELECT id, name FROM data WHERE id IN (17, 1999990) ORDER BY id")
    assert edited.fetchall() == [(17, "first"), (1999990, "last")]  # three regions, one commit
    assert db.query("SELECT name FROM data WHERE id = 9000000").fetchall() == [("appended",)]
    assert db.query("SELECT count(*) FROM data").scalar() == n + 1
