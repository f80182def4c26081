"""``posixlake serve ROOT --http``: the HTTP control plane of a lake. A real HTTP client
against the installed command (a subprocess) serving a real lake, read through a real NFS
client (libnfs); and against :class:`cli._control.ControlPlane` on a `LakeFs` in this
process (the table a change stream follows stays open; a table the login may not open)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli._control import ControlPlane
from cli._lake import LakeCatalog
from nfs.lake.lakefs import LakeFs
from nfs.lake.opening import tablefs_opener
from posixlake import DatabaseOps
from tests.cli._subprocess import ROOT
from tests.cli.test_http import WAIT, get, samples
from tests.cli.test_lake_cli import needs_libnfs, nfs, url
from tests.nfs.conftest import FakeClock

SCHEMA = {"id": "Int64", "name": "String"}


def make(path: Path, rows: int) -> DatabaseOps:
    db = DatabaseOps.create(path, SCHEMA, engine="local")
    db.insert([{"id": i, "name": f"n{i}"} for i in range(rows)])  # v1
    return db


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    make(root / "sales", 2).close()
    make(root / "ops" / "events", 3).close()
    return root


@pytest.fixture
def served(lake: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POSIXLAKE_", "NOTIFY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["POSIXLAKE_STATE_DIR"] = str(tmp_path / "state")
    command = [sys.executable, "-m", "cli.main", "serve", str(lake), "--port", "0", "--json"]
    with subprocess.Popen(
        [*command, "--engine", "local", "--http", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            yield proc, json.loads(line)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(WAIT)


def _json(url: str) -> Any:
    status, body, _ = get(url)
    assert status == 200, body
    return json.loads(body)


@needs_libnfs
def test_a_served_lake_has_health_tables_per_table_api_and_metrics(
    served: tuple[subprocess.Popen[str], dict[str, Any]], lake: Path
) -> None:
    proc, event = served
    assert event["event"] == "listening" and event["lake"] == str(lake)
    base = event["http"]
    assert get(base + "/healthz")[:2] == (200, b'{"status": "ok"}')
    assert _json(base + "/readyz") == {"status": "ready"}

    # every table is listed, none opened to list it
    listed = _json(base + "/api/v1/tables")
    assert [(t["name"], t["location"], t["open"], t["version"]) for t in listed] == [
        ("ops/events", str(lake / "ops" / "events"), False, None),
        ("sales", str(lake / "sales"), False, None),
    ]
    found = samples(get(base + "/metrics")[1])
    assert found[("posixlake_lake_tables", ())] == 2
    assert found[("posixlake_lake_open_tables", ())] == 0
    assert found[("posixlake_lake_tables_opened_total", ())] == 0
    assert not [k for k in found if k[0] == "posixlake_table_version"]

    # per-table endpoints, routed by the table's path under the root
    events = _json(base + "/api/v1/tables/ops/events")
    assert {k: events[k] for k in ("name", "version", "rows", "files", "status", "open")} == {
        "name": "ops/events",
        "version": 1,
        "rows": 3,
        "files": 1,
        "status": "healthy",
        "open": True,
    }
    history = _json(base + "/api/v1/tables/ops/events/history")
    assert [c["version"] for c in history] == [1, 0]
    status, body, headers = get(base + "/api/v1/tables/ops/events/changes?from_version=1")
    assert status == 200 and headers["Content-Type"] == "application/x-ndjson"
    assert sorted(json.loads(line)["id"] for line in body.splitlines()) == [0, 1, 2]
    for missing in ("nope", "ops", "nope/history", "ops/changes", "sales/data"):
        status, body, _ = get(f"{base}/api/v1/tables/{missing}")
        assert status == 404, (missing, body)

    # an NFS client reads sales: its figures join the metrics, labelled by its path
    cat = nfs("nfs-cat", url(event["port"], "/sales/data/data.csv"))
    assert cat.stdout == b"id,name\n0,n0\n1,n1\n", cat.stderr
    found = samples(get(base + "/metrics")[1])
    assert found[("posixlake_lake_open_tables", ())] == 2
    assert found[("posixlake_lake_tables_opened_total", ())] == 2
    assert found[("posixlake_table_version", (("table", "sales"),))] == 1
    assert found[("posixlake_table_version", (("table", "ops/events"),))] == 1
    assert found[("posixlake_nfs_read_bytes_total", (("table", "sales"),))] == len(cat.stdout)
    assert found[("posixlake_nfs_read_bytes_total", (("table", "ops/events"),))] == 0
    reads = (("procedure", "NFSPROC3_READ"),)
    assert found[("posixlake_nfs_call_seconds_count", reads)] >= 1
    listed = _json(base + "/api/v1/tables")
    assert [(t["name"], t["open"], t["rows"]) for t in listed] == [
        ("ops/events", True, 3),
        ("sales", True, 2),
    ]

    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["event"] == "stopped"


def test_serve_of_a_lake_prints_the_http_address(lake: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POSIXLAKE_", "NOTIFY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["POSIXLAKE_STATE_DIR"] = str(tmp_path / "state")
    command = [sys.executable, "-m", "cli.main", "serve", str(lake), "--port", "0"]
    with subprocess.Popen(
        [*command, "--engine", "local", "--http", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    ) as proc:
        try:
            assert proc.stdout is not None
            while not (line := proc.stdout.readline()).startswith("HTTP: "):
                assert line, proc.stderr.read() if proc.stderr else ""
            address = line.split()[1].removesuffix("/metrics,")
            assert get(address + "/healthz")[0] == 200
            proc.send_signal(signal.SIGINT)
            assert proc.wait(WAIT) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


# -- in this process ------------------------------------------------------------------


def _lake(root: Path, state: Path, **kw: Any) -> LakeFs:
    opener = tablefs_opener(
        str(root),
        state_dir=state,
        engine={"engine": "local"},
        tablefs={"idle_timer": False, "clock": FakeClock()},
    )
    return LakeFs(str(root), opener, state_dir=state, idle_timer=False, **kw)


def test_a_followed_table_stays_open_while_others_come_and_go(lake: Path, tmp_path: Path) -> None:
    """One table open at most: the table a change stream follows is never the one closed."""
    fs = _lake(lake, tmp_path / "state", max_open=1, keep_open=0.0)
    try:
        with ControlPlane(LakeCatalog(fs)) as plane:
            conn = http.client.HTTPConnection("127.0.0.1", plane.port, timeout=WAIT)
            conn.request("GET", "/api/v1/tables/sales/changes?from_version=2&follow=true")
            response = conn.getresponse()
            assert response.status == 200
            assert plane.feeds.wait_count(1, WAIT)
            assert _json(plane.url + "/api/v1/tables/ops/events")["rows"] == 3
            assert _json(plane.url + "/api/v1/tables/ops/events/history")[0]["version"] == 1
            assert set(fs.open_tables()) == {"sales"}  # events was closed, sales kept
            with DatabaseOps.open(lake / "sales", engine="local") as db:
                db.insert({"id": 7, "name": "seven"})  # v2, while the stream waits
            row = json.loads(response.readline())
            assert (row["_change_type"], row["id"], row["name"]) == ("insert", 7, "seven")
            conn.close()
            assert plane.feeds.wait_count(0, WAIT)
    finally:
        fs.close()


def test_a_table_the_login_may_not_open_is_403_and_still_listed(lake: Path, tmp_path: Path) -> None:
    with DatabaseOps.open(lake / "sales", engine="local") as db:
        db.enable_auth(("admin", "correct horse battery"))
    fs = _lake(lake, tmp_path / "state")
    try:
        with ControlPlane(LakeCatalog(fs)) as plane:
            status, body, _ = get(plane.url + "/api/v1/tables/sales/history")
            assert status == 403, body
            assert "sales" in json.loads(body)["error"]
            listed = _json(plane.url + "/api/v1/tables")
            assert [(t["name"], t["open"]) for t in listed] == [
                ("ops/events", False),
                ("sales", False),
            ]
            assert _json(plane.url + "/readyz") == {"status": "ready"}
    finally:
        fs.close()


def test_a_lake_whose_root_cannot_be_listed_is_not_ready(lake: Path, tmp_path: Path) -> None:
    """The lake goes on showing its last listing, but /readyz says why it is stale."""
    down: list[str] = []

    def discover() -> list[str]:
        if down:
            raise OSError(down[0])
        return ["ops/events", "sales"]

    fs = _lake(lake, tmp_path / "state", discover=discover, listing_ttl=0.0)
    try:
        with ControlPlane(LakeCatalog(fs), ready=fs.listing_failure) as plane:
            assert _json(plane.url + "/readyz") == {"status": "ready"}
            down.append("the bucket is unreachable")
            status, body, _ = get(plane.url + "/readyz")
            assert status == 503
            assert "the bucket is unreachable" in json.loads(body)["reason"]
            names = [t["name"] for t in _json(plane.url + "/api/v1/tables")]
            assert names == ["ops/events", "sales"]  # the last listing, still served
            down.clear()
            assert _json(plane.url + "/readyz") == {"status": "ready"}
    finally:
        fs.close()
