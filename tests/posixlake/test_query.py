"""query(): the QueryResult API, SQL errors, time travel by version and time, history."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from posixlake import DatabaseOps, Field, QueryResult, Schema
from posixlake.engines import Engine
from posixlake.errors import InvalidOperation, NotFound, QueryError, VersionError

SCHEMA = Schema([Field("id", "Int64", False), Field("name", "String"), Field("score", "Float64")])
ROWS = [
    {"id": 1, "name": "ann", "score": 1.5},
    {"id": 2, "name": "bob", "score": None},
    {"id": 3, "name": "ann", "score": 4.0},
]


@pytest.fixture
def db(tmp_path: Path, engine: Engine) -> DatabaseOps:
    d = DatabaseOps.create(tmp_path / "t", SCHEMA, engine=engine)
    d.insert(ROWS)
    return d


class TestQueryResult:
    def test_arrow(self, db: DatabaseOps) -> None:
        t = db.query("SELECT * FROM data ORDER BY id").arrow()
        assert isinstance(t, pa.Table)
        assert t.to_pylist() == ROWS
        # plain types (no string views / large strings leak out of DataFusion)
        assert t.schema.field("name").type == pa.string()

    def test_df_and_pl(self, db: DatabaseOps) -> None:
        df = db.query("SELECT id, name FROM data ORDER BY id").df()
        assert isinstance(df, pd.DataFrame)
        assert df["name"].tolist() == ["ann", "bob", "ann"]
        frame = db.query("SELECT id, name FROM data ORDER BY id").pl()
        assert isinstance(frame, pl.DataFrame)
        assert frame["id"].to_list() == [1, 2, 3]

    def test_fetchall_fetchone_scalar(self, db: DatabaseOps) -> None:
        r = db.query("SELECT id, name FROM data ORDER BY id")
        assert r.fetchall() == [(1, "ann"), (2, "bob"), (3, "ann")]
        assert r.fetchone() == (1, "ann")
        assert r.scalar() == 1
        assert db.query("SELECT count(*) FROM data").scalar() == 3

    def test_iteration_len_columns_repr(self, db: DatabaseOps) -> None:
        r = db.query("SELECT name, count(*) AS n FROM data GROUP BY name ORDER BY name")
        assert len(r) == 2
        assert list(r) == [("ann", 2), ("bob", 1)]
        assert r.columns == ["name", "n"]
        assert r.schema.names == ["name", "n"]
        assert repr(r) == "QueryResult(2 rows x 2 columns)"
        assert r.to_pylist() == [{"name": "ann", "n": 2}, {"name": "bob", "n": 1}]

    def test_empty_result(self, db: DatabaseOps) -> None:
        r = db.query("SELECT * FROM data WHERE id > 100")
        assert len(r) == 0
        assert r.fetchone() is None
        assert r.scalar() is None
        assert r.fetchall() == []
        assert r.to_json() == "[]"
        assert r.columns == ["id", "name", "score"]

    def test_to_json_and_query_json(self, db: DatabaseOps) -> None:
        expected = [
            {"id": 1, "name": "ann", "score": 1.5},
            {"id": 2, "name": "bob", "score": None},
        ]
        sql = "SELECT * FROM data WHERE id < 3 ORDER BY id"
        assert json.loads(db.query(sql).to_json()) == expected
        assert json.loads(db.query_json(sql)) == expected

    def test_to_json_of_every_kind_of_value(self, tmp_path: Path, engine: Engine) -> None:
        schema = {
            "b": "Binary",
            "d": "Date32",
            "t": "Timestamp",
            "f": "Float64",
            "dec": "Decimal128(5,2)",
            "m": "Map<String,Int64>",
            "s": "Struct<a:Int64>",
            "l": "List<String>",
        }
        d = DatabaseOps.create(tmp_path / "j", schema, engine=engine)
        d.insert(
            {
                "b": b"\x00a",
                "d": date(2024, 1, 1),
                "t": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
                "f": float("nan"),
                "dec": Decimal("1.50"),
                "m": {"k": 1},
                "s": {"a": 1},
                "l": ["x"],
            }
        )
        assert json.loads(d.query("SELECT * FROM data").to_json()) == [
            {
                "b": "AGE=",  # base64
                "d": "2024-01-01",
                "t": "2024-01-02T03:04:05+00:00",
                "f": None,  # NaN is not JSON
                "dec": "1.50",  # exact, as text
                "m": {"k": 1},
                "s": {"a": 1},
                "l": ["x"],
            }
        ]

    def test_show_prints_an_aligned_table(
        self, db: DatabaseOps, capsys: pytest.CaptureFixture[str]
    ) -> None:
        text = db.query("SELECT id, name, score FROM data ORDER BY id").show()
        out = capsys.readouterr().out
        assert text in out
        lines = text.splitlines()
        assert lines[1].split("|")[1:-1] == [" id ", " name ", " score "]
        assert "| 2  | bob  | NULL  |" in lines
        assert lines[-1] == "(3 rows)"
        assert len({len(line) for line in lines[:-1]}) == 1  # aligned
        short = db.query("SELECT id FROM data ORDER BY id").show(limit=2)
        assert short.splitlines()[-1] == "(3 rows, 2 shown)"

    def test_result_object_wraps_any_table(self) -> None:
        r = QueryResult(pa.table({"x": [1, 2]}))
        assert r.fetchall() == [(1,), (2,)]


class TestSql:
    def test_the_table_is_named_data(self, db: DatabaseOps) -> None:
        assert db.query("SELECT max(score) FROM data").scalar() == 4.0
        with pytest.raises(QueryError, match=r"the table is (called )?`data`") as info:
            db.query("SELECT * FROM other")
        assert "other" in str(info.value)

    @pytest.mark.parametrize(
        "sql",
        [
            "SELEC * FROM data",
            "SELECT nope FROM data",
            "SELECT * FROM data WHERE",
            "SELECT CAST(name AS INT) FROM data",  # fails while running, not planning
            "",
            "   ",
        ],
    )
    def test_bad_sql_raises_query_error(self, db: DatabaseOps, sql: str) -> None:
        with pytest.raises(QueryError):
            db.query(sql)
        assert db.get_metrics().errors >= (1 if sql.strip() else 0)

    def test_queries_see_commits_of_other_writers(self, db: DatabaseOps, engine: Engine) -> None:
        other = DatabaseOps.open(db.uri, engine=engine)
        other.insert({"id": 4})
        assert db.query("SELECT count(*) FROM data").scalar() == 4
        assert db.version == 2

    def test_to_arrow_and_iteration_over_the_table(self, db: DatabaseOps) -> None:
        assert sorted(db.to_arrow().to_pylist(), key=lambda r: r["id"]) == ROWS
        assert sorted(db, key=lambda r: r["id"]) == ROWS

    def test_queries_count_in_metrics(self, db: DatabaseOps) -> None:
        for _ in range(3):
            db.query("SELECT 1")
        assert db.get_metrics().queries == 3


class TestTimeTravel:
    @pytest.fixture
    def versions(self, tmp_path: Path, engine: Engine) -> DatabaseOps:
        """Versions: 0 empty, 1 = {1}, 2 = {1, 2}, 3 = {1, 2, 3}, 4 = {2, 3}."""
        d = DatabaseOps.create(tmp_path / "tt", SCHEMA, engine=engine)
        for i in (1, 2, 3):
            d.insert({"id": i})
        d.delete_rows_where("id = 1")
        return d

    @staticmethod
    def ids(result: QueryResult) -> list[int]:
        return [r[0] for r in result.fetchall()]

    def test_query_at_every_version(self, versions: DatabaseOps) -> None:
        sql = "SELECT id FROM data ORDER BY id"
        expected = {0: [], 1: [1], 2: [1, 2], 3: [1, 2, 3], 4: [2, 3]}
        for v, ids in expected.items():
            assert self.ids(versions.query(sql, version=v)) == ids
            assert self.ids(versions.query_version(sql, v)) == ids
            assert [r["id"] for r in json.loads(versions.query_version_json(sql, v))] == ids
            assert sorted(r["id"] for r in versions.to_arrow(version=v).to_pylist()) == ids
        assert self.ids(versions.query(sql)) == [2, 3]

    def test_query_as_of_a_time(self, versions: DatabaseOps) -> None:
        sql = "SELECT id FROM data ORDER BY id"
        times = {v: versions.commit_time(v) for v in range(5)}
        # a version whose successor was committed strictly later (ms resolution)
        v = next(v for v in range(4) if times[v + 1] > times[v])
        expected = self.ids(versions.query(sql, version=v))
        when = times[v]
        assert self.ids(versions.query(sql, as_of=when)) == expected
        assert self.ids(versions.query(sql, as_of=when.replace(tzinfo=None))) == expected  # UTC
        epoch_ms = int(when.timestamp() * 1000)
        assert self.ids(versions.query(sql, as_of=epoch_ms)) == expected
        assert self.ids(versions.query(sql, as_of=when.isoformat())) == expected
        assert self.ids(versions.query_timestamp(sql, when)) == expected
        assert [r["id"] for r in json.loads(versions.query_timestamp_json(sql, epoch_ms))] == (
            expected
        )
        # a time after the last commit is the latest version
        later = times[4] + timedelta(days=1)
        assert self.ids(versions.query(sql, as_of=later)) == [2, 3]

    @pytest.mark.parametrize("version", [5, 99, -1])
    def test_missing_version_raises_version_error(
        self, versions: DatabaseOps, version: int
    ) -> None:
        with pytest.raises(VersionError):
            versions.query("SELECT 1", version=version)

    @pytest.mark.parametrize("as_of", [0, "1999-01-01T00:00:00Z", datetime(2000, 1, 1, tzinfo=UTC)])
    def test_time_before_the_table_existed_raises(self, versions: DatabaseOps, as_of: Any) -> None:
        with pytest.raises(VersionError):
            versions.query("SELECT 1", as_of=as_of)

    @pytest.mark.parametrize("as_of", ["yesterday", True, [1]])
    def test_bad_as_of_raises(self, versions: DatabaseOps, as_of: Any) -> None:
        with pytest.raises(VersionError):
            versions.query("SELECT 1", as_of=as_of)

    @pytest.mark.parametrize("version", ["1", 1.0, True])
    def test_bad_version_type_raises(self, versions: DatabaseOps, version: Any) -> None:
        with pytest.raises(VersionError):
            versions.query("SELECT 1", version=version)

    def test_version_and_as_of_together_raise(self, versions: DatabaseOps) -> None:
        with pytest.raises(InvalidOperation):
            versions.query("SELECT 1", version=1, as_of=datetime.now(UTC))

    def test_bad_sql_at_a_version_raises_query_error(self, versions: DatabaseOps) -> None:
        with pytest.raises(QueryError):
            versions.query("SELECT nope FROM data", version=2)

    def test_snapshots_are_read_only_and_stable(self, versions: DatabaseOps) -> None:
        before = versions.query("SELECT count(*) FROM data", version=2).scalar()
        versions.insert({"id": 10})
        assert versions.query("SELECT count(*) FROM data", version=2).scalar() == before


class TestHistory:
    def test_history_newest_first_with_operations(self, tmp_path: Path, engine: Engine) -> None:
        d = DatabaseOps.create(tmp_path / "h", SCHEMA, primary_key="id", engine=engine)
        d.insert({"id": 1})
        d.merge([{"_op": "UPDATE", "id": 1, "name": "x"}])
        d.update("id = 1", {"score": 1.0})
        d.delete_rows_where("id = 1")
        h = d.history()
        assert [c.version for c in h] == [4, 3, 2, 1, 0]
        assert [c.operation for c in h] == ["DELETE", "UPDATE", "MERGE", "WRITE", "CREATE TABLE"]
        assert all(a.timestamp >= b.timestamp for a, b in itertools.pairwise(h))
        assert all(c.timestamp.tzinfo is not None for c in h)
        if engine.name == "local":  # delta-rs' own operation metrics
            assert h[0].metrics.get("num_deleted_rows") == 1
        assert [c.version for c in d.history(2)] == [4, 3]
        assert [c.version for c in d.get_history(1)] == [4]

    def test_commit_time(self, tmp_path: Path, engine: Engine) -> None:
        start = datetime.now(UTC) - timedelta(minutes=5)
        d = DatabaseOps.create(tmp_path / "h", SCHEMA, engine=engine)
        d.insert({"id": 1})
        assert (
            start
            <= d.commit_time(0)
            <= d.commit_time(1)
            <= datetime.now(UTC) + timedelta(minutes=5)
        )
        with pytest.raises(VersionError):
            d.commit_time(9)


def test_open_missing_table_raises_not_found(tmp_path: Path, engine: Engine) -> None:
    with pytest.raises(NotFound):
        DatabaseOps.open(tmp_path / "nothing", engine=engine)
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(NotFound):
        DatabaseOps.open(tmp_path / "empty_dir", engine=engine)
