"""``posixlake tail``: a table's changes like ``tail`` / ``tail -f`` (real processes for -f,
Ctrl-C and a closed pipe)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from posixlake import DatabaseOps
from tests.cli.conftest import Cli

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0


@pytest.fixture
def sales(tmp_path: Path) -> DatabaseOps:
    db = DatabaseOps.create(
        str(tmp_path / "sales"), {"id": "Int64", "item": "String"}, primary_key="id", engine="local"
    )
    db.insert([{"id": 1, "item": "apple"}, {"id": 2, "item": "pear, green"}])  # v1
    db.update("id = 1", {"item": "Apple"})  # v2
    return db


def _stamp(db: DatabaseOps, version: int) -> str:
    ts = db.commit_time(version)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_tail_prints_the_latest_commit(run: Cli, sales: DatabaseOps) -> None:
    out = run.ok("tail", sales.uri).stdout
    t2 = _stamp(sales, 2)
    assert out == (
        "_commit_version,_commit_timestamp,_change_type,id,item\n"
        f"2,{t2},update_preimage,1,apple\n"
        f"2,{t2},update_postimage,1,Apple\n"
    )


def test_tail_from_a_version_as_jsonl(run: Cli, sales: DatabaseOps) -> None:
    out = run.ok("tail", sales.uri, "--from-version", "1", "--format", "jsonl").stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["_commit_version"], r["_change_type"], r["id"], r["item"]) for r in rows] == [
        (1, "insert", 1, "apple"),
        (1, "insert", 2, "pear, green"),
        (2, "update_preimage", 1, "apple"),
        (2, "update_postimage", 1, "Apple"),
    ]


def test_tail_csv_quotes_and_repeats_the_header_when_columns_change(
    run: Cli, sales: DatabaseOps
) -> None:
    sales.add_columns({"qty": "Int32"})  # v3
    sales.insert({"id": 3, "item": "fig", "qty": 4})  # v4
    lines = run.ok("tail", sales.uri, "--from-version", "1").stdout.splitlines()
    assert lines[0] == "_commit_version,_commit_timestamp,_change_type,id,item"
    assert lines[2].endswith(',insert,2,"pear, green"')
    assert lines[5] == "_commit_version,_commit_timestamp,_change_type,id,item,qty"
    assert lines[6].endswith(",insert,3,fig,4")
    assert len(lines) == 7


def test_tail_of_a_vacuumed_version_fails_clearly(run: Cli, sales: DatabaseOps) -> None:
    sales.delete_rows_where("id = 2")  # v3 removes v1's file
    sales.vacuum(0)
    result = run.fails(1, "tail", sales.uri, "--from-version", "1")
    assert "oldest version whose changes can be read is" in result.stderr


def _follow(table: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with subprocess.Popen(
        [sys.executable, "-m", "cli.main", "tail", "-f", table, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    ) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(WAIT)


def test_tail_f_prints_commits_as_they_land_and_ctrl_c_exits_0(sales: DatabaseOps) -> None:
    for proc in _follow(sales.uri, "--format", "jsonl"):
        assert proc.stdout is not None and proc.stderr is not None
        assert json.loads(proc.stdout.readline())["_change_type"] == "update_preimage"
        assert json.loads(proc.stdout.readline())["_change_type"] == "update_postimage"
        sales.insert({"id": 9, "item": "kiwi"})  # committed while tail waits
        row = json.loads(proc.stdout.readline())
        assert (row["_commit_version"], row["_change_type"], row["id"]) == (3, "insert", 9)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT) == 0
        assert proc.stderr.read() == b""


def test_tail_f_into_a_closed_pipe_exits_quietly(sales: DatabaseOps) -> None:
    for proc in _follow(sales.uri):
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(b"_commit_version,")
        proc.stdout.close()  # the reader goes away (`| head -1`)
        sales.insert({"id": 9, "item": "kiwi"})  # its next write fails: EPIPE
        assert proc.wait(WAIT) == 0
        assert proc.stderr.read() == b""
