"""Writers in several processes at once: keys stay unique, and contended writes finish.

Decisions pinned here (issue 14, items 1 and 2):

- A keyed insert is a conflict-checked commit: when another process committed first, only
  the files it added are checked for the insert's keys, and the insert either commits on
  top or raises DuplicateKeyError. Four processes inserting keys 0..19 at the same instant
  store each key once, and exactly 20 inserts succeed.
- Merges and deletes that lose to concurrent commits re-plan and retry with jittered
  back-off until a deadline (``commit_timeout``), and the losses are counted in
  ``get_metrics()`` (``commit_conflicts``, ``commit_retries``, ``commits_given_up``).

Workers are released together by a multiprocessing barrier (no sleeps).
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from posixlake import DatabaseOps, Field, Schema
from posixlake.errors import DuplicateKeyError

SCHEMA = Schema([Field("id", "Int64", False), Field("worker", "Int64"), Field("n", "Int64")])
KEYS = 20


def _same_keys(path: str, worker: int, barrier: Barrier, results: Any) -> None:
    db = DatabaseOps.open(path, engine="local")
    won = 0
    barrier.wait(timeout=60)
    for key in range(KEYS):
        try:
            db.insert({"id": key, "worker": worker, "n": 0})
            won += 1
        except DuplicateKeyError:
            pass
    results.put(won)
    db.close()


def _spawn(target: Any, path: str, count: int, *extra: Any) -> list[Any]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(count)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(path, w, barrier, results, *extra)) for w in range(count)
    ]
    for p in procs:
        p.start()
    out = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * count
    return out


def test_processes_inserting_the_same_keys_store_each_once(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    db = DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id")
    wins = _spawn(_same_keys, path, 4)
    assert sum(wins) == KEYS
    assert db.query("SELECT count(*), count(DISTINCT id) FROM data").fetchone() == (KEYS, KEYS)


def _mixed(path: str, worker: int, barrier: Barrier, results: Any, rounds: int) -> None:
    db = DatabaseOps.open(path, engine="local")
    db.commit_timeout = 60.0
    barrier.wait(timeout=60)
    for i in range(rounds):
        if worker < 2:
            db.insert({"id": 10_000 + worker * 1000 + i, "worker": worker, "n": 2})
        elif worker == 2:
            db.merge([{"_op": "UPDATE", "id": i, "n": 1}])
        else:
            db.delete_rows_where(f"id = {100 + i}")
    m = db.get_metrics()
    results.put((worker, m.commit_conflicts, m.commit_retries, m.commits_given_up, m.errors))
    db.close()


def test_contended_merges_and_deletes_all_commit(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    db = DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id")
    db.insert([{"id": i, "worker": -1, "n": 0} for i in range(200)])
    rounds = 12
    out = _spawn(_mixed, path, 4, rounds)
    assert all(given_up == 0 and errors == 0 for _, _, _, given_up, errors in out)
    assert all(conflicts == retries for _, conflicts, retries, _, _ in out)
    assert db.query("SELECT count(*) FROM data WHERE n = 1").scalar() == rounds
    assert db.query("SELECT count(*) FROM data WHERE id >= 10000").scalar() == 2 * rounds
    assert db.query("SELECT count(*) FROM data").scalar() == 200 + 2 * rounds - rounds
    assert db.version == 1 + 4 * rounds  # one commit per operation
