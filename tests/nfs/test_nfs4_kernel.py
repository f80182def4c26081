"""NFSv4.0 through the Linux kernel client (nfs-vm, ``vers=4.0``): the pseudo-root shows
the table as v3 does, and an edit is an open — ``echo >>``, ``sed -i``, ``cp``, a paused
``producer | cat > data.csv``, a fast ``cat`` of 9.6 MB under writeback COMMITs are one
version each; a refused edit fails close() and leaves the table as it was; two mounts of the
share (two open-owners), by two users or by one, editing at once each keep their edit.

The server's v3 idle period is short (2 s) and every pause in the guest is longer, so an
edit that applied at idle (the v3 rule) would show up as a prefix version.
"""

from __future__ import annotations

import logging
import re
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

from nfs.protocol.nfs4.state import Nfs4State
from nfs.protocol.server import NfsServer
from nfs.table.tablefs import PathOps, TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import render_csv
from tests.nfs.nfs4client import Nfs4Client
from tests.nfs.rpcclient import RpcClient
from tests.nfs.vmclient import require_vm, run_in_vm

pytestmark = [pytest.mark.mount, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _vm() -> None:
    require_vm()


def _table(path: Path, n: int = 3) -> DatabaseOps:
    db = DatabaseOps.create(
        path, {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
    )
    db.insert(
        pa.table(
            {
                "id": pa.array(range(1, n + 1), pa.int64()),
                "name": [f"n{i}" for i in range(1, n + 1)],
            }
        )
    )
    return db


def _run(
    db: DatabaseOps,
    script: str,
    *,
    files: dict[str, bytes] | None = None,
    idle_seconds: float = 2.0,
) -> tuple[str, str, int]:
    """Serve ``db`` (the v3 idle period ``idle_seconds``), put ``files`` in the scratch
    area, run ``script`` in the guest over a vers=4.0 mount (cwd /mnt/data); its stdout,
    stderr and status."""
    fs = TableFs(db, idle_seconds=idle_seconds)
    for name, data in (files or {}).items():
        PathOps(fs).write_file(f"/{name}", data)
    with NfsServer(fs) as srv:
        res = run_in_vm(
            srv.port, "cd /mnt/data\n" + textwrap.dedent(script), vers="4.0", timeout=180
        )
    return res.stdout, res.stderr, res.returncode


def _ops_since(db: DatabaseOps, before: int) -> list[str]:
    if db.version == before:
        return []
    return [h.operation for h in sorted(db.history(db.version - before), key=lambda h: h.version)]


def test_a_v4_mount_lists_and_reads_what_v3_renders(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    fs = TableFs(db)
    rendered = PathOps(fs).read_file("/data/data.csv")
    root, data = (sorted(PathOps(fs).readdir(d)) for d in ("/", "/data"))
    with NfsServer(fs) as srv:
        res = run_in_vm(
            srv.port,
            "grep ' /mnt ' /proc/mounts; ls -1 /mnt; echo --; ls -1 /mnt/data; echo --\n"
            "cat /mnt/data/data.csv",
            vers="4.0",
        )
    assert res.returncode == 0, res.stderr
    mount, rest = res.stdout.split("\n", 1)
    listed_root, listed_data, content = rest.split("--\n")
    assert "nfs4" in mount and "vers=4.0" in mount
    assert {"data", "schema.sql", "versions"} <= set(root)
    assert sorted(listed_root.split()) == root
    assert sorted(listed_data.split()) == data
    assert content == rendered.decode()


def test_echo_append_sed_and_cp_are_one_version_each(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    before = db.version
    out, err, rc = _run(
        db,
        """
        set -e
        echo "4,n4" >> data.csv
        sleep 3
        sed -i 's/^2,n2$/2,two/' data.csv
        sleep 3
        printf 'id,name\\n1,n1\\n2,two\\n9,n9\\n' > /tmp/new.csv
        cp /tmp/new.csv data.csv
        sleep 3
        cat data.csv
        """,
    )
    assert rc == 0, err
    assert out == "id,name\n1,n1\n2,two\n9,n9\n"
    assert len(_ops_since(db, before)) == 3, _ops_since(db, before)
    got = sorted((r["id"], r["name"]) for r in db.to_arrow().to_pylist())
    assert got == [(1, "n1"), (2, "two"), (9, "n9")]


def test_a_paused_producer_piped_into_cat_is_one_version(tmp_path: Path) -> None:
    n = 20_000
    db = _table(tmp_path / "t", n)
    before = db.version
    new = "id,name\n" + "".join(f"{i},{'x' if i % 100 == 0 else 'n'}{i}\n" for i in range(1, n + 1))
    out, err, rc = _run(
        db,
        """
        vm=/proc/sys/vm  # aggressive writeback: WRITEs and a COMMIT during the pause
        echo 65536 > $vm/dirty_background_bytes && echo 100 > $vm/dirty_expire_centisecs &&
            echo 100 > $vm/dirty_writeback_centisecs || exit 90
        cp /mnt/src.csv /tmp/src.csv
        { head -n 10001 /tmp/src.csv; sleep 6; tail -n +10002 /tmp/src.csv; } | cat > data.csv
        echo "STATUS ${PIPESTATUS[*]}"
        """,
        files={"src.csv": new.encode()},
    )
    assert rc == 0, err
    assert "STATUS 0 0" in out, out
    assert len(_ops_since(db, before)) == 1, _ops_since(db, before)
    got = db.to_arrow().sort_by("id")
    assert got.column("name").to_pylist() == [
        f"{'x' if i % 100 == 0 else 'n'}{i}" for i in range(1, n + 1)
    ]


def test_a_refused_edit_fails_close_and_leaves_the_table(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    before = db.version
    out, err, rc = _run(
        db,
        """
        printf 'id,name\\n1,n1\\n2,too,many\\n' > /tmp/bad.csv
        cp /tmp/bad.csv data.csv; echo "CP $?"
        cat data.csv
        """,
    )
    assert rc == 0, err
    assert "CP 0" not in out and "CP " in out, out
    assert db.version == before
    assert sorted(r["id"] for r in db.to_arrow().to_pylist()) == [1, 2, 3]


def test_a_redirected_group_whose_head_exits_before_a_pause_is_one_version(
    tmp_path: Path,
) -> None:
    n = 10_000
    db = _table(tmp_path / "t", n)
    before = db.version
    new = "id,name\n" + "".join(f"{i},g{i}\n" for i in range(1, n + 1))
    out, err, rc = _run(
        db,
        """
        vm=/proc/sys/vm
        echo 65536 > $vm/dirty_background_bytes && echo 100 > $vm/dirty_expire_centisecs &&
            echo 100 > $vm/dirty_writeback_centisecs || exit 90
        cp /mnt/src.csv /tmp/src.csv
        { head -n 5001 /tmp/src.csv; sleep 6; tail -n +5002 /tmp/src.csv; } > data.csv
        echo "STATUS $?"
        """,
        files={"src.csv": new.encode()},
    )
    assert rc == 0, err
    assert "STATUS 0" in out, out
    assert len(_ops_since(db, before)) == 1, _ops_since(db, before)
    got = db.to_arrow().sort_by("id")
    assert got.column("name").to_pylist() == [f"g{i}" for i in range(1, n + 1)]


class ShiftedClock:
    """The monotonic clock plus an offset the test moves (a lease passes at once)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def test_a_client_killed_mid_edit_has_its_edit_dropped_when_its_lease_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = _table(tmp_path / "t")
    before = db.version
    clock = ShiftedClock()
    state_dir = tmp_path / "state"
    fs = TableFs(db, clock=clock, idle_seconds=2.0, state_dir=state_dir)
    lease = Nfs4State(clock=clock, lease_seconds=90, grace_seconds=0)
    with NfsServer(fs, nfs4_state=lease) as srv:
        # the guest writes rows, flushes them (fsync: WRITE + COMMIT), then powers off
        # with data.csv still open: no CLOSE ever comes
        res = run_in_vm(
            srv.port,
            """
            cd /mnt/data
            exec 5> data.csv
            printf 'id,name\\n7,killed\\n' >&5
            sync data.csv
            echo FLUSHED
            echo o > /proc/sysrq-trigger
            sleep 30
            """,
            vers="4.0",
            timeout=90,
        )
        assert "FLUSHED" in res.stdout, res.stderr
        assert list(state_dir.rglob("*.wal"))  # the staged edit is journaled
        assert db.version == before
        clock.offset += 91  # the dead client's lease runs out
        with caplog.at_level(logging.WARNING):
            other = Nfs4Client(RpcClient("127.0.0.1", srv.port), b"another client")
            other.setclientid()  # any call checks the leases
            other.rpc.close()
        assert not list(state_dir.rglob("*.wal"))
        assert "dropped unapplied" in caplog.text
        clock.offset += 7200
        fs.poll()
    assert db.version == before
    assert sorted(r["id"] for r in db.to_arrow().to_pylist()) == [1, 2, 3]


def test_an_edit_spanning_a_server_restart_is_reclaimed_and_applied_at_its_close(
    tmp_path: Path,
) -> None:
    n = 4000
    db = _table(tmp_path / "t", n)
    before = db.version
    state_dir = tmp_path / "state"
    new = "id,name\n" + "".join(f"{i},r{i}\n" for i in range(1, n + 1))
    half = new.encode()[: len(new) // 2]
    fs = TableFs(db, idle_seconds=2.0, state_dir=state_dir)
    PathOps(fs).write_file("/src.csv", new.encode())
    first = NfsServer(fs)
    port = first.port
    script = """
        cd /mnt/data
        cp /mnt/src.csv /tmp/src.csv
        size=$(stat -c %s /tmp/src.csv); half=$((size / 2))
        exec 5> data.csv
        head -c $half /tmp/src.csv >&5
        sync data.csv  # WRITE + COMMIT: the server journals the first half
        sleep 20  # meanwhile the server restarts
        tail -c +$((half + 1)) /tmp/src.csv >&5
        exec 5>&-
        echo "CLOSED $?"
        """
    with ThreadPoolExecutor(1) as pool:
        guest = pool.submit(run_in_vm, port, textwrap.dedent(script), vers="4.0", timeout=150)
        # the first half has arrived (the guest's copy of src.csv is read, not sent)
        assert first.wait_stats(lambda s: s.received_bytes > len(half), 120) is not None
        first.shutdown()  # the edit is unfinished: its journal stays
        assert db.version == before
        fs = TableFs(db, idle_seconds=2.0, state_dir=state_dir)  # recovers the journal
        with NfsServer(fs, port) as second:
            res = guest.result()
            assert second.port == port
    assert res.returncode == 0, res.stderr
    assert "CLOSED 0" in res.stdout, res.stdout
    assert len(_ops_since(db, before)) == 1, _ops_since(db, before)
    got = db.to_arrow().sort_by("id")
    assert got.column("name").to_pylist() == [f"r{i}" for i in range(1, n + 1)]


def test_locks_between_processes_of_one_client(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    out, err, rc = _run(
        db,
        """
        touch lockfile
        flock lockfile -c 'echo HELD; sleep 6' &
        sleep 3
        flock -n lockfile true; echo "SECOND $?"
        wait
        flock -n lockfile true; echo "AFTER $?"
        """,
    )
    assert rc == 0, err
    assert "HELD" in out and "SECOND 1" in out and "AFTER 0" in out, (out, err)


def _fixed_width(n: int, *, edited: int = -1) -> pa.Table:
    """``n`` rows whose CSV lines are exactly 32 bytes (every 4 KiB page ends a line):
    7-digit id, 15-character label, 7-digit quantity; every 1000th from ``edited``
    has another quantity."""
    ids = range(n)
    return pa.table(
        {
            "row_id": pa.array([1_000_000 + i for i in ids], pa.int64()),
            "label_of_a_row_": pa.array([f"label-{i:09d}" for i in ids]),
            "quantity": pa.array(
                [(3_000_000 if i % 1000 == edited else 2_000_000) + i for i in ids], pa.int64()
            ),
        }
    )


def test_a_fast_cat_of_300k_fixed_width_rows_is_one_version_at_close(tmp_path: Path) -> None:
    """``cat new.csv > data.csv`` of 9.6 MB with aggressive writeback: the client sends
    UNSTABLE WRITEs and COMMITs while cat writes (counted: else the run proved nothing);
    the CLOSE alone applies it: one version, exactly the content written (300 of 300k
    rows changed), cat's status 0.

    Every page ends a line, so each COMMIT leaves whole rows; the server's v3 idle period
    is a tenth of a second, so an edit the v3 rule applied would show up as prefix
    versions (any gap between writeback batches is longer)."""
    n = 300_000
    db = DatabaseOps.create(
        tmp_path / "t",
        {"row_id": "Int64", "label_of_a_row_": "String", "quantity": "Int64"},
        primary_key="row_id",
        engine="local",
    )
    db.insert(_fixed_width(n))
    before = db.version
    new = _fixed_width(n, edited=500)
    source = render_csv(new)
    assert {len(line) for line in source.splitlines(keepends=True)} == {32}
    out, err, rc = _run(
        db,
        """
        vm=/proc/sys/vm
        echo 65536 > $vm/dirty_background_bytes && echo 100 > $vm/dirty_expire_centisecs &&
            echo 100 > $vm/dirty_writeback_centisecs || exit 90
        commits() { awk '$1 == "COMMIT:" { print $2; exit }' /proc/self/mountstats; }
        cp /mnt/src.csv /tmp/src.csv || exit 91
        c0=$(commits)
        cat /tmp/src.csv > data.csv
        echo "STATUS $?"
        echo "COMMITS $(($(commits) - c0))"
        """,
        files={"src.csv": source},
        idle_seconds=0.1,
    )
    assert rc == 0, err
    assert "STATUS 0" in out, (out, err)
    commits = re.search(r"^COMMITS (\d+)$", out, re.M)
    assert commits is not None and int(commits[1]) >= 1, out  # writeback COMMITted mid-edit
    assert len(_ops_since(db, before)) == 1, _ops_since(db, before)
    got = db.to_arrow().sort_by("row_id")
    assert got.select(new.column_names).to_pylist() == new.to_pylist()


@pytest.mark.parametrize("b_uid", [1001, 1000])
def test_two_writers_on_two_mounts_each_keep_their_edit(tmp_path: Path, b_uid: int) -> None:
    """Two open-owners of one client: the guest mounts the share a second time
    (``nosharecache``: its own page cache and its own open-owners) and writes on both,
    as two users (1000 and 1001) or as one (1000 on both: one client id, one uid, two
    open-owners, which the server tells apart as two writers).

    Writer A (uid 1000, /mnt) rewrites data.csv with row 2 changed: it writes the first
    half, flushes it (WRITE + COMMIT), and holds the file open. Meanwhile writer B
    (uid ``b_uid``, /mnt2) runs ``sed -i`` on row 1500 (in A's second half): it reads the table,
    not A's staging, and its RENAME applies at once. A then pauses longer than the idle
    period (2 s) and writes the rest. A's CLOSE applies A's edit against what A started
    from, so both edits survive: one version per edit, no error. (Were the idle rule
    applied, A's first half would be a version of its own — half the rows; were CLOSE to
    apply nothing, row 2 would be unchanged.)
    """
    n = 2000
    db = _table(tmp_path / "t", n)
    before = db.version
    a = "id,name\n" + "".join(f"{i},{'a2' if i == 2 else f'n{i}'}\n" for i in range(1, n + 1))
    fs = TableFs(db, idle_seconds=2.0)
    PathOps(fs).write_file("/a.csv", a.encode())
    script = """
        as() { uid=$1; shift; setpriv --reuid=$uid --regid=$uid --clear-groups "$@"; }
        mkdir -p /mnt2 && mount -i -t nfs \\
            -o "vers=4.0,proto=tcp,addr=10.0.2.2,clientaddr=10.0.2.15,port=$PORT,nosharecache" \\
            10.0.2.2:/ /mnt2 || exit 92
        chmod 1777 /tmp && cp /mnt/a.csv /tmp/a.csv && chmod 644 /tmp/a.csv || exit 91
        cd /mnt/data
        as 1000 bash -c '
            { head -n 1001 /tmp/a.csv; sync data.csv; : > /tmp/a-half
              until [ -e /tmp/b-done ]; do sleep 0.1; done
              sleep 3  # longer than the idle period
              tail -n +1002 /tmp/a.csv; } > data.csv
            echo "A $?"' > /tmp/a.out 2>&1 &
        until [ -e /tmp/a-half ]; do sleep 0.1; done
        (cd /mnt2/data && as $B_UID sed -i 's/^1500,n1500$/1500,b1500/' data.csv; echo "B $?")
        : > /tmp/b-done
        wait
        cat /tmp/a.out
        umount /mnt2
        """
    with NfsServer(fs) as srv:
        res = run_in_vm(
            srv.port,
            textwrap.dedent(script),
            vers="4.0",
            env={"PORT": str(srv.port), "B_UID": str(b_uid)},
            timeout=180,
        )
    assert res.returncode == 0, res.stderr
    assert "A 0" in res.stdout and "B 0" in res.stdout, (res.stdout, res.stderr)
    assert len(_ops_since(db, before)) == 2, _ops_since(db, before)

    def names(version: int) -> list[str]:
        table = db.to_arrow(version=version).sort_by("id")
        assert table.column("id").to_pylist() == list(range(1, n + 1)), version
        return [str(name) for name in table.column("name").to_pylist()]

    b_only = ["b1500" if i == 1500 else f"n{i}" for i in range(1, n + 1)]
    both = ["a2" if i == 2 else name for i, name in enumerate(b_only, 1)]
    assert names(before + 1) == b_only  # B's rename, while A held the file open
    assert names(before + 2) == both  # A's CLOSE: A's row, B's row kept
    assert names(db.version) == both
