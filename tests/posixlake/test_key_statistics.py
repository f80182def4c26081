"""The duplicate-key check of a small insert reads only the files whose key statistics
admit its keys (``posixlake._keys``), and still finds every duplicate."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from posixlake import DatabaseOps, DuplicateKeyError
from posixlake.buffer import BufferedKeysTaken
from posixlake.delta import DeltaLog


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real = DeltaLog.read_file_columns

    def counting(self: DeltaLog, paths: list[str], columns: list[str]) -> pa.Table:
        calls.append(list(paths))
        return real(self, paths, columns)

    monkeypatch.setattr(DeltaLog, "read_file_columns", counting)
    return calls


def test_a_new_key_past_every_file_reads_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "v": "String"}, primary_key="id")
    for start in (0, 100, 200):
        db.insert(
            pa.table({"id": pa.array(range(start, start + 100), pa.int64()), "v": ["x"] * 100})
        )
    reads = _reads(monkeypatch)
    db.insert({"id": 1000, "v": "new"})
    assert reads == []
    with pytest.raises(DuplicateKeyError):
        db.insert({"id": 150, "v": "again"})  # the middle file holds it
    assert len(reads) == 1 and len(reads[0]) == 1
    db.insert({"id": 301, "v": "free"})
    assert db.to_arrow().num_rows == 302


def test_long_string_keys_past_a_truncated_maximum_are_still_found(tmp_path: Path) -> None:
    prefix = "k" * 40  # longer than the 32 characters Delta writers keep in statistics
    db = DatabaseOps.create(tmp_path / "t", {"name": "String", "n": "Int64"}, primary_key="name")
    db.insert(pa.table({"name": [prefix + "a", prefix + "z"], "n": [1, 2]}))
    with pytest.raises(DuplicateKeyError):
        db.insert({"name": prefix + "z", "n": 3})
    db.insert({"name": prefix + "zz", "n": 4})
    assert sorted(db.to_arrow().column("n").to_pylist()) == [1, 2, 4]


def test_a_timestamp_key_below_its_millisecond_maximum_is_found(tmp_path: Path) -> None:
    # Delta statistics keep timestamps to milliseconds: the file's max (.123) is below the
    # key (.123456), so statistics must not clear it
    db = DatabaseOps.create(tmp_path / "t", {"at": "Timestamp", "v": "Int64"}, primary_key="at")
    early, late = datetime(2024, 1, 1, 0, 0, 0, 100), datetime(2024, 1, 1, 0, 0, 0, 123456)
    db.insert([{"at": early, "v": 1}, {"at": late, "v": 2}])
    with pytest.raises(DuplicateKeyError):
        db.insert({"at": late, "v": 3})
    with pytest.raises(DuplicateKeyError):
        db.insert_buffered({"at": late, "v": 3})
    assert db.to_arrow().num_rows == 2


def test_a_decimal_key_beyond_the_clamped_statistics_is_found(tmp_path: Path) -> None:
    # delta-rs clamps a Decimal(38,0) maximum to the int64 range in its statistics
    db = DatabaseOps.create(tmp_path / "t", {"k": "Decimal(38,0)", "v": "Int64"}, primary_key="k")
    big = Decimal(10**30 + 1)
    db.insert([{"k": Decimal(1), "v": 1}, {"k": big, "v": 2}])
    with pytest.raises(DuplicateKeyError):
        db.insert({"k": big, "v": 3})
    with pytest.raises(DuplicateKeyError):
        db.insert_buffered({"k": big, "v": 3})
    assert db.to_arrow().num_rows == 2


def test_buffered_keyed_inserts_list_the_files_once_per_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "v": "String"}, primary_key="id")
    for start in (0, 100, 200):
        db.insert(
            pa.table({"id": pa.array(range(start, start + 100), pa.int64()), "v": ["x"] * 100})
        )
    listed: list[int] = []
    real = DeltaLog.add_actions

    def counting(self: DeltaLog) -> pa.Table:
        listed.append(self.version)
        return real(self)

    monkeypatch.setattr(DeltaLog, "add_actions", counting)
    reads = _reads(monkeypatch)
    for batch in range(3):
        for i in range(100):
            db.insert_buffered({"id": 1000 + batch * 100 + i, "v": "new"})
        db.flush()
    # at most once (for the version the first call saw): our own flushes move the key
    # ranges forward instead of listing the files again
    assert len(listed) <= 1
    assert reads == []
    assert db.to_arrow().num_rows == 600


def test_keys_of_a_file_this_handle_appended_are_found(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "v": "String"}, primary_key="id")
    db.insert({"id": 10_000, "v": "seed"})
    db.insert_buffered({"id": 5, "v": "a"})  # builds the ranges of this version
    for i in range(6, 200):
        db.insert_buffered({"id": i, "v": "a"})
    db.flush()  # a file whose path the ranges do not know
    with pytest.raises(DuplicateKeyError, match="already exists"):
        db.insert_buffered({"id": 150, "v": "again"})
    with pytest.raises(DuplicateKeyError, match="already exists"):
        db.insert_buffered([{"id": 300 + i, "v": "b"} for i in range(99)] + [{"id": 7, "v": "b"}])
    db.insert_buffered({"id": 200, "v": "free"})
    db.flush()
    ids = db.to_arrow().column("id").to_pylist()
    assert sorted(ids) == [*range(5, 201), 10_000]


def test_a_large_flush_beyond_every_file_is_still_checked_against_another_writer(
    tmp_path: Path,
) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "v": "String"}, primary_key="id")
    db.insert({"id": 0, "v": "seed"})
    db.insert_buffered([{"id": 1000 + i, "v": "mine"} for i in range(100)])
    DatabaseOps.open(tmp_path / "t").insert({"id": 1050, "v": "theirs"})
    with pytest.raises(BufferedKeysTaken) as caught:
        db.flush()
    assert caught.value.rejected.column("id").to_pylist() == [1050]
    assert db.flush() == 99
    rows = {r["id"]: r["v"] for r in db.to_arrow().to_pylist()}
    assert len(rows) == 101 and rows[1050] == "theirs" and rows[1051] == "mine"
