"""optimize / vacuum / z-order, data-skipping stats, health, metrics and primary keys."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.delta import DeltaLog
from posixlake.engines import Engine, LocalEngine
from posixlake.errors import (
    DuplicateKeyError,
    InvalidOperation,
    QueryError,
    SchemaError,
    VersionError,
)

SCHEMA = Schema(
    [
        Field("id", "Int64", False),
        Field("day", "String"),
        Field("v", "Float64"),
        Field("when", "Date32"),
    ]
)


def make(path: Path, engine: Engine, batches: int = 6, **kw: Any) -> DatabaseOps:
    """A table written in ``batches`` commits of 10 rows, ids 10*i .. 10*i+9 per batch."""
    db = DatabaseOps.create(path / "t", SCHEMA, engine=engine, **kw)
    for i in range(batches):
        db.insert(
            [
                {
                    "id": i * 10 + j,
                    "day": f"d{i % 2}",
                    "v": float(j),
                    "when": f"2024-01-{i + 1:02d}",
                }
                for j in range(10)
            ]
        )
    return db


def active_paths(db: DatabaseOps) -> list[str]:
    return [str(p) for p in db._log.add_actions().column("path").to_pylist()]


def rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return db.query("SELECT * FROM data ORDER BY id").fetchall()


class TestOptimize:
    def test_compaction_rewrites_small_files_in_one_commit(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = make(tmp_path, engine)
        before = rows(db)
        assert db.health_check().active_files == 6
        result = db.optimize()
        assert (result.files_removed, result.files_added, result.version) == (6, 1, 7)
        assert db.version == 7
        assert db.history(1)[0].operation == "OPTIMIZE"
        assert db.health_check().active_files == 1
        assert rows(db) == before
        # time travel still sees the old layout
        assert db.query("SELECT count(*) FROM data", version=6).scalar() == 60

    def test_nothing_to_compact_makes_no_commit(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, batches=1)
        result = db.optimize.compact()
        assert (result.files_removed, result.files_added, result.version) == (0, 0, None)
        assert db.version == 1

    def test_target_size(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        size = max(os.path.getsize(os.path.join(db.uri, p)) for p in active_paths(db))
        result = db.optimize(target_size=size * 2 + 1)
        assert 1 < result.files_added < 6  # a small target gives several output files
        assert db.query("SELECT count(*) FROM data").scalar() == 60

    def test_partition_filter_limits_the_work(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, partition_by=["day"])
        result = db.optimize(partition_filters=[("day", "=", "d0")])
        assert (result.files_removed, result.files_added, result.partitions_optimized) == (3, 1, 1)
        paths = active_paths(db)
        assert sum(p.startswith("day=d0") for p in paths) == 1
        assert sum(p.startswith("day=d1") for p in paths) == 3

    def test_z_order(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        before = rows(db)
        result = db.zorder(["v", "id"])
        assert result.version == 7 and result.files_removed == 6
        assert rows(db) == before
        assert db.optimize.z_order("id").version == 8  # a single column name is fine

    @pytest.mark.parametrize(
        ("columns", "error"), [(["nope"], SchemaError), ([], InvalidOperation)]
    )
    def test_z_order_bad_columns(
        self, tmp_path: Path, engine: Engine, columns: list[str], error: type[Exception]
    ) -> None:
        db = make(tmp_path, engine, batches=2)
        with pytest.raises(error):
            db.zorder(columns)
        assert db.version == 2


class TestVacuum:
    def test_dry_run_lists_and_vacuum_deletes_unreferenced_files(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = make(tmp_path, engine)
        old = set(active_paths(db))
        db.optimize()
        dry = db.vacuum(0, dry_run=True, enforce_retention_duration=False)
        assert dry.dry_run and set(dry.files) == old
        assert all(os.path.exists(os.path.join(db.uri, p)) for p in old)
        done = db.vacuum(0, enforce_retention_duration=False)
        assert done.files_deleted == 6 and not done.dry_run
        assert not any(os.path.exists(os.path.join(db.uri, p)) for p in old)
        assert db.query("SELECT count(*) FROM data").scalar() == 60
        # the data of a version older than the vacuum is gone: a clear error
        with pytest.raises(VersionError, match="VACUUM"):
            db.query("SELECT * FROM data", version=3).fetchall()

    def test_default_retention_keeps_recent_files(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        db.optimize()
        assert db.vacuum().files_deleted == 0
        assert db.vacuum(168).files_deleted == 0

    @pytest.mark.parametrize("hours", [0, 1])
    def test_short_retention_is_refused_when_enforced(
        self, tmp_path: Path, engine: Engine, hours: int
    ) -> None:
        db = make(tmp_path, engine)
        db.optimize()
        with pytest.raises(InvalidOperation, match="retention"):
            db.vacuum(hours, enforce_retention_duration=True)
        # without the guard the caller decides (files removed now are not 1 hour old)
        assert (db.vacuum(hours, dry_run=True).files_deleted > 0) == (hours == 0)

    @pytest.mark.parametrize("hours", [-1, 1.5, True, "1"])
    def test_bad_retention_raises(self, tmp_path: Path, engine: Engine, hours: Any) -> None:
        db = make(tmp_path, engine, batches=1)
        with pytest.raises(InvalidOperation):
            db.vacuum(hours)


class TestDataSkipping:
    @pytest.mark.parametrize(
        ("predicate", "to_scan"),
        [
            (None, 6),
            ("", 6),
            ("id = 5", 1),
            ("id = 1000", 0),
            ("5 = id", 1),
            ("id < 10", 1),
            ("id <= 10", 2),
            ("id > 49", 1),
            ("id >= 0", 6),
            ("id != 5", 6),
            ("id BETWEEN 15 AND 25", 2),
            ("id IN (1, 41)", 2),
            ("id = 5 OR id = 55", 2),
            ("id > 20 AND id < 30", 1),
            ("(id < 10 OR id > 50) AND v >= 0", 2),
            ('"id" = 5', 1),
            ("day = 'd0'", 3),
            ("day = 'zzz'", 0),
            ("when = DATE '2024-01-03'", 1),
            ("when >= '2024-01-05'", 2),
            ("v IS NULL", 0),
            ("v IS NOT NULL", 6),
            ("NOT id = 5", 6),  # NOT is kept conservatively
            ("id = v", 6),  # column vs column: statistics cannot decide
            ("id NOT IN (1, 2)", 6),
        ],
    )
    def test_files_a_predicate_skips(
        self, tmp_path: Path, local_engine: Engine, predicate: str | None, to_scan: int
    ) -> None:
        db = make(tmp_path, local_engine)
        stats = db.get_data_skipping_stats(predicate)
        assert stats.total_files == 6
        assert stats.total_rows == 60
        assert stats.files_to_scan == to_scan
        assert stats.files_skipped == 6 - to_scan
        assert stats.skip_ratio == pytest.approx((6 - to_scan) / 6)
        sizes = {p: os.path.getsize(os.path.join(db.uri, p)) for p in active_paths(db)}
        assert stats.total_bytes == sum(sizes.values())
        assert 0 <= stats.bytes_to_scan <= stats.total_bytes
        if to_scan == 6:
            assert stats.bytes_to_scan == stats.total_bytes

    def test_partition_columns(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, partition_by=["day"])
        assert db.get_data_skipping_stats("day = 'd1'").files_to_scan == 3
        assert db.get_data_skipping_stats("day IN ('d0', 'd1')").files_to_scan == 6

    def test_the_skipped_files_hold_no_matching_rows(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        for predicate in ("id = 5", "id BETWEEN 15 AND 25", "day = 'd0'"):
            stats = db.get_data_skipping_stats(predicate)
            matching = db.query(f"SELECT count(*) FROM data WHERE {predicate}").scalar()
            assert matching > 0 and stats.files_to_scan > 0

    def test_empty_table(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, batches=0)
        stats = db.get_data_skipping_stats("id = 1")
        assert (stats.total_files, stats.files_to_scan, stats.total_bytes) == (0, 0, 0)
        assert stats.skip_ratio == 0.0

    @pytest.mark.parametrize(
        "predicate", ["nope = 1", "id = ", "id ~ 5", "id = 'abc'", "id IS 5", "id = 1)"]
    )
    def test_bad_predicate_raises_query_error(
        self, tmp_path: Path, engine: Engine, predicate: str
    ) -> None:
        db = make(tmp_path, engine, batches=2)
        with pytest.raises(QueryError):
            db.get_data_skipping_stats(predicate)

    def test_sees_commits_of_other_writers(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, batches=2)
        DatabaseOps.open(db.uri, engine=engine).insert({"id": 999})
        assert db.get_data_skipping_stats().total_files == 3


class TestHealth:
    def test_counts_only_active_files(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        db.delete_rows_where("id < 10")  # removes one file
        db.optimize()  # 5 files -> 1; the old files stay on disk until vacuum
        on_disk = [f for f in os.listdir(db.uri) if f.endswith(".parquet")]
        assert len(on_disk) > 1
        health = db.health_check()
        assert health.healthy and health.status == "healthy"
        assert health.version == db.version
        assert health.active_files == 1
        (path,) = active_paths(db)
        assert health.active_bytes == os.path.getsize(os.path.join(db.uri, path))
        assert health.rows == 50
        assert health.location == db.uri

    def test_empty_table(self, tmp_path: Path, engine: Engine) -> None:
        health = make(tmp_path, engine, batches=0).health_check()
        assert (health.healthy, health.version, health.active_files, health.active_bytes) == (
            True,
            0,
            0,
            0,
        )

    def test_unhealthy_when_the_table_is_gone(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, batches=1)
        shutil.rmtree(db.uri)
        health = db.health_check()
        assert health.status == "unhealthy" and not health.healthy
        assert "_delta_log" in health.message


class TestMetrics:
    def test_counters(self, tmp_path: Path, engine: Engine) -> None:
        db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine=engine, primary_key="id")
        db.insert([{"id": 1}, {"id": 2}])
        db.insert({"id": 3})
        db.query("SELECT 1")
        db.merge([{"_op": "UPDATE", "id": 1, "v": 1.0}, {"_op": "INSERT", "id": 4}])
        db.delete_rows_where("id = 2")
        db.delete_rows_where("id = 200")  # matches nothing: no commit
        with pytest.raises(DuplicateKeyError):
            db.insert({"id": 3})
        m = db.get_metrics()
        assert (m.inserts, m.queries, m.merges, m.deletes) == (2, 1, 1, 2)
        assert m.rows_written == 3 + 2
        assert m.rows_deleted == 1
        assert m.commits == 4  # two inserts, the merge, one delete
        assert m.errors == 1
        assert m.avg_commit_latency_ms > 0 and m.last_commit_latency_ms > 0
        assert m.uptime_seconds >= 0

    def test_uptime_and_latency_follow_the_injected_clock(self, tmp_path: Path) -> None:
        DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local").close()
        now = [1000.0]

        def clock() -> float:
            now[0] += 0.5  # every reading advances the clock by half a second
            return now[0]

        db = DatabaseOps(DeltaLog.open(str(tmp_path / "t")), engine=LocalEngine(), clock=clock)
        db.insert({"id": 1})
        m = db.get_metrics()
        assert m.last_commit_latency_ms == pytest.approx(500.0)
        assert m.uptime_seconds == pytest.approx(1.5)


class TestPrimaryKey:
    def test_kept_in_the_delta_table_configuration(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, batches=1, primary_key="id")
        assert db.primary_key() == "id"
        assert db._log.configuration["posixlake.primaryKey"] == "id"
        reopened = DatabaseOps.open(db.uri, engine=engine)
        assert reopened.primary_key() == "id"
        with pytest.raises(DuplicateKeyError):
            reopened.insert({"id": 3})

    def test_set_primary_key_on_unique_rows(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, batches=2)
        assert db.primary_key() is None
        db.set_primary_key("id")
        assert db.version == 3
        assert db.primary_key() == "id"
        assert db.get_schema().key_columns == ["id"]
        with pytest.raises(DuplicateKeyError):
            db.insert({"id": 5})
        db.set_primary_key(["day", "id"])
        assert db.primary_key() == ["day", "id"]
        db.insert({"id": 5, "day": "other"})

    def test_remove_the_primary_key(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, batches=1, primary_key="id")
        db.set_primary_key(None)
        assert db.primary_key() is None
        db.insert({"id": 1})  # duplicates are allowed again
        assert db.query("SELECT count(*) FROM data WHERE id = 1").scalar() == 2

    def test_duplicates_or_nulls_refuse_a_key(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, batches=2)
        with pytest.raises(InvalidOperation, match="repeat"):
            db.set_primary_key("day")
        db.insert({"id": 100, "day": None})
        with pytest.raises(InvalidOperation, match="NULL"):
            db.set_primary_key("day")
        with pytest.raises(SchemaError, match="'zz'"):
            db.set_primary_key("zz")
        assert db.primary_key() is None
        assert db.version == 3

    def test_the_key_is_visible_to_other_handles(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, batches=1)
        other = DatabaseOps.open(db.uri, engine=engine)
        db.set_primary_key("id")
        with pytest.raises(DuplicateKeyError):
            other.insert({"id": 1})


def test_maintenance_leaves_the_data_readable_by_plain_arrow(
    tmp_path: Path, engine: Engine
) -> None:
    db = make(tmp_path, engine)
    db.optimize()
    db.zorder(["id"])
    table = pa.concat_tables([pq.read_table(os.path.join(db.uri, p)) for p in active_paths(db)])
    assert sorted(table.column("id").to_pylist()) == list(range(60))
