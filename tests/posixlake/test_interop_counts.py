"""Every write returns its true row count, also when delta-rs gives none.

delta-rs counts the rows of files a partition predicate removes whole from their
statistics; files without statistics (other writers' files) come back as 0 rows. The
tables here are partitioned by year/month/day, with and without file statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from posixlake import DatabaseOps
from posixlake.engines import Engine
from tests.posixlake.interop_tables import no_stats_partitioned, reference


def with_stats(root: Path) -> str:
    """The same 7 rows as :func:`no_stats_partitioned`, written by deltalake (with stats)."""
    uri = str(root / "stats")
    days = list(range(1, 8))
    write_deltalake(
        uri,
        pa.table(
            {
                "id": pa.array(days, pa.int64()),
                "year": pa.array([2024] * 7, pa.int32()),
                "month": pa.array([1 + (d - 1) // 3 for d in days], pa.int32()),
                "day": pa.array(days, pa.int32()),
            }
        ),
        partition_by=["year", "month", "day"],
    )
    return uri


TABLES: dict[str, Callable[[Path], str]] = {"no-stats": no_stats_partitioned, "stats": with_stats}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_delete_by_partition_predicate(table: str, tmp_path: Path, engine: Engine) -> None:
    uri = TABLES[table](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    assert db.delete_rows_where("month = 1") == 3
    assert len(reference(uri)) == 4
    assert db.delete_rows_where("day IS NOT NULL") == 4
    assert reference(uri) == []
    assert db.delete_rows_where("day IS NOT NULL") == 0


@pytest.mark.parametrize("table", sorted(TABLES))
def test_update_by_partition_predicate(table: str, tmp_path: Path, engine: Engine) -> None:
    uri = TABLES[table](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    assert db.update("month = 2", expressions={"id": "id + 100"}) == 3
    assert sorted(r["id"] for r in reference(uri)) == [1, 2, 3, 7, 104, 105, 106]


@pytest.mark.parametrize("table", sorted(TABLES))
def test_truncate(table: str, tmp_path: Path, engine: Engine) -> None:
    uri = TABLES[table](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    assert db.truncate() == 7
    assert reference(uri) == []
    assert db.truncate() == 0


@pytest.mark.parametrize("table", sorted(TABLES))
def test_merge_counts(table: str, tmp_path: Path, engine: Engine) -> None:
    uri = TABLES[table](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    metrics = db.merge(
        [
            {"_op": "DELETE", "id": 1},
            {"_op": "UPDATE", "id": 2, "day": 2, "month": 1, "year": 2024},
            {"_op": "INSERT", "id": 8, "year": 2024, "month": 3, "day": 8},
        ],
        key="id",
    )
    assert (metrics.rows_inserted, metrics.rows_updated, metrics.rows_deleted) == (1, 1, 1)
    assert sorted(r["id"] for r in reference(uri)) == [2, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("table", sorted(TABLES))
def test_replace_rows_counts(table: str, tmp_path: Path, local_engine: Engine) -> None:
    """What an NFS overwrite of data.csv turns into (engine-independent: delta-rs)."""
    uri = TABLES[table](tmp_path)
    db = DatabaseOps.open(uri, engine=local_engine)
    gone = [r for r in reference(uri) if r["month"] == 1]
    assert db.replace_rows(delete=gone, insert=[{"id": 9, "year": 2025, "month": 1, "day": 1}]) == (
        3,
        1,
    )
    assert sorted(r["id"] for r in reference(uri)) == [4, 5, 6, 7, 9]
