"""Concurrency: one DatabaseOps shared by threads, and several processes writing one table.

Decisions pinned here:

- A DatabaseOps is safe to share between threads: writes are serialized on the table's
  lock, each write is one commit, and queries see a consistent version.
- Several processes may append to one table: a commit conflict is retried on the next
  version, so nothing is lost (4 processes x 50 single-row inserts -> 200 rows in 200
  new versions).
- The primary-key check is exact within a process and across processes: a keyed insert
  that loses a commit race re-checks the files the winner added (tests in
  test_contention.py).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.engines import Engine
from posixlake.errors import DuplicateKeyError

SCHEMA = Schema([Field("id", "Int64", False), Field("worker", "Int64"), Field("n", "Int64")])


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Run ``target(i)`` in ``count`` threads released together; re-raise the first error."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as err:  # noqa: BLE001 - handed back to the test thread
            errors.append(err)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


class TestThreads:
    def test_inserts_and_queries_from_many_threads(self, tmp_path: Path, engine: Engine) -> None:
        db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine=engine, primary_key="id")
        counts: list[int] = []

        def work(w: int) -> None:
            for i in range(25):
                db.insert({"id": w * 1000 + i, "worker": w, "n": i})
                counts.append(int(db.query("SELECT count(*) FROM data").scalar()))

        run_threads(4, work)
        assert db.version == 100
        assert db.query("SELECT count(*), count(DISTINCT id) FROM data").fetchone() == (100, 100)
        assert max(counts) == 100
        assert db.get_metrics().inserts == 100
        assert len(db.history()) == 101

    def test_buffered_inserts_from_many_threads(self, tmp_path: Path, engine: Engine) -> None:
        db = DatabaseOps.create(
            tmp_path / "t", SCHEMA, engine=engine, primary_key="id", buffer_rows=30
        )

        def work(w: int) -> None:
            for i in range(50):
                db.insert_buffered({"id": w * 1000 + i, "worker": w, "n": i})

        run_threads(4, work)
        db.flush()
        assert db.query("SELECT count(*), count(DISTINCT id) FROM data").fetchone() == (200, 200)
        assert db.buffered_rows == 0

    def test_the_same_key_from_many_threads_is_inserted_once(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine=engine, primary_key="id")
        wins: list[int] = []

        def work(w: int) -> None:
            for key in range(10):
                try:
                    db.insert({"id": key, "worker": w})
                    wins.append(key)
                except DuplicateKeyError:
                    pass

        run_threads(4, work)
        assert sorted(wins) == list(range(10))
        assert db.query("SELECT count(*) FROM data").scalar() == 10

    def test_mixed_writes_from_many_threads(self, tmp_path: Path, engine: Engine) -> None:
        db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine=engine, primary_key="id")
        db.insert([{"id": i, "worker": -1, "n": 0} for i in range(100)])

        def work(w: int) -> None:
            for i in range(5):
                if w == 0:
                    db.merge([{"_op": "UPDATE", "id": i, "n": 1}])
                elif w == 1:
                    db.delete_rows_where(f"id = {50 + i}")
                elif w == 2:
                    db.insert({"id": 1000 + i, "worker": w})
                else:
                    db.update(f"id = {20 + i}", {"n": 2})

        run_threads(4, work)
        assert db.version == 1 + 20
        got = dict(db.query("SELECT n, count(*) FROM data GROUP BY n").fetchall())
        assert got == {1: 5, 2: 5, 0: 100 - 5 - 5 - 5, None: 5}


def _append_worker(path: str, worker: int, count: int) -> None:
    db = DatabaseOps.open(path, engine="local")
    for i in range(count):
        db.insert({"id": worker * 1000 + i, "worker": worker, "n": i})
    db.close()


def _run_processes(path: str, workers: int, count: int) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_worker, args=(path, w, count)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * workers


@pytest.mark.slow
def test_four_processes_append_without_losing_a_row(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    db = DatabaseOps.create(path, SCHEMA, engine="local")
    _run_processes(path, workers=4, count=50)
    assert db.version == 200  # 200 new versions on top of the create
    assert db.query("SELECT count(*), count(DISTINCT id) FROM data").fetchone() == (200, 200)
    per_worker = dict(db.query("SELECT worker, count(*) FROM data GROUP BY worker").fetchall())
    assert per_worker == {0: 50, 1: 50, 2: 50, 3: 50}
    history = db.history()
    assert len(history) == 201
    assert sorted(c.version for c in history) == list(range(201))
    assert {c.operation for c in history[:-1]} == {"WRITE"}


@pytest.mark.slow
def test_processes_with_a_primary_key_and_disjoint_keys(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    db = DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id")
    _run_processes(path, workers=2, count=20)
    assert db.query("SELECT count(DISTINCT id) FROM data").scalar() == 40
    # this handle's key index follows the other writers
    with pytest.raises(DuplicateKeyError):
        db.insert({"id": 1005})
    db.insert({"id": 500})
    assert db.version == 41
