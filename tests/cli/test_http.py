"""The HTTP control plane: a real HTTP client against ``posixlake serve --http`` (a real
subprocess) and against :class:`cli._control.ControlPlane` in this process; metrics are
read with prometheus_client's own text parser."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli._control import ControlPlane, check_listen, parse_listen
from nfs.protocol.nfs3 import StableHow
from posixlake import DatabaseOps
from tests.cli.conftest import Cli

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0


def get(url: str, token: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers)


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _table(path: Path) -> DatabaseOps:
    db = DatabaseOps.create(
        str(path), {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
    )
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])  # v1
    return db


# -- posixlake serve --http, as a real process ----------------------------------------


class Served:
    def __init__(self, proc: subprocess.Popen[str], event: dict[str, Any]) -> None:
        self.proc = proc
        self.event = event
        self.url: str = event["http"]


def _serve(table: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("POSIXLAKE_HTTP")}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    with subprocess.Popen(
        [
            *(sys.executable, "-m", "cli.main", "serve", str(table), "--port", "0", "--json"),
            *("--engine", "local", "--http", "127.0.0.1:0", *extra),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**base, **(env or {})},
        cwd=ROOT,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            yield Served(proc, json.loads(line))
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(WAIT)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Served, DatabaseOps]]:
    db = _table(tmp_path / "sales")
    for s in _serve(tmp_path / "sales"):
        yield s, db


def test_health_readiness_and_metrics(served: tuple[Served, DatabaseOps]) -> None:
    s, _ = served
    assert get(s.url + "/healthz")[:2] == (200, b'{"status": "ok"}')
    status, body, _ = get(s.url + "/readyz")
    assert (status, json.loads(body)) == (200, {"status": "ready"})
    status, body, headers = get(s.url + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    found = samples(body)
    table = (("table", "sales"),)
    assert found[("posixlake_table_version", table)] == 1.0
    assert found[("posixlake_commits_total", table)] == 0.0  # none made by the server
    assert ("posixlake_commit_conflicts_total", table) in found
    assert found[("posixlake_nfs_connections", ())] == 0.0
    assert ("posixlake_nfs_received_bytes_total", ()) in found
    assert ("process_cpu_seconds_total", ()) in found


def test_tables_and_history(served: tuple[Served, DatabaseOps]) -> None:
    s, db = served
    status, body, _ = get(s.url + "/api/v1/tables")
    assert status == 200
    (table,) = json.loads(body)
    assert {k: table[k] for k in ("name", "version", "rows", "files", "status")} == {
        "name": "sales",
        "version": 1,
        "rows": 2,
        "files": 1,
        "status": "healthy",
    }
    assert table["schema"]["primary_key"] == ["id"]
    assert table["last_commit"]["version"] == 1 and table["last_commit"]["operation"] == "WRITE"
    db.delete_rows_where("id = 2")  # another writer: the server sees it
    status, body, _ = get(s.url + "/api/v1/tables/sales/history?limit=2")
    assert [(c["version"], c["operation"]) for c in json.loads(body)] == [
        (2, "DELETE"),
        (1, "WRITE"),
    ]
    assert get(s.url + "/api/v1/tables/nope/history")[0] == 404
    assert get(s.url + "/api/v1/tables/sales/history?limit=0")[0] == 400


def test_changes_stream_follows_new_commits(served: tuple[Served, DatabaseOps]) -> None:
    s, db = served
    status, body, headers = get(s.url + "/api/v1/tables/sales/changes?from_version=1")
    assert status == 200 and headers["Content-Type"] == "application/x-ndjson"
    assert [json.loads(line) for line in body.splitlines()] == [
        {
            "_commit_version": 1,
            "_commit_timestamp": json.loads(body.splitlines()[0])["_commit_timestamp"],
            "_change_type": "insert",
            "id": i,
            "name": n,
        }
        for i, n in ((1, "a"), (2, "b"))
    ]
    host, port = parse_listen(s.url.removeprefix("http://"))
    conn = http.client.HTTPConnection(host, port, timeout=WAIT)
    conn.request("GET", "/api/v1/tables/sales/changes?from_version=2&follow=true")
    response = conn.getresponse()
    assert response.status == 200
    db.update("id = 1", {"name": "A"})  # v2, committed while the stream waits
    first, second = json.loads(response.readline()), json.loads(response.readline())
    assert sorted((r["_change_type"], r["name"]) for r in (first, second)) == [
        ("update_postimage", "A"),
        ("update_preimage", "a"),
    ]
    status, body, _ = get(s.url + "/metrics")
    found = samples(body)
    assert found[("posixlake_change_feed_subscribers", (("table", "sales"),))] == 1.0
    assert found[("posixlake_change_feed_lag_versions", (("table", "sales"),))] == 0.0
    s.proc.send_signal(signal.SIGINT)  # stopping the server ends the stream
    assert response.read() == b""
    conn.close()
    assert s.proc.wait(WAIT) == 0


def test_changes_of_a_vacuumed_version_are_gone(served: tuple[Served, DatabaseOps]) -> None:
    s, db = served
    db.delete_rows_where("id = 1")
    db.vacuum(0)
    status, body, _ = get(s.url + "/api/v1/tables/sales/changes?from_version=1")
    assert status == 410
    assert "oldest version whose changes can be read is 3" in json.loads(body)["error"]


def test_a_token_is_required_when_set(tmp_path: Path) -> None:
    _table(tmp_path / "t")
    for s in _serve(tmp_path / "t", env={"POSIXLAKE_HTTP_TOKEN": "s3cret"}):
        status, _, headers = get(s.url + "/metrics")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert get(s.url + "/api/v1/tables", token="wrong")[0] == 401
        assert get(s.url + "/api/v1/tables", token="s3cret")[0] == 200
        assert get(s.url + "/metrics", token="s3cret")[0] == 200
        assert get(s.url + "/healthz")[0] == 200  # probes need no token


def test_beyond_loopback_without_a_token_is_refused(tmp_path: Path, run: Cli) -> None:
    _table(tmp_path / "t")
    result = run.fails(2, "serve", str(tmp_path / "t"), "--port", "0", "--http", "0.0.0.0:0")
    assert "needs a bearer token" in result.stderr
    with pytest.raises(ValueError, match="bearer token"):
        ControlPlane(dict, host="0.0.0.0")
    assert check_listen("0.0.0.0:8080", "t") == ("0.0.0.0", 8080)
    assert check_listen("[::1]:9", None) == ("::1", 9)
    assert parse_listen("9100") == ("127.0.0.1", 9100)


# -- ControlPlane in this process -------------------------------------------------------


def test_commit_counters_follow_the_served_table(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    with ControlPlane(lambda: {"t": db}) as plane:
        before = samples(get(plane.url + "/metrics")[1])
        db.insert({"id": 3, "name": "c"})
        db.update("id = 3", {"name": "C"})
        after = samples(get(plane.url + "/metrics")[1])
    key = (("table", "t"),)
    assert after[("posixlake_commits_total", key)] - before[("posixlake_commits_total", key)] == 2
    assert after[("posixlake_commits_total", key)] == db.get_metrics().commits
    assert after[("posixlake_rows_written_total", key)] == db.get_metrics().rows_written
    calls = after[("posixlake_operation_calls_total", (("operation", "insert"), ("table", "t")))]
    assert calls == db.get_metrics().latency_ms["insert"].count


def test_not_ready_is_503(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    with ControlPlane(lambda: {"t": db}, ready=lambda: "the NFS server is down") as plane:
        status, body, _ = get(plane.url + "/readyz")
    assert status == 503 and json.loads(body)["reason"] == "the NFS server is down"


def test_a_client_going_away_closes_its_change_stream(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    with ControlPlane(lambda: {"t": db}) as plane:
        conn = http.client.HTTPConnection("127.0.0.1", plane.port, timeout=WAIT)
        conn.request("GET", "/api/v1/tables/t/changes?from_version=2&follow=true")
        assert conn.getresponse().status == 200
        assert plane.feeds.wait_count(1, WAIT)
        conn.close()  # nothing was committed: the stream was waiting
        assert plane.feeds.wait_count(0, WAIT)


def test_nfs_calls_bytes_and_cache_hits_are_metrics(tmp_path: Path) -> None:
    """NFS calls by procedure (a latency histogram), bytes read and written through NFS,
    staged bytes and rendering cache hits: counted inside nfs/, exported by /metrics."""
    from cli._control import serving_plane
    from nfs.protocol.server import NfsServer
    from nfs.table.tablefs import TableFs
    from tests.nfs.rpcclient import RpcClient

    db = _table(tmp_path / "t")
    fs = TableFs(db, idle_timer=False, state_dir=tmp_path / "state", segment_cache=tmp_path / "s")
    with NfsServer(fs) as server:
        plane = serving_plane(db, server, ("127.0.0.1", 0), None, share=fs)
        try:
            with RpcClient("127.0.0.1", server.port) as c:
                c.mount("/")
                shown = c.read_file("/data/data.csv")
                again = c.read_file("/data/data.csv")
                changes = c.read_file("/changes.csv")
                fh = c.walk("/data/data.csv")
                c.write(fh, len(shown), b"3,c\n", StableHow.UNSTABLE)  # staged, not applied
                found = samples(get(plane.url + "/metrics")[1])
        finally:
            plane.stop()
        fs.close()
    t = (("table", "t"),)
    read = found[("posixlake_nfs_read_bytes_total", t)]
    assert read == len(shown) + len(again) + len(changes)
    assert found[("posixlake_nfs_written_bytes_total", t)] == 4
    assert found[("posixlake_nfs_staged_writers", t)] == 1
    assert found[("posixlake_nfs_staged_bytes", t)] == len(shown) + 4
    assert found[("posixlake_nfs_render_cache_hits_total", t)] >= 1  # the second read
    assert found[("posixlake_nfs_changes_csv_bytes", t)] == len(changes)
    reads = (("procedure", "NFSPROC3_READ"),)
    assert found[("posixlake_nfs_call_seconds_count", reads)] == 3
    assert found[("posixlake_nfs_call_seconds_bucket", (("le", "+Inf"), *reads))] == 3
    assert found[("posixlake_nfs_call_seconds_sum", reads)] > 0
    assert found[("posixlake_nfs_call_seconds_count", (("procedure", "NFSPROC3_WRITE"),))] == 1
    assert found[("posixlake_nfs_call_seconds_count", (("procedure", "MOUNTPROC3_MNT"),))] == 1
    assert found[("posixlake_nfs_call_failures_total", reads)] == 0
