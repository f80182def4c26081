"""Writers the Linux kernel client flushes while they are still writing: one edit, one version.

The guest (nfs-vm) makes its writeback aggressive — ``vm.dirty_background_bytes`` 64 KiB,
``dirty_expire_centisecs`` and ``dirty_writeback_centisecs`` 1 s — so background
writeback sends WRITEs and a COMMIT of what a writer has written so far while the writer
pauses or is still writing. Neither that COMMIT nor the close() of one process's copy of
the descriptor ends the edit; the server applies an edit when its writer has been quiet
for the idle period (docs/nfs-writes.md). Each test checks that the whole edit is exactly
ONE new Delta version (no intermediate version, no prefix applied), that the table then
holds exactly the content written, and that the writer's exit status is 0:

- a paused ``producer | cat > data.csv`` of 200k rows (8 s pause),
- a paused ``producer | cat >> data.csv`` appending 20 MB (720k rows),
- a fast ``cat new.csv > data.csv`` of fixed-width rows (every 4 KiB page ends a line)
  changing 300 of 300k rows (9.6 MB) of a keyed table,
- ``{ head; sleep 5; tail; } > data.csv`` (head's exit closes its copy of the descriptor:
  the client flushes and COMMITs while the shell keeps the file open),
- the paused rewrite and the paused append into one partition's file
  (``partitions/region=eu/data.csv``): one version, and the other partition unchanged.

The guest also counts the COMMITs its client sent (``/proc/self/mountstats``) before the
pause ended and in all: a run in which no COMMIT came before the writer's close() fails,
as it proved nothing.

The server runs in this process with an idle period (30 s) longer than every pause, on a
clock the test moves: once the VM has exited (its writer closed, the guest synced and
unmounted), the test advances the clock past the idle period and calls ``TableFs.poll``,
which applies what is due — no sleep. The content to write is generated here and put in
the share's scratch area; the guest copies it to its RAM disk first (generating 20 MB with
awk or seq under TCG costs far more than reading it).
"""

from __future__ import annotations

import re
import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from nfs.protocol.server import NfsServer
from nfs.table.tablefs import PathOps, TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import render_csv
from tests.nfs.vmclient import require_vm, run_in_vm

pytestmark = [pytest.mark.mount, pytest.mark.slow]

IDLE_SECONDS = 30.0
"""The server's idle period: longer than any pause of a writer in the guest (8 s)."""

AGGRESSIVE_WRITEBACK = r"""
set -u
vm=/proc/sys/vm
echo 65536 > $vm/dirty_background_bytes && echo 100 > $vm/dirty_expire_centisecs &&
    echo 100 > $vm/dirty_writeback_centisecs || { echo "cannot set $vm" >&2; exit 90; }
echo "WRITEBACK $(cat $vm/dirty_background_bytes) $(cat $vm/dirty_expire_centisecs)" \
    "$(cat $vm/dirty_writeback_centisecs)"
now() { date +%s.%N; }
# COMMITs the client sent since the writer started (its per-operation counters)
commits() { awk -v c0="${c0:-0}" '$1 == "COMMIT:" { print $2 - c0; exit }' /proc/self/mountstats; }
exec 3>&1  # the real stdout, for a writer's group whose stdout is data.csv or a pipe
pause() { echo "PAUSE_COMMITS $(commits)" >&3; }
t0=$(now)
cp /mnt/src.csv /tmp/src.csv || { echo "cannot copy the source" >&2; exit 91; }
t1=$(now)
cd /mnt/data
c0=$(commits)
"""

REPORT = r"""
t2=$(now)
echo "STATUS $status"
echo "COMMITS $(commits)"
echo "$t0 $t1 $t2" | awk '{ printf "SECONDS copy=%.1f write=%.1f\n", $2 - $1, $3 - $2 }'
"""

Row = tuple[Any, ...]


@pytest.fixture(scope="module", autouse=True)
def _vm() -> None:
    require_vm()


class ShiftedClock:
    """The monotonic clock plus an offset the test moves (to pass the idle period at once)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@dataclass
class WriterRun:
    """What a writer in the guest did and what the table went through."""

    before: int
    """The table's version before the VM started."""
    versions: list[tuple[int, str, int]]
    """Each version made since: (version, operation, rows)."""
    status: str
    """The exit statuses of the writer's pipeline (bash's PIPESTATUS)."""
    commits: int
    """The COMMITs the client sent from the writer's start to its end (close() included)."""
    pause_commits: int | None
    """Those sent before the writer's pause ended (None: it has no pause)."""
    stdout: str
    stderr: str

    def describe(self) -> str:
        made = ", ".join(f"v{v} {op} {rows} rows" for v, op, rows in self.versions) or "none"
        kernel = [ln for ln in self.stderr.splitlines() if "nfs-vm-run:" in ln]
        guest = [ln for ln in self.stderr.splitlines() if "nfs-vm-run:" not in ln]
        return (
            f"versions made after v{self.before}: {made}; writer status {self.status!r}\n"
            f"guest stdout: {self.stdout.strip()}\nguest stderr: {guest[-5:]}\n"
            f"harness: {kernel[-8:]}"
        )


def _write_in_vm(db: DatabaseOps, source: bytes, writer: str, *, timeout: int = 300) -> WriterRun:
    """Serve ``db``, put ``source`` at /src.csv, run ``writer`` in the guest (in /mnt/data,
    aggressive writeback; the source is at /tmp/src.csv; it sets ``status``), then let the
    idle period pass and apply what is due.
    """
    clock = ShiftedClock()
    fs = TableFs(db, clock=clock, idle_seconds=IDLE_SECONDS)
    PathOps(fs).write_file("/src.csv", source)
    before = db.version
    with NfsServer(fs) as srv:
        script = textwrap.dedent(AGGRESSIVE_WRITEBACK) + textwrap.dedent(writer)
        res = run_in_vm(srv.port, script + textwrap.dedent(REPORT), timeout=timeout, opts="noacl")
        # the writer closed, the guest synced and unmounted: it is quiet from now on
        clock.advance(IDLE_SECONDS + 1)
        fs.poll()
    history = db.history(db.version - before) if db.version > before else []
    versions = [(h.version, h.operation, db.to_arrow(version=h.version).num_rows) for h in history]
    status = m[1] if (m := re.search(r"^STATUS (.*)$", res.stdout, re.M)) else "?"
    counts = {k: int(v) for k, v in re.findall(r"^(\w*COMMITS) (-?\d+)$", res.stdout, re.M)}
    commits, pause_commits = counts.get("COMMITS", -1), counts.get("PAUSE_COMMITS")
    run = WriterRun(
        before, sorted(versions), status, commits, pause_commits, res.stdout, res.stderr
    )
    assert res.returncode == 0, f"the VM run failed ({res.returncode}): {run.describe()}"
    assert "WRITEBACK 65536 100 100" in res.stdout, run.describe()
    return run


def _rows(table: pa.Table, names: list[str]) -> Counter[Row]:
    return Counter(zip(*(table.column(n).to_pylist() for n in names), strict=True))


def _check_one_version_with(db: DatabaseOps, run: WriterRun, want: pa.Table) -> None:
    """The writer exited 0, the edit is one version, and the table holds ``want`` exactly;
    and the client did COMMIT in the middle of the edit (else the test proved nothing).
    """
    got = _rows(db.to_arrow(), want.column_names)
    expected = _rows(want, want.column_names)
    lost, extra = expected - got, got - expected
    content = (
        f"table: {got.total()} rows, {lost.total()} of the {expected.total()} written missing "
        f"(e.g. {sorted(lost)[:3]}), {extra.total()} not written (e.g. {sorted(extra)[:3]})"
    )
    summary = f"{run.describe()}\n{content}"
    assert set(run.status.split()) == {"0"}, summary
    assert len(run.versions) == 1, summary
    assert not lost and not extra, summary
    if run.pause_commits is not None:
        assert run.pause_commits >= 1, f"no COMMIT was sent before the pause ended: {summary}"
    assert run.commits >= 2, f"no COMMIT was sent before close(): {summary}"


def _table(
    path: Path, columns: dict[str, pa.Array], *, primary_key: str | None = None
) -> DatabaseOps:
    kinds = {pa.int64(): "Int64", pa.string(): "String"}
    db = DatabaseOps.create(
        path,
        {name: kinds[col.type] for name, col in columns.items()},
        primary_key=primary_key,
        engine="local",
    )
    db.insert(pa.table(columns))
    return db


def _numbered(n: int, *, start: int = 0, edited: int = 0) -> dict[str, pa.Array]:
    """Rows (id, name, qty) = (i, "name<i>", 3 i); every 1000th from ``edited`` renamed."""
    ids = range(start, start + n)
    return {
        "id": pa.array(ids, pa.int64()),
        "name": pa.array(
            [f"edited{i}" if edited and i % 1000 == edited else f"name{i}" for i in ids]
        ),
        "qty": pa.array([3 * i for i in ids], pa.int64()),
    }


def test_a_paused_producer_piped_into_cat_rewrites_200k_rows_as_one_version(
    tmp_path: Path,
) -> None:
    """``producer | cat > data.csv``: 100k rows, an 8 s pause (writeback COMMITs), 100k more."""
    n = 200_000
    db = _table(tmp_path / "t", _numbered(n))
    new = pa.table(_numbered(n, edited=7))  # 200 rows renamed, spread over both halves
    run = _write_in_vm(
        db,
        render_csv(new),
        """
        { head -n 100001 /tmp/src.csv; sleep 8; pause; tail -n +100002 /tmp/src.csv; } | cat > data.csv
        status="${PIPESTATUS[*]}"
        """,
    )
    _check_one_version_with(db, run, new)


def test_a_paused_append_of_20_mb_is_one_insert(tmp_path: Path) -> None:
    """``producer | cat >> data.csv`` of 720k rows (20 MB) pausing 8 s half way: ONE INSERT."""
    old = _numbered(1000)
    db = _table(tmp_path / "t", old)
    more = pa.table(_numbered(720_000, start=1_000_000))
    source = render_csv(more, header=False)
    assert len(source) > 20_000_000
    run = _write_in_vm(
        db,
        source,
        """
        { head -n 360000 /tmp/src.csv; sleep 8; pause; tail -n +360001 /tmp/src.csv; } | cat >> data.csv
        status="${PIPESTATUS[*]}"
        """,
    )
    _check_one_version_with(db, run, pa.concat_tables([pa.table(old), more]))


def _fixed_width(n: int, *, edited: int | None = None) -> dict[str, pa.Array]:
    """Rows of exactly 32 bytes: 7-digit id, 15-character label, 7-digit qty."""
    ids = range(n)
    return {
        "row_id": pa.array([1_000_000 + i for i in ids], pa.int64()),
        "label_of_a_row_": pa.array([f"label-{i:09d}" for i in ids]),
        "quantity": pa.array(
            [(3_000_000 if i % 1000 == edited else 2_000_000) + i for i in ids], pa.int64()
        ),
    }


def test_a_fast_cat_of_fixed_width_rows_changing_300_of_300k_is_one_version(
    tmp_path: Path,
) -> None:
    """Every 4 KiB page of the content ends a line, so every writeback COMMIT leaves whole
    lines: ``cat new.csv > data.csv`` is still one edit, one version, with 300 rows changed."""
    n = 300_000
    db = _table(tmp_path / "t", _fixed_width(n), primary_key="row_id")
    new = pa.table(_fixed_width(n, edited=500))
    source = render_csv(new)
    assert {len(line) for line in source.splitlines(keepends=True)} == {32}
    assert 4096 % 32 == 0 and len(source) == 32 * (n + 1)
    run = _write_in_vm(
        db,
        source,
        """
        cat /tmp/src.csv > data.csv
        status="${PIPESTATUS[*]}"
        """,
    )
    _check_one_version_with(db, run, new)


def test_a_redirected_group_whose_head_exits_before_a_pause_is_one_version(
    tmp_path: Path,
) -> None:
    """``{ head; sleep 5; tail; } > data.csv`` on a keyed table: head's exit closes its copy
    of the descriptor (the client flushes and COMMITs) while the shell keeps the file open."""
    n = 200_000
    db = _table(tmp_path / "t", _numbered(n), primary_key="id")
    new = pa.table(_numbered(n, edited=3))
    run = _write_in_vm(
        db,
        render_csv(new),
        """
        { head -n 100001 /tmp/src.csv; sleep 5; pause; tail -n +100002 /tmp/src.csv; } > data.csv
        status="${PIPESTATUS[*]}"
        """,
    )
    _check_one_version_with(db, run, new)


def _regions(n: int, *, start: int = 0, edited: int = 0) -> dict[str, pa.Array]:
    """Rows (id, region, name): ids from ``start``, regions eu and us in turn; every
    1000th name from ``edited`` renamed."""
    ids = range(start, start + n)
    return {
        "id": pa.array(ids, pa.int64()),
        "region": pa.array([("eu", "us")[i % 2] for i in ids]),
        "name": pa.array(
            [f"edited{i}" if edited and i % 1000 == edited else f"name{i}" for i in ids]
        ),
    }


def _by_region(path: Path, columns: dict[str, pa.Array]) -> DatabaseOps:
    db = DatabaseOps.create(
        path,
        {"id": "Int64", "region": "String", "name": "String"},
        partition_by=["region"],
        engine="local",
    )
    db.insert(pa.table(columns))
    return db


def _region(table: pa.Table, region: str) -> pa.Table:
    return table.filter(pc.equal(table.column("region"), region))


def _joined(*tables: pa.Table) -> pa.Table:
    """The rows of ``tables`` in one table (as Python values: their schemas may differ
    in nullability or string type)."""
    names = tables[0].column_names
    return pa.table({n: [v for t in tables for v in t.column(n).to_pylist()] for n in names})


def test_a_paused_producer_piped_into_cat_rewrites_one_partition_as_one_version(
    tmp_path: Path,
) -> None:
    """``producer | cat > partitions/region=eu/data.csv``: the partition's 100k rows, an
    8 s pause half way (writeback COMMITs), one version; the other partition unchanged."""
    n = 200_000
    db = _by_region(tmp_path / "t", _regions(n))
    old = db.to_arrow()
    new_eu = _region(pa.table(_regions(n, edited=8)), "eu")  # 200 of its rows renamed
    assert new_eu.num_rows == n // 2
    run = _write_in_vm(
        db,
        render_csv(new_eu),
        """
        part=../partitions/region=eu/data.csv
        { head -n 50001 /tmp/src.csv; sleep 8; pause; tail -n +50002 /tmp/src.csv; } | cat > $part
        status="${PIPESTATUS[*]}"
        """,
    )
    _check_one_version_with(db, run, _joined(_region(old, "us"), new_eu))


def test_a_paused_append_to_one_partition_is_one_insert(tmp_path: Path) -> None:
    """``producer | cat >> partitions/region=eu/data.csv`` of 300k rows of that partition,
    pausing 8 s half way: ONE INSERT, every row once."""
    db = _by_region(tmp_path / "t", _regions(1000))
    old = db.to_arrow()
    more = _region(pa.table(_regions(600_000, start=1_000_000)), "eu")
    run = _write_in_vm(
        db,
        render_csv(more, header=False),
        """
        part=../partitions/region=eu/data.csv
        { head -n 150000 /tmp/src.csv; sleep 8; pause; tail -n +150001 /tmp/src.csv; } | cat >> $part
        status="${PIPESTATUS[*]}"
        """,
    )
    _check_one_version_with(db, run, _joined(old, more))
