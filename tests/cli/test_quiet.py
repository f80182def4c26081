"""Quiet by default: a command on a local Spark prints no JVM or PySpark noise; an engine
error is one `Error:` line; `-v` shows Spark's own log. Run as real subprocesses: the JVM
and PySpark write on the process's stderr, which CliRunner does not see."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posixlake import DatabaseOps
from tests.cli._subprocess import posixlake
from tests.cli.conftest import Cli

SPARK = ("--engine", "spark", "--spark-master", "local[1]")
NOISE = re.compile(r"WARN|log4j|Exception|\tat |SLF4J|incubator|Traceback", re.IGNORECASE)


@pytest.fixture
def table(tmp_path: Path) -> str:
    path = str(tmp_path / "t")
    with DatabaseOps.create(path, [("id", "Int64"), ("name", "String")], engine="local") as db:
        db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    return path


@pytest.mark.spark
def test_a_spark_command_prints_only_its_result(table: str) -> None:
    out = posixlake("query", table, "SELECT count(*) AS n FROM data", "--json", *SPARK)
    assert out.returncode == 0, out.stderr
    assert out.stdout == '[{"n": 2}]\n'
    assert out.stderr == "", out.stderr


@pytest.mark.spark
def test_a_spark_error_is_one_line_and_v_shows_the_spark_log(table: str) -> None:
    out = posixlake("query", table, "SELECT nope FROM data", *SPARK)
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: query: "), out.stderr
    assert "nope" in lines[0] and not NOISE.search(out.stderr)
    verbose = posixlake("-v", "query", table, "SELECT 1 AS x", *SPARK)
    assert verbose.returncode == 0, verbose.stderr
    assert "posixlake.spark.jvm" in verbose.stderr  # the JVM's own lines, through our log


def test_v_adds_the_engines_whole_message(run: Cli, table: str) -> None:
    plain = run.fails(1, "query", table, "SELECT nope FROM data", "--engine", "local")
    verbose = run("-v", "query", table, "SELECT nope FROM data", "--engine", "local")
    assert verbose.exit_code == 1
    assert verbose.stderr.endswith(plain.stderr)
    detail = verbose.stderr[: -len(plain.stderr)]
    assert detail.startswith("INFO cli.main: query failed: "), verbose.stderr
    assert "nope" in detail
