"""Smoke test: the Spark engine on an S3 table (files through delta-rs' object store)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from posixlake import DatabaseOps, Field, Schema
from tests.storage.conftest import Lake, make_bucket
from tests.storage.servers import LocalServer

pytestmark = [pytest.mark.spark, pytest.mark.s3]

SCHEMA = Schema([Field("id", "Int64", False), Field("name", "String")], primary_key="id")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local SparkSession for this module (stopped at its end)."""
    from posixlake.engines.spark import SparkUnavailableError, build_session

    try:
        session = build_session(master="local[1]")
    except SparkUnavailableError as err:
        pytest.skip(str(err))
    yield session
    session.stop()


def test_spark_engine_on_s3(moto_server: LocalServer, spark: Any) -> None:
    from posixlake.engines.spark import SparkEngine

    lake = Lake("s3", moto_server.endpoint, make_bucket("s3", moto_server.endpoint))
    db = DatabaseOps.create(
        lake.uri(), SCHEMA, storage=lake.config(), engine=SparkEngine(spark=spark)
    )
    db.insert([{"id": i, "name": f"n{i}"} for i in range(1, 6)])
    assert db.query("SELECT count(*) AS n FROM data WHERE id > 2").scalar() == 3
    assert db.delete_rows_where("id = 1") == 1
    m = db.merge(
        [{"id": 2, "name": "two", "_op": "UPDATE"}, {"id": 9, "name": "nine", "_op": "INSERT"}]
    )
    assert (m.rows_updated, m.rows_inserted) == (1, 1)
    local = DatabaseOps.open(lake.uri(), storage=lake.config(), engine="local")
    assert local.query("SELECT id, name FROM data ORDER BY id").to_pylist() == [
        {"id": 2, "name": "two"},
        {"id": 3, "name": "n3"},
        {"id": 4, "name": "n4"},
        {"id": 5, "name": "n5"},
        {"id": 9, "name": "nine"},
    ]
