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
from posixlake.engines.spark._leases import SESSION_SLOTS, lease_session, renew_session
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


def test_a_named_session_is_leased_to_one_process_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands share a server's named sessions (warm generated code), never at once."""
    monkeypatch.setenv("POSIXLAKE_STATE_DIR", str(tmp_path))
    url = "sc://127.0.0.1:15071"
    mine = lease_session(url, 15071)
    assert mine is not None and mine.startswith(f"{url}/;session_id=")
    assert lease_session(url, 15071) == mine  # one lease per process, for its lifetime
    holder = (
        "import sys\n"
        "from posixlake.engines.spark import lease_session\n"
        f"print(lease_session({url!r}, 15071), flush=True)\n"
        "sys.stdin.read()\n"  # holds the lease until told to exit
    )
    env = {**os.environ, "POSIXLAKE_STATE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", holder],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(SESSION_SLOTS)
    ]
    try:
        got = [p.stdout.readline().strip() for p in procs if p.stdout is not None]
    finally:
        for p in procs:
            p.communicate("")
    leased = [g for g in got if g != "None"]
    assert len(leased) == SESSION_SLOTS - 1 and got.count("None") == 1  # all slots taken
    assert len({mine, *leased}) == SESSION_SLOTS
    # the leases end with their processes: the sessions (their ids) stay for the next ones
    again = subprocess.run(
        [sys.executable, "-c", holder], input="", capture_output=True, text=True, env=env
    )
    assert again.stdout.strip() in leased


def test_a_closed_session_is_renewed_in_its_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSIXLAKE_STATE_DIR", str(tmp_path))
    url = "sc://127.0.0.1:15072"
    leased = lease_session(url, 15072)
    assert leased is not None
    renewed = renew_session(leased)
    assert renewed is not None and renewed != leased
    assert renewed.startswith(f"{url}/;session_id=")
    assert lease_session(url, 15072) == renewed
    slot = state_dir() / "connect-15072.session-0"
    assert renewed.endswith(slot.read_text())
    assert renew_session(f"{url}/;session_id=00000000-0000-4000-8000-000000000000") is None
