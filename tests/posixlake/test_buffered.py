"""insert_buffered / flush: one commit per flush, auto-flush, flush on close, keys, bad rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.buffer import DEFAULT_BUFFER_ROWS, BufferedKeysTaken, WriteBuffer
from posixlake.engines import Engine
from posixlake.errors import (
    DuplicateKeyError,
    InvalidOperation,
    SchemaError,
    SerializationError,
)

SCHEMA = Schema([Field("id", "Int64", False), Field("name", "String"), Field("score", "Float64")])


def make(path: Path, engine: Engine, **kw: Any) -> DatabaseOps:
    return DatabaseOps.create(path / "t", SCHEMA, engine=engine, **kw)


def ids(db: DatabaseOps) -> list[int]:
    return [r[0] for r in db.query("SELECT id FROM data ORDER BY id").fetchall()]


def test_buffered_rows_commit_once_at_flush(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    for i in range(100):
        assert db.insert_buffered({"id": i, "name": f"n{i}", "score": i / 4}) == 1
    assert db.buffered_rows == 100
    assert db.version == 0  # nothing committed yet
    assert ids(db) == []  # buffered rows are not visible before the flush
    assert db.flush() == 100
    assert db.version == 1
    assert db.buffered_rows == 0
    assert ids(db) == list(range(100))
    rows = db.query("SELECT * FROM data WHERE id = 7").to_pylist()
    assert rows == [{"id": 7, "name": "n7", "score": 1.75}]


def test_flush_of_an_empty_buffer_makes_no_commit(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    assert db.flush() == 0
    assert db.version == 0


def test_every_payload_kind_can_be_buffered_in_order(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.insert_buffered({"id": 1})
    db.insert_buffered([{"id": 2}, {"id": 3, "name": "x"}])
    db.insert_buffered(json.dumps({"id": 4, "score": 1}))
    db.insert_buffered(pa.table({"id": pa.array([5, 6], pa.int64())}))
    db.insert_buffered({"id": 7, "name": None, "score": 2})
    db.insert_buffered({"id": [8, 9]})
    assert db.buffered_rows == 9
    assert db.flush() == 9
    assert db.version == 1
    assert db.query("SELECT id, name, score FROM data ORDER BY id").fetchall() == [
        (1, None, None),
        (2, None, None),
        (3, "x", None),
        (4, None, 1.0),
        (5, None, None),
        (6, None, None),
        (7, None, 2.0),
        (8, None, None),
        (9, None, None),
    ]


def test_auto_flush_at_the_configured_row_count(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine, buffer_rows=10)
    for i in range(25):
        db.insert_buffered({"id": i})
    assert db.version == 2  # two automatic flushes of 10 rows
    assert db.buffered_rows == 5
    assert len(ids(db)) == 20
    db.flush()
    assert ids(db) == list(range(25))


def test_default_auto_flush_is_1000_rows(tmp_path: Path, engine: Engine) -> None:
    assert DEFAULT_BUFFER_ROWS == 1000
    db = make(tmp_path, engine)
    db.insert_buffered([{"id": i} for i in range(999)])
    assert db.version == 0
    db.insert_buffered({"id": 999})
    assert db.version == 1
    assert db.buffered_rows == 0
    assert db.query("SELECT count(*) FROM data").scalar() == 1000


def test_a_batch_larger_than_the_buffer_flushes_whole(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine, buffer_rows=10)
    db.insert_buffered([{"id": i} for i in range(35)])
    assert db.version == 1
    assert db.buffered_rows == 0
    assert db.query("SELECT count(*) FROM data").scalar() == 35


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_buffer_rows_must_be_a_positive_integer(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(InvalidOperation, match="buffer_rows"):
        DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local", buffer_rows=bad)


def test_close_flushes(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.insert_buffered({"id": 1})
    db.close()
    db.close()  # closing twice is harmless
    reopened = DatabaseOps.open(tmp_path / "t", engine=engine)
    assert ids(reopened) == [1]
    with pytest.raises(InvalidOperation, match="closed"):
        db.insert_buffered({"id": 2})
    with pytest.raises(InvalidOperation, match="closed"):
        db.insert({"id": 2})


def test_leaving_a_with_block_flushes(tmp_path: Path, engine: Engine) -> None:
    with make(tmp_path, engine) as db:
        db.insert_buffered([{"id": 1}, {"id": 2}])
        assert db.version == 0
    assert ids(DatabaseOps.open(tmp_path / "t", engine=engine)) == [1, 2]


def test_leaving_a_with_block_by_an_exception_still_flushes(tmp_path: Path, engine: Engine) -> None:
    # the buffered rows were validated and accepted: an unrelated error does not drop them
    with pytest.raises(KeyError), make(tmp_path, engine) as db:
        db.insert_buffered({"id": 1})
        raise KeyError("unrelated")
    assert ids(DatabaseOps.open(tmp_path / "t", engine=engine)) == [1]


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ('{"id": 1,', SerializationError),
        ({"id": "one"}, SchemaError),
        ({"name": "no id"}, SchemaError),
        ({"id": 1, "nope": 2}, SchemaError),
        ({"id": 2**63}, SchemaError),
        ({"id": True}, SchemaError),
        ({"id": 1, "score": "high"}, SchemaError),
        (42, SerializationError),
    ],
)
def test_bad_rows_raise_at_insert_and_are_not_buffered(
    tmp_path: Path, engine: Engine, payload: Any, error: type[Exception]
) -> None:
    db = make(tmp_path, engine)
    db.insert_buffered({"id": 0})
    with pytest.raises(error):
        db.insert_buffered(payload)
    assert db.buffered_rows == 1
    assert db.flush() == 1
    assert ids(db) == [0]


class TestPrimaryKey:
    def test_key_in_the_table_raises_at_insert(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, primary_key="id")
        db.insert({"id": 1})
        with pytest.raises(DuplicateKeyError, match="already exists"):
            db.insert_buffered({"id": 1})
        with pytest.raises(DuplicateKeyError):
            db.insert_buffered([{"id": 5}, {"id": 1}])
        assert db.buffered_rows == 0

    def test_key_already_buffered_raises_at_insert(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, primary_key="id")
        db.insert_buffered({"id": 1})
        with pytest.raises(DuplicateKeyError, match="buffer"):
            db.insert_buffered({"id": 1, "name": "again"})
        with pytest.raises(DuplicateKeyError, match="buffer"):
            db.insert_buffered(pa.table({"id": pa.array([2, 1], pa.int64())}))
        with pytest.raises(DuplicateKeyError):
            db.insert_buffered([{"id": 3}, {"id": 3}])
        assert db.buffered_rows == 1
        assert db.flush() == 1
        db.insert_buffered({"id": 2})  # freed again once the buffer is flushed... and new
        with pytest.raises(DuplicateKeyError):
            db.insert_buffered({"id": 1})  # ...while 1 is now in the table
        db.flush()
        assert ids(db) == [1, 2]

    def test_large_buffered_batches_are_checked_against_buffer_and_table(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = make(tmp_path, engine, primary_key="id", buffer_rows=10_000)
        db.insert([{"id": i} for i in range(100)])
        db.insert_buffered([{"id": i} for i in range(100, 300)])
        with pytest.raises(DuplicateKeyError):
            db.insert_buffered([{"id": i} for i in range(300, 400)] + [{"id": 250}])
        with pytest.raises(DuplicateKeyError):
            db.insert_buffered([{"id": i} for i in range(300, 400)] + [{"id": 50}])
        assert db.buffered_rows == 200
        db.flush()
        assert db.query("SELECT count(DISTINCT id) FROM data").scalar() == 300

    def test_a_key_taken_by_another_writer_does_not_wedge_the_buffer(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = make(tmp_path, engine, primary_key="id")
        db.insert_buffered([{"id": 1, "name": "mine"}, {"id": 2, "name": "mine"}])
        db.insert_buffered({"id": 3, "name": "mine"})
        other = DatabaseOps.open(tmp_path / "t", engine=engine)
        other.insert({"id": 2, "name": "theirs"})
        with pytest.raises(BufferedKeysTaken) as caught:
            db.flush()
        assert isinstance(caught.value, DuplicateKeyError)
        assert caught.value.rejected.to_pylist() == [{"id": 2, "name": "mine", "score": None}]
        assert db.buffered_rows == 2  # the others stay buffered, nothing lost silently
        assert db.version == 1
        assert db.flush() == 2
        got = db.query("SELECT id, name FROM data ORDER BY id").fetchall()
        assert got == [(1, "mine"), (2, "theirs"), (3, "mine")]

    def test_close_commits_the_free_rows_and_raises_for_taken_ones(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = make(tmp_path, engine, primary_key="id")
        db.insert_buffered([{"id": 1}, {"id": 2}])
        DatabaseOps.open(tmp_path / "t", engine=engine).insert({"id": 1, "name": "theirs"})
        with pytest.raises(BufferedKeysTaken):
            db.close()
        again = DatabaseOps.open(tmp_path / "t", engine=engine)
        assert again.query("SELECT id, name FROM data ORDER BY id").fetchall() == [
            (1, "theirs"),
            (2, None),
        ]


def test_original_aliases(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    assert db.insert_buffered_json(json.dumps([{"id": 1}, {"id": 2}])) == 2
    assert db.insert_buffered_json('{"id": 3}') == 1
    assert db.flush_write_buffer() == 3
    assert db.flush_write_buffer() == 0
    assert ids(db) == [1, 2, 3]


def test_buffered_inserts_count_in_metrics(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    for i in range(5):
        db.insert_buffered({"id": i})
    db.flush()
    m = db.get_metrics()
    assert m.inserts == 1
    assert m.rows_written == 5
    assert m.commits == 1


class TestWriteBuffer:
    """The buffer itself."""

    def test_take_returns_everything_once_full(self) -> None:
        buf = WriteBuffer(3)
        assert not buf.add_row({"id": 1})
        assert not buf.add(pa.table({"id": [2]}))
        assert buf.add_row({"id": 3})  # full
        taken = buf.take(lambda rows: pa.Table.from_pylist(rows))
        assert taken is not None
        table, keys = taken
        assert table.column("id").to_pylist() == [1, 2, 3]
        assert keys == set()
        assert buf.rows == 0
        assert buf.take(lambda rows: pa.Table.from_pylist(rows)) is None

    def test_put_back_restores_rows_and_keys(self) -> None:
        buf = WriteBuffer(10)
        buf.add_row({"id": 1}, key=1)
        buf.add(pa.table({"id": [2]}), keys=[2])
        taken = buf.take(lambda rows: pa.Table.from_pylist(rows))
        assert taken is not None and buf.keys == set()
        buf.put_back(*taken)
        assert buf.rows == 2 and buf.keys == {1, 2}

    def test_a_failing_conversion_keeps_the_rows(self) -> None:
        buf = WriteBuffer(10)
        buf.add_row({"id": 1}, key=1)

        def fail(rows: list[dict[str, Any]]) -> pa.Table:
            raise SchemaError("schema changed meanwhile")

        with pytest.raises(SchemaError):
            buf.take(fail)
        assert buf.rows == 1 and buf.keys == {1}
