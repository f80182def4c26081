"""create_from_csv (real CSV parsing, whole-file type inference with widening) and
create_from_parquet (a file, a directory, a glob)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from posixlake import DatabaseOps
from posixlake.engines import Engine
from posixlake.errors import (
    AlreadyExists,
    DuplicateKeyError,
    NotFound,
    SchemaError,
    SerializationError,
)


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def types(db: DatabaseOps) -> dict[str, pa.DataType]:
    return {f.name: f.type for f in db.get_schema().to_arrow()}


def all_rows(db: DatabaseOps, order: str) -> list[dict[str, Any]]:
    return db.query(f"SELECT * FROM data ORDER BY {order}").to_pylist()


class TestCsv:
    def test_quotes_embedded_commas_and_newlines(self, tmp_path: Path, engine: Engine) -> None:
        csv = write(
            tmp_path / "in.csv",
            "id,text,note\r\n"
            '1,"hello, world","say ""hi"""\r\n'
            '2,"line one\nline two",plain\r\n'
            '3,"",\r\n'
            '4,"  padded  ","a\r\nb"\r\n',
        )
        db = DatabaseOps.create_from_csv(tmp_path / "t", csv, engine=engine)
        assert db.version == 1
        assert all_rows(db, "id") == [
            {"id": 1, "text": "hello, world", "note": 'say "hi"'},
            {"id": 2, "text": "line one\nline two", "note": "plain"},
            {"id": 3, "text": "", "note": None},  # "" is the empty string, nothing is NULL
            {"id": 4, "text": "  padded  ", "note": "a\r\nb"},
        ]

    def test_inference_of_every_type(self, tmp_path: Path, engine: Engine) -> None:
        csv = write(
            tmp_path / "in.csv",
            "i,f,b,d,ts,s,empty\n"
            "1,1.5,true,2024-01-31,2024-01-31T10:00:00Z,x,\n"
            "-2,2,FALSE,2024-02-29,2024-02-01 12:30:00+01:00,y,\n"
            ",,,,,,\n",
        )
        db = DatabaseOps.create_from_csv(tmp_path / "t", csv, engine=engine)
        assert types(db) == {
            "i": pa.int64(),
            "f": pa.float64(),
            "b": pa.bool_(),
            "d": pa.date32(),
            "ts": pa.timestamp("us", tz="UTC"),
            "s": pa.string(),
            "empty": pa.string(),
        }
        assert all_rows(db, "i NULLS LAST") == [
            {
                "i": -2,
                "f": 2.0,
                "b": False,
                "d": date(2024, 2, 29),
                "ts": datetime(2024, 2, 1, 11, 30, tzinfo=UTC),
                "s": "y",
                "empty": None,
            },
            {
                "i": 1,
                "f": 1.5,
                "b": True,
                "d": date(2024, 1, 31),
                "ts": datetime(2024, 1, 31, 10, tzinfo=UTC),
                "s": "x",
                "empty": None,
            },
            dict.fromkeys(("i", "f", "b", "d", "ts", "s", "empty")),
        ]

    def test_a_late_value_widens_the_type_instead_of_failing(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        lines = ["n,x,flag,day"]
        lines += [f"{i},{i},true,2024-01-01" for i in range(5000)]
        # far down the file: a float, a word, a non-boolean, a timestamp
        lines += ["5000,2.5,maybe,2024-01-01T12:00:00"]
        csv = write(tmp_path / "in.csv", "\n".join(lines) + "\n")
        db = DatabaseOps.create_from_csv(tmp_path / "t", csv, engine=engine)
        assert types(db) == {
            "n": pa.int64(),
            "x": pa.float64(),
            "flag": pa.string(),
            "day": pa.timestamp("us"),  # no zone written: none made up (TimestampNtz)
        }
        assert db.query("SELECT count(*) FROM data").scalar() == 5001  # every row
        assert db.query("SELECT x, flag FROM data WHERE n = 5000").fetchone() == (2.5, "maybe")
        assert db.query("SELECT x, flag FROM data WHERE n = 7").fetchone() == (7.0, "true")

    def test_numbers_widen_to_string(self, tmp_path: Path, engine: Engine) -> None:
        csv = write(tmp_path / "in.csv", "code\n1\n2.5\nA7\n00012\n")
        db = DatabaseOps.create_from_csv(tmp_path / "t", csv, engine=engine)
        assert types(db) == {"code": pa.string()}
        assert sorted(r[0] for r in db.query("SELECT code FROM data").fetchall()) == [
            "00012",
            "1",
            "2.5",
            "A7",
        ]

    def test_several_files_and_a_primary_key(self, tmp_path: Path, engine: Engine) -> None:
        a = write(tmp_path / "a.csv", "id,v\n1,x\n2,y\n")
        b = write(tmp_path / "b.csv", "id,v\n3,z\n")
        db = DatabaseOps.create_from_csv(tmp_path / "t", [a, b], primary_key="id", engine=engine)
        assert db.primary_key() == "id"
        assert [r["id"] for r in all_rows(db, "id")] == [1, 2, 3]
        with pytest.raises(DuplicateKeyError):
            db.insert({"id": 3, "v": "again"})

    def test_a_directory_of_csv_files(self, tmp_path: Path, engine: Engine) -> None:
        src = tmp_path / "src"
        src.mkdir()
        write(src / "1.csv", "id\n1\n")
        write(src / "2.csv", "id\n2\n")
        write(src / "notes.txt", "not csv")
        db = DatabaseOps.create_from_csv(tmp_path / "t", src, engine=engine)
        assert [r["id"] for r in all_rows(db, "id")] == [1, 2]

    def test_duplicate_keys_in_the_input_refuse_the_key(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        csv = write(tmp_path / "in.csv", "id,v\n1,a\n1,b\n")
        with pytest.raises(SchemaError, match="not unique"):
            DatabaseOps.create_from_csv(tmp_path / "t", csv, primary_key="id", engine=engine)
        assert not (tmp_path / "t" / "_delta_log").exists()

    def test_header_only_creates_an_empty_table(self, tmp_path: Path, engine: Engine) -> None:
        csv = write(tmp_path / "in.csv", "a,b\n")
        db = DatabaseOps.create_from_csv(tmp_path / "t", csv, engine=engine)
        assert db.version == 0
        assert db.get_schema().to_arrow().names == ["a", "b"]

    def test_partitioned(self, tmp_path: Path, engine: Engine) -> None:
        csv = write(tmp_path / "in.csv", "id,day\n1,mon\n2,tue\n3,mon\n")
        db = DatabaseOps.create_from_csv(tmp_path / "t", csv, partition_by=["day"], engine=engine)
        assert db.health_check().active_files == 2
        assert db.query("SELECT count(*) FROM data WHERE day = 'mon'").scalar() == 2

    @pytest.mark.parametrize(
        "text",
        [
            'id,v\n1,"unterminated\n',
            "id,v\n1,2,3\n",
            "",
            "a,a\n1,2\n",
            b"id\n\xff\xfe\n",
        ],
    )
    def test_malformed_csv_raises_serialization_error_and_creates_nothing(
        self, tmp_path: Path, engine: Engine, text: str | bytes
    ) -> None:
        csv = tmp_path / "bad.csv"
        csv.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(SerializationError):
            DatabaseOps.create_from_csv(tmp_path / "t", csv, engine=engine)
        assert not (tmp_path / "t" / "_delta_log").exists()

    def test_missing_file_raises_not_found(self, tmp_path: Path, engine: Engine) -> None:
        with pytest.raises(NotFound):
            DatabaseOps.create_from_csv(tmp_path / "t", tmp_path / "nope.csv", engine=engine)
        with pytest.raises(NotFound):
            DatabaseOps.create_from_csv(tmp_path / "t", tmp_path / "*.csv", engine=engine)
        assert not (tmp_path / "t").exists()

    def test_existing_table_raises_already_exists(self, tmp_path: Path, engine: Engine) -> None:
        csv = write(tmp_path / "in.csv", "id\n1\n")
        DatabaseOps.create_from_csv(tmp_path / "t", csv, engine=engine)
        with pytest.raises(AlreadyExists):
            DatabaseOps.create_from_csv(tmp_path / "t", csv, engine=engine)
        assert DatabaseOps.open(tmp_path / "t", engine=engine).version == 1


class TestParquet:
    TABLE = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "name": ["a", "b", None],
            "u": pa.array([1, 2, 255], pa.uint8()),
            "tags": [["x"], [], None],
        }
    )

    def test_one_file(self, tmp_path: Path, engine: Engine) -> None:
        pq.write_table(self.TABLE, tmp_path / "in.parquet")
        db = DatabaseOps.create_from_parquet(tmp_path / "t", tmp_path / "in.parquet", engine=engine)
        assert db.version == 1
        assert types(db)["u"] == pa.int16()  # widened for Delta
        assert all_rows(db, "id") == self.TABLE.to_pylist()

    def test_a_directory(self, tmp_path: Path, engine: Engine) -> None:
        src = tmp_path / "src"
        (src / "nested").mkdir(parents=True)
        pq.write_table(self.TABLE.slice(0, 1), src / "a.parquet")
        pq.write_table(self.TABLE.slice(1, 1), src / "nested" / "b.parquet")
        pq.write_table(self.TABLE.slice(2, 1), src / "_hidden.parquet")  # skipped
        db = DatabaseOps.create_from_parquet(tmp_path / "t", src, engine=engine)
        assert [r["id"] for r in all_rows(db, "id")] == [1, 2]

    def test_a_glob(self, tmp_path: Path, engine: Engine) -> None:
        for i in range(3):
            pq.write_table(self.TABLE.slice(i, 1), tmp_path / f"part{i}.parquet")
        pq.write_table(self.TABLE, tmp_path / "other.parquet")
        db = DatabaseOps.create_from_parquet(
            tmp_path / "t", str(tmp_path / "part*.parquet"), primary_key="id", engine=engine
        )
        assert [r["id"] for r in all_rows(db, "id")] == [1, 2, 3]
        assert db.primary_key() == "id"
        assert db.version == 1  # the create and one commit of every row

    def test_files_with_different_but_compatible_schemas(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), tmp_path / "a.parquet")
        pq.write_table(
            pa.table({"id": pa.array([2], pa.int64()), "extra": ["e"]}), tmp_path / "b.parquet"
        )
        db = DatabaseOps.create_from_parquet(
            tmp_path / "t", str(tmp_path / "*.parquet"), engine=engine
        )
        assert all_rows(db, "id") == [{"id": 1, "extra": None}, {"id": 2, "extra": "e"}]

    def test_missing_and_unreadable_files(self, tmp_path: Path, engine: Engine) -> None:
        with pytest.raises(NotFound):
            DatabaseOps.create_from_parquet(
                tmp_path / "t", tmp_path / "none.parquet", engine=engine
            )
        (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
        with pytest.raises(SerializationError):
            DatabaseOps.create_from_parquet(tmp_path / "t", tmp_path / "bad.parquet", engine=engine)
        assert not (tmp_path / "t" / "_delta_log").exists()
