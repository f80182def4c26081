"""One smoke test of the command line on the Spark engine (a real local Spark session)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, rows

pytestmark = pytest.mark.spark


def test_import_and_query_on_spark(run: Cli, tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text("id,item,qty\n1,apple,3\n2,pear,5\n3,fig,\n")
    path = str(tmp_path / "t")
    spark = ("--engine", "spark", "--spark-master", "local[1]")
    run.ok("create", path, "--from-csv", str(src), "--primary-key", "id", *spark)
    out = run.ok("query", path, "SELECT item, qty FROM data ORDER BY id", "--json", *spark).stdout
    assert json.loads(out) == [
        {"item": "apple", "qty": 3},
        {"item": "pear", "qty": 5},
        {"item": "fig", "qty": None},
    ]
    assert (
        run.ok("delete", path, "--where", "qty IS NULL", *spark).stdout
        == "Deleted 1 row (version 2)\n"
    )
    assert [r["id"] for r in rows(path)] == [1, 2]
