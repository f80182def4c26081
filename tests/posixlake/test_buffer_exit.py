"""Buffered rows at process exit (issue 14, item 3).

Decisions pinned here:

- Rows still buffered when a process ends are committed: a normal end, ``sys.exit``, an
  uncaught exception, SIGTERM (posixlake turns the default action into SystemExit) and
  ``del db`` (finalization, even when exit handlers are skipped).
- Rows that cannot be committed at exit are reported on stderr (ERROR log record and
  ResourceWarning), never dropped silently.
- ``insert_buffered(..., durable=True)`` survives kill -9: the next open commits the rows
  from the write-ahead file, exactly once (also when the crash came after the commit).

Each scenario is a real child process; they run concurrently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from posixlake import DatabaseOps, Field, Schema
from posixlake._wal import WAL_DIR

SCHEMA = Schema([Field("id", "Int64", False), Field("name", "String")])
ROWS = 10

PRELUDE = f"""
import os, signal, shutil, sys
from posixlake import DatabaseOps
db = DatabaseOps.open(sys.argv[1], engine="local")
durable = sys.argv[2] == "durable"
for i in range({ROWS}):
    db.insert_buffered({{"id": i, "name": f"r{{i}}"}}, durable=durable)
assert db.buffered_rows == {ROWS}
"""

ENDINGS = {
    "end": "",
    "sys_exit": "sys.exit(3)",
    "raise": "raise RuntimeError('boom')",
    "sigterm": "os.kill(os.getpid(), signal.SIGTERM)\nraise AssertionError('not reached')",
    "del": "del db\nos._exit(0)",
    "durable_kill": "os.kill(os.getpid(), signal.SIGKILL)",
    "lost": "shutil.rmtree(sys.argv[1])",
}
EXIT_CODES = {
    "end": 0,
    "sys_exit": 3,
    "raise": 1,
    "sigterm": 143,
    "del": 0,
    "durable_kill": -9,
    "lost": 0,
}


def test_buffered_rows_survive_every_way_out(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("POSIXLAKE_NO_SIGTERM_HANDLER", None)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for name, ending in ENDINGS.items():
        path = str(tmp_path / name)
        DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id").close()
        mode = "durable" if name == "durable_kill" else "memory"
        procs[name] = subprocess.Popen(
            [sys.executable, "-c", PRELUDE + ending, path, mode],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    errors = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        errors[name] = err.decode()
        assert proc.returncode == EXIT_CODES[name], (name, errors[name])
    for name in ENDINGS:
        if name == "lost":
            continue
        db = DatabaseOps.open(tmp_path / name, engine="local")  # replays the durable file
        got = db.query("SELECT count(*), count(DISTINCT id) FROM data").fetchone()
        assert got == (ROWS, ROWS), (name, errors[name])
        assert all(f.stat().st_size == 0 for f in (tmp_path / name / WAL_DIR).glob("*.wal"))
    assert "10 buffered row(s)" in errors["lost"] and "NOT committed" in errors["lost"]
    assert "they are lost" in errors["lost"]


def test_a_durable_flush_is_not_replayed_twice(tmp_path: Path) -> None:
    path = tmp_path / "t"
    db = DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id")
    for i in range(ROWS):
        db.insert_buffered({"id": i, "name": "x"}, durable=True)
    (wal,) = (path / WAL_DIR).glob("*.wal")
    saved = tmp_path / "saved.wal"
    shutil.copyfile(wal, saved)
    assert db.flush() == ROWS
    assert wal.stat().st_size == 0  # emptied, the slot is free again
    # a crash between the commit and the emptying of the file leaves its rows behind
    shutil.copyfile(saved, wal)
    again = DatabaseOps.open(path, engine="local")
    assert again.query("SELECT count(*) FROM data").scalar() == ROWS
    assert wal.stat().st_size == 0
    assert again.version == 1


def test_durable_buffering_without_a_primary_key_replays_once(tmp_path: Path) -> None:
    path = tmp_path / "t"
    db = DatabaseOps.create(path, {"n": "Int64"}, engine="local")
    db.insert_buffered({"n": 1})  # memory only so far
    db.insert_buffered([{"n": 2}, {"n": 3}], durable=True)  # now the whole buffer
    (wal,) = (path / WAL_DIR).glob("*.wal")
    assert oct(wal.stat().st_mode & 0o777) == oct(0o600)
    # another handle cannot take the file while this one holds it
    other = DatabaseOps.open(path, engine="local")
    assert other.query("SELECT count(*) FROM data").scalar() == 0
    assert wal.exists()
    db.close()
    assert sorted(r[0] for r in other.query("SELECT n FROM data").fetchall()) == [1, 2, 3]


def test_durable_writers_take_a_bounded_set_of_slots(tmp_path: Path) -> None:
    """Delta never expires app transaction ids: writers reuse per-slot ids, versions grow."""
    path = tmp_path / "t"
    a = DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id")
    b = DatabaseOps.open(path, engine="local")
    a.insert_buffered({"id": 1}, durable=True)
    b.insert_buffered({"id": 2}, durable=True)  # a holds slot 0: b takes slot 1
    assert sorted(f.name for f in (path / WAL_DIR).glob("*.wal")) == ["slot-0.wal", "slot-1.wal"]
    a.flush()
    b.flush()
    for i in range(3, 6):  # slot 0 again, at the next version of its app id
        a.insert_buffered({"id": i}, durable=True)
        a.flush()
    assert sorted(f.name for f in (path / WAL_DIR).glob("*.wal")) == ["slot-0.wal", "slot-1.wal"]
    assert a.query("SELECT count(*) FROM data").scalar() == 5
