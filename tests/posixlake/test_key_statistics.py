"""The duplicate-key check of a small insert reads only the files whose key statistics
admit its keys (``posixlake._keys``), and still finds every duplicate."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from posixlake import DatabaseOps, DuplicateKeyError
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
