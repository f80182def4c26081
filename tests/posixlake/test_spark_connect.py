"""The Spark engine as a Spark Connect client: arguments, mode rules, the server records.

The engine's suites run over a real Connect server in a run of their own
(``POSIXLAKE_TEST_SPARK=connect``, see tests/posixlake/conftest.py); the CLI's Connect
server is tested in tests/cli/test_spark_connect.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from posixlake import DatabaseOps
from posixlake.engines.spark import (
    SparkEngine,
    SparkUnavailableError,
    find_server,
    is_connect,
    running_servers,
    start_server,
)
from posixlake.engines.spark._connect import state_dir
from posixlake.errors import InvalidOperation
from tests.posixlake.conftest import classic_only, spark_connect_mode

pytestmark = pytest.mark.spark


def test_master_and_remote_together_are_refused() -> None:
    with pytest.raises(InvalidOperation, match=r"Spark master \(local\[1\]\) or a Spark Connect"):
        SparkEngine(master="local[1]", remote="sc://127.0.0.1:15002")


@pytest.mark.parametrize("url", ["http://host:15002", "sc:/host", "host:15002", "sc://"])
def test_a_bad_remote_url_is_refused_at_once(url: str) -> None:
    with pytest.raises(InvalidOperation, match="is not a Spark Connect URL: use sc://HOST:PORT"):
        SparkEngine(remote=url)


def test_the_session_is_the_mode_of_the_run(spark_session: Any) -> None:
    assert is_connect(spark_session) is spark_connect_mode()


@classic_only
def test_a_process_with_a_local_spark_refuses_connect_by_name(
    tmp_path: Path, spark_session: Any
) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine="local")
    db.insert([{"id": 1}])
    with (
        DatabaseOps.open(tmp_path / "t", engine="spark", remote="sc://127.0.0.1:15002") as sdb,
        pytest.raises(SparkUnavailableError, match=r"already runs a local Spark.*one mode per"),
    ):
        sdb.query("SELECT * FROM data")
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ


def test_remote_comes_from_the_environment(tmp_path: Path) -> None:
    """$POSIXLAKE_SPARK_REMOTE without a server: one clear error, in a fresh process."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine="local").close()
    code = (
        "from posixlake import DatabaseOps\n"
        "from posixlake.engines.spark import SparkUnavailableError\n"
        f"db = DatabaseOps.open({str(tmp_path / 't')!r}, engine='spark')\n"
        "try:\n"
        "    db.query('SELECT 1')\n"
        "except SparkUnavailableError as err:\n"
        "    print(err)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POSIXLAKE_SPARK", "SPARK_"))}
    env["POSIXLAKE_SPARK_REMOTE"] = f"sc://127.0.0.1:{port}"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.startswith(f"no Spark Connect server at sc://127.0.0.1:{port} "), out
    assert "posixlake spark start" in out.stdout
    assert out.stderr == ""


def test_a_dead_servers_record_is_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSIXLAKE_STATE_DIR", str(tmp_path))
    state_dir().mkdir(parents=True)
    record = state_dir() / "connect-15077.json"
    record.write_text(
        json.dumps(
            {"pid": os.getpid(), "port": 15077, "master": "local[*]", "log": "x", "started": 0.0}
        )
    )
    # this process is alive but is not a Connect server: not taken for one
    assert find_server(15077) is None
    assert not record.exists()
    assert running_servers() == []


def test_a_taken_port_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLAKE_STATE_DIR", str(tmp_path))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(InvalidOperation, match=f"port {port} on 127.0.0.1 is taken"):
            start_server(port=port)
