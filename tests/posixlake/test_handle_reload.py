"""A long-lived handle loads its table afresh after many commits.

A loaded delta-rs table slows down with every commit it makes or catches up with after
its load (see ``posixlake.delta._table.RELOAD_AFTER_COMMITS``): the handle's refresh
replaces it by a fresh load, which must change nothing a caller sees.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from posixlake import DatabaseOps, DuplicateKeyError
from posixlake.delta import _table


def ids(db: DatabaseOps) -> list[int]:
    return sorted(db.to_arrow().column("id").to_pylist())


def test_a_handle_loads_its_table_afresh_after_many_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_table, "RELOAD_AFTER_COMMITS", 3, raising=False)
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine="local", primary_key="id")
    other = DatabaseOps.open(tmp_path / "t", engine="local")
    loaded = db._log.table
    db.insert({"id": 1})
    other.insert({"id": 2})  # another writer's commit: caught up with, then counted
    db.insert({"id": 3})
    assert db._log.table is loaded  # versions 1, 2 (caught up) and 3: three commits
    with caplog.at_level(logging.WARNING, logger="posixlake"):
        db.delete_rows_where("id = 1")  # its refresh loads the table afresh
    assert db._log.table is not loaded
    assert caplog.records == []  # the same table: no "replaced" warning
    assert (db.version, db._log.generation) == (4, 0)  # not counted as a replacement
    assert ids(db) == [2, 3]
    with pytest.raises(DuplicateKeyError):  # the key index still holds every key
        db.insert({"id": 2})
    reloaded = db._log.table
    db.insert({"id": 4})
    assert db._log.table is reloaded  # counted again from the fresh load
    assert ids(db) == ids(other) == [2, 3, 4]
