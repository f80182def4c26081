"""`posixlake spark start|stop|status` and commands on a Spark Connect server.

One real Connect server (PySpark's own) serves this module; every command runs as a
subprocess, because PySpark runs one mode per process and this test process runs a
local Spark. The server has a state directory of its own, so that the in-process
CLI tests (which look for a running server there) never find it.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from posixlake import DatabaseOps
from tests.cli._subprocess import posixlake

pytestmark = pytest.mark.spark


@dataclass(frozen=True)
class Server:
    url: str
    port: int
    env: dict[str, str]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server started with `posixlake spark start` (a failure to start fails the tests)."""
    env = {"POSIXLAKE_STATE_DIR": str(tmp_path_factory.mktemp("connect-state"))}
    port = _free_port()
    started = posixlake(
        "spark", "start", "--port", str(port), "--spark-master", "local[2]", "--json", env=env
    )
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    assert info["url"] == f"sc://127.0.0.1:{port}" and info["started"] is True
    try:
        yield Server(info["url"], port, env)
    finally:
        stopped = posixlake("spark", "stop", "--port", str(port), env=env)
        assert stopped.returncode == 0, stopped.stderr


@pytest.fixture
def table(tmp_path: Path) -> str:
    path = str(tmp_path / "sales")
    with DatabaseOps.create(
        path,
        [("id", "Int64"), ("item", "String"), ("qty", "Int32")],
        primary_key="id",
        engine="local",
    ) as db:
        db.insert([{"id": i, "item": f"item{i}", "qty": i % 7} for i in range(1, 101)])
    return path


def _rows(path: str, sql: str) -> list[dict[str, object]]:
    with DatabaseOps.open(path, engine="local") as db:
        return db.query(sql).to_pylist()


def test_status_names_the_url_and_start_is_idempotent(server: Server) -> None:
    status = posixlake("spark", "status", env=server.env)
    assert status.returncode == 0, status.stderr
    assert f"running at {server.url}" in status.stdout
    listed = json.loads(posixlake("spark", "status", "--json", env=server.env).stdout)
    assert [s["url"] for s in listed] == [server.url]
    again = posixlake("spark", "start", "--port", str(server.port), env=server.env)
    assert again.returncode == 0, again.stderr
    assert f"already running at {server.url}" in again.stdout


def test_commands_use_the_running_server_and_stay_quiet(server: Server, table: str) -> None:
    """No --spark-remote: the server `posixlake spark start` runs is picked up."""
    out = posixlake(
        "-v", "query", table, "SELECT sum(qty) AS q FROM data", "--json", env=server.env
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"q": sum(i % 7 for i in range(1, 101))}]
    assert f"using the Spark Connect server at {server.url}" in out.stderr
    assert "posixlake.spark.jvm" not in out.stderr  # no JVM in the client
    quiet = posixlake("query", table, "SELECT count(*) AS n FROM data", env=server.env)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_dml_and_imports_over_connect(server: Server, table: str, tmp_path: Path) -> None:
    remote = ("--engine", "spark", "--spark-remote", server.url)
    env = {"POSIXLAKE_STATE_DIR": str(tmp_path / "no-server")}  # only the flag points there
    updated = posixlake(
        "update", table, "--set", "qty = qty + 100", "--where", "id <= 10", *remote, env=env
    )
    assert updated.returncode == 0, updated.stderr
    assert updated.stderr == ""
    deleted = posixlake("delete", table, "--where", "id > 90", *remote, env=env)
    assert deleted.returncode == 0, deleted.stderr
    assert _rows(table, "SELECT count(*) AS n, sum(qty) AS q FROM data") == [
        {"n": 90, "q": sum(i % 7 for i in range(1, 91)) + 1000}
    ]
    src = tmp_path / "in.csv"
    src.write_text("id,name\n1,a\n2,b\n3,\n")
    new = str(tmp_path / "imported")
    created = posixlake(
        "create", new, "--from-csv", str(src), "--primary-key", "id", *remote, env=env
    )
    assert created.returncode == 0, created.stderr
    assert _rows(new, "SELECT * FROM data ORDER BY id") == [
        {"id": 1, "name": "a"},
        {"id": 2, "name": "b"},
        {"id": 3, "name": None},
    ]


def _session_of(out: subprocess.CompletedProcess[str]) -> str:
    """The Connect session a ``-vv`` command ran in."""
    assert out.returncode == 0, out.stderr[-3000:]
    found = re.search(r"Spark Connect session ready on \S+;session_id=([0-9a-f-]{36})", out.stderr)
    assert found is not None, out.stderr[-3000:]
    return found.group(1)


def _slot(server: Server) -> Path:
    return Path(server.env["POSIXLAKE_STATE_DIR"]) / "spark" / f"connect-{server.port}.session-0"


def test_commands_share_a_warm_session_of_the_server(server: Server, table: str) -> None:
    """A command leases a named session of the server (its compiled code stays warm) and
    leaves it open for the next command."""
    sql = "SELECT count(*) AS n FROM data"
    first = posixlake("-vv", "query", table, sql, "--json", env=server.env)
    second = posixlake("-vv", "query", table, sql, "--json", env=server.env)
    assert json.loads(first.stdout) == json.loads(second.stdout) == [{"n": 100}]
    assert _session_of(first) == _session_of(second) == _slot(server).read_text()


def test_a_closed_shared_session_is_replaced(server: Server, table: str) -> None:
    """The server closed the leased session (an idle timeout): the next command gets a
    new one, without an error."""
    ran = posixlake("query", table, "SELECT 1 AS one", "--json", env=server.env)
    assert ran.returncode == 0, ran.stderr
    old = _slot(server).read_text()
    close = (
        "from pyspark.sql.connect.session import SparkSession\n"
        f"SparkSession.builder.remote({server.url + '/;session_id=' + old!r}).create().stop()\n"
    )
    closed = subprocess.run(
        [sys.executable, "-c", close], capture_output=True, text=True, check=False
    )
    assert closed.returncode == 0, closed.stderr
    again = posixlake(
        "-vv", "query", table, "SELECT count(*) AS n FROM data", "--json", env=server.env
    )
    assert json.loads(again.stdout) == [{"n": 100}]
    assert _session_of(again) == _slot(server).read_text() != old


def test_statements_that_change_a_session_run_in_their_own(server: Server, table: str) -> None:
    """SET, CREATE TEMPORARY VIEW... do not run in a shared session: nothing they leave
    reaches the next command."""
    made = posixlake(
        "query", table, "CREATE TEMPORARY VIEW leaked AS SELECT 1 AS x", env=server.env
    )
    assert made.returncode == 0, made.stderr
    later = posixlake("query", table, "SELECT * FROM leaked", env=server.env)
    assert later.returncode == 1 and "leaked" in later.stderr, later.stderr


def test_decimals_are_exact_over_connect(server: Server, table: str) -> None:
    """Sessions the command line opens on a Connect server compute decimals as the local
    engine does (Spark's default would round this sum to 6 places: 2.000000)."""
    sql = "SELECT CAST(1.0000000001 AS DECIMAL(38,10)) + CAST(1 AS DECIMAL(38,0)) AS x"
    for flags in ((), ("--spark-remote", server.url)):  # a leased session, one of its own
        out = posixlake("query", table, sql, "--json", *flags, env=server.env)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == [{"x": "2.0000000001"}]


def test_a_spark_error_over_connect_is_one_line(server: Server, table: str) -> None:
    out = posixlake("query", table, "SELECT nope FROM data", "--spark-remote", server.url)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("Error: query: "), out.stderr
    assert "nope" in out.stderr


def test_an_unreachable_server_fails_at_once_by_name(table: str) -> None:
    port = _free_port()  # nothing listens there
    out = posixlake("query", table, "SELECT 1", "--spark-remote", f"sc://127.0.0.1:{port}")
    assert out.returncode == 1
    assert out.stderr == (
        f"Error: no Spark Connect server at sc://127.0.0.1:{port} (Connection refused): "
        "start one with `posixlake spark start`, or use a local Spark (--spark-master local[*])\n"
    )


def test_master_and_remote_together_are_a_usage_error(table: str) -> None:
    out = posixlake(
        "query",
        table,
        "SELECT 1",
        "--spark-master",
        "local[1]",
        "--spark-remote",
        "sc://127.0.0.1:15002",
    )
    assert out.returncode == 2
    assert "--spark-master" in out.stderr and "--spark-remote" in out.stderr


def test_a_bad_remote_url_is_refused(table: str) -> None:
    out = posixlake("query", table, "SELECT 1", "--spark-remote", "http://x:1")
    assert out.returncode == 1
    assert "is not a Spark Connect URL: use sc://HOST:PORT" in out.stderr


def test_stop_without_a_server_says_so(tmp_path: Path) -> None:
    env = {"POSIXLAKE_STATE_DIR": str(tmp_path)}
    out = posixlake("spark", "stop", "--port", "15999", env=env)
    assert (out.returncode, out.stdout) == (
        0,
        "No Spark Connect server of posixlake runs on port 15999\n",
    )
    status = posixlake("spark", "status", env=env)
    assert status.stdout.startswith("No Spark Connect server of posixlake runs")
