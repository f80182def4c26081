"""Writes return what they did: the row count (an int, as the original returned) and the
version their own commit made (None when they made none)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from posixlake import DatabaseOps, Field, ReplaceResult, Schema, WriteResult
from posixlake.engines import Engine

SCHEMA = Schema([Field("id", "Int64", False), Field("name", "String")], primary_key="id")


def make(tmp_path: Path, engine: Engine | str) -> DatabaseOps:
    return DatabaseOps.create(str(tmp_path / "t"), SCHEMA, engine=engine)


def test_the_result_is_the_count() -> None:
    r = WriteResult(3, 7)
    assert r == 3 and r.rows == 3 and r.version == 7 and r.committed
    assert r + 1 == 4 and f"{r}" == "3" and json.dumps(r) == "3"
    assert pickle.loads(pickle.dumps(r)).version == 7
    assert repr(r) == "WriteResult(rows=3, version=7)"
    assert not WriteResult(0, None).committed
    rr = ReplaceResult(1, 2, 5)
    assert rr == (1, 2) and (rr.deleted, rr.inserted, rr.version) == (1, 2, 5)


def test_each_write_returns_its_version(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    ins = db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}])
    assert ins == 3 and ins.version == db.version == 1
    up = db.update("id = 2", {"name": "B"})
    assert up == 1 and up.version == db.version == 2
    assert db.update("id = 99", {"name": "x"}).version is None
    de = db.delete_rows_where("id = 3")
    assert de == 1 and de.version == db.version == 3
    assert db.delete_rows_where("id = 99").version is None
    assert db.insert([]).version is None
    rr = db.replace_rows(delete=[{"id": 1, "name": "a"}], insert=[{"id": 4, "name": "d"}])
    assert rr == (1, 1) and rr.version == db.version == 4
    buffered = db.insert_buffered({"id": 5, "name": "e"})
    assert buffered == 1 and buffered.version is None
    flushed = db.flush()
    assert flushed == 1 and flushed.version == db.version == 5
    assert db.flush().version is None
    tr = db.truncate()
    assert tr == 3 and tr.version == db.version == 6
    assert db.truncate().version is None


def test_the_version_is_the_writers_own_when_another_commits_after(tmp_path: Path) -> None:
    db = make(tmp_path, "local")
    other = DatabaseOps.open(db.uri, engine="local")
    mine = db.insert({"id": 1, "name": "mine"})
    other.insert({"id": 2, "name": "theirs"})
    assert mine.version == 1 and db.version == 2
    assert other.insert({"id": 3, "name": "theirs"}).version == 3
