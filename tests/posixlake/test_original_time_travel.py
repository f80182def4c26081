"""The original's time travel names at a time before the table existed: no rows.

The original (0.4.0) answered ``query_timestamp_json(sql, ms)`` for a time before the
table was created with ``[]`` (its README's own snippet used such a time); our
``query(as_of=)`` raises VersionError there. Only the original's names return no rows.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from posixlake import DatabaseOps, Field, Schema, VersionError
from posixlake.engines import Engine

BEFORE_CREATION_MS = 1234567890000  # 2009-02-13: the original README's timestamp


@pytest.fixture
def db(tmp_path: Path, engine: Engine) -> DatabaseOps:
    table = DatabaseOps.create(
        str(tmp_path / "t"),
        Schema(
            fields=[Field(name="id", data_type="Int32", nullable=False), Field("name", "String")]
        ),
        engine=engine,
    )
    table.insert_json('[{"id": 1, "name": "Alice"}]')
    return table


def test_query_timestamp_json_before_creation_is_an_empty_array(db: DatabaseOps) -> None:
    assert db.query_timestamp_json("SELECT * FROM data", timestamp_ms=BEFORE_CREATION_MS) == "[]"
    assert db.query_timestamp_json("SELECT * FROM data", BEFORE_CREATION_MS) == "[]"
    assert db.query_json_at_timestamp("SELECT * FROM data", BEFORE_CREATION_MS) == "[]"
    rows = db.query_timestamp("SELECT * FROM data", timestamp_ms=BEFORE_CREATION_MS)
    assert len(rows) == 0 and list(rows) == []
    # our own API keeps its VersionError: there is no such version
    with pytest.raises(VersionError, match="did not exist"):
        db.query("SELECT * FROM data", as_of=BEFORE_CREATION_MS)
    with pytest.raises(VersionError):
        db.to_arrow(as_of=BEFORE_CREATION_MS)
    # and a time that is no time is still an error through the original's names
    with pytest.raises(VersionError):
        db.query_timestamp_json("SELECT * FROM data", "not a time")


def test_times_after_creation_still_see_the_rows(db: DatabaseOps) -> None:
    created = db.commit_time(0)
    just_before = int((created - timedelta(milliseconds=1)).timestamp() * 1000)
    assert db.query_timestamp_json("SELECT * FROM data", just_before) == "[]"
    at_insert = int(db.commit_time(1).timestamp() * 1000)
    assert json.loads(db.query_timestamp_json("SELECT * FROM data", at_insert)) == [
        {"id": 1, "name": "Alice"}
    ]
    at_create = int(created.timestamp() * 1000)
    assert json.loads(db.query_timestamp_json("SELECT id FROM data", at_create)) == []
