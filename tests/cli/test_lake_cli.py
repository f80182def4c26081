"""``posixlake serve ROOT`` where ROOT is a directory of tables: the lake; a table keeps
its own layout. The installed command (a subprocess), a real NFS client (libnfs)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli._lake import lake_root
from posixlake import DatabaseOps
from tests.cli._subprocess import ROOT

LIBNFS = all(shutil.which(t) for t in ("nfs-ls", "nfs-cat", "nfs-cp"))
needs_libnfs = pytest.mark.skipif(
    not LIBNFS, reason="libnfs-utils not installed (apt install libnfs-utils)"
)


LOCAL = ("--engine", "local")


def url(port: int, path: str) -> str:
    return f"nfs://127.0.0.1{path}?version=3&nfsport={port}&mountport={port}&auto-traverse-mounts=0"


def nfs(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, capture_output=True, timeout=60, check=False)


def make(path: Path, rows: int) -> None:
    with DatabaseOps.create(path, {"id": "Int64", "name": "String"}, engine="local") as db:
        db.insert([{"id": i, "name": f"n{i}"} for i in range(rows)])


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    make(root / "sales", 2)
    make(root / "ops" / "events", 3)
    return root


def test_a_directory_of_tables_is_a_lake_and_a_table_is_not(lake: Path, tmp_path: Path) -> None:
    assert lake_root(str(lake)) == str(lake)
    assert lake_root(str(lake / "ops")) == str(lake / "ops")
    assert lake_root(str(lake / "sales")) is None  # a table: today's share
    assert lake_root(str(tmp_path / "missing")) is None  # opening it reports the error


@pytest.fixture
def served(lake: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POSIXLAKE_", "NOTIFY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["POSIXLAKE_STATE_DIR"] = str(tmp_path / "state")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "serve", str(lake), "--port", "0", "--json", *LOCAL],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    try:
        event = json.loads(first)
    except ValueError:
        proc.kill()
        pytest.fail(f"serve printed {first!r}; stderr: {proc.communicate(timeout=30)[1]}")
    assert event["event"] == "listening" and event["lake"] == str(lake)
    assert event["tables"] == 2
    try:
        yield proc, int(event["port"])
    finally:
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        proc.wait(timeout=30)


@needs_libnfs
def test_serve_of_a_lake_root_shows_every_table(
    served: tuple[subprocess.Popen[str], int], lake: Path, tmp_path: Path
) -> None:
    proc, port = served
    listing = nfs("nfs-ls", url(port, "/"))
    assert listing.returncode == 0, listing.stderr
    assert {line.split()[-1] for line in listing.stdout.decode().splitlines()} >= {"ops", "sales"}
    cat = nfs("nfs-cat", url(port, "/ops/events/data/data.csv"))
    assert cat.stdout == b"id,name\n0,n0\n1,n1\n2,n2\n", cat.stderr
    new = tmp_path / "new.csv"
    new.write_text("id,name\n0,n0\n1,n1\n5,five\n")
    copied = nfs("nfs-cp", str(new), url(port, "/sales/data/data.csv"))
    assert copied.returncode == 0, copied.stderr
    proc.send_signal(signal.SIGTERM)  # within the idle period: kept for the next start
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    last = json.loads(out.strip().splitlines()[-1])
    assert last == {"event": "stopped", "lake": str(lake), "unfinished_writes": 1}


def test_map_uid_on_a_lake_refuses_the_tables_without_users(lake: Path, tmp_path: Path) -> None:
    import click

    from cli._lake import open_lake
    from cli._serve import per_user_vfs
    from cli.main import cli
    from nfs.protocol.nfs3 import Nfsstat3, Sattr3
    from nfs.protocol.rpc import CallContext
    from nfs.protocol.vfs import NfsError
    from nfs.table.access import UserMap

    users = UserMap.parse(["1000=ana"])
    with click.Context(cli).scope():
        fs = open_lake(
            str(lake),
            read_only=False,
            state_dir=str(tmp_path / "state"),
            wrap=lambda db, table: per_user_vfs(db, table, users),
            idle_timer=False,
        )
    try:
        sales = fs.lookup(fs.root_dir(), "sales", CallContext.local(1000, 1000))
        with pytest.raises(NfsError) as exc:  # sales has no users: --map-uid cannot apply
            fs.lookup(sales, "data", CallContext.local(1000, 1000))
        assert exc.value.status == Nfsstat3.NFS3ERR_ACCES
        assert "has no users" in str(exc.value)
        # no table's role grants making a new table: mkdir at the lake level is refused
        with pytest.raises(NfsError) as exc:
            fs.mkdir(fs.root_dir(), "made", Sattr3(), CallContext.local(1000, 1000))
        assert exc.value.status == Nfsstat3.NFS3ERR_ACCES
        assert not (lake / "made").exists()
    finally:
        fs.close()


FAKE = """#!/bin/sh
{ printf '%s\\n' "$(basename "$0")" "$@"; echo --; } >> "$FAKE_LOG"
exit 0
"""


def test_mount_of_a_lake_root_serves_the_lake_and_unmounts(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    for name in ("fake-mount", "fake-umount"):
        prog = tmp_path / name
        prog.write_text(FAKE)
        prog.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POSIXLAKE_", "NOTIFY_"))}
    env.update(
        FAKE_LOG=str(log),
        POSIXLAKE_MOUNT_PROGRAM=str(tmp_path / "fake-mount"),
        POSIXLAKE_UMOUNT_PROGRAM=str(tmp_path / "fake-umount"),
        POSIXLAKE_STATE_DIR=str(tmp_path / "state"),
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    where = str(tmp_path / "mnt")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "mount", str(lake), where, "--port", "0", *LOCAL],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith(f"Mounted {lake} at {where} (NFSv4.0 on 127.0.0.1:"), first
    port = int(first.rsplit(":", 1)[1].rstrip(")\n"))
    if LIBNFS:  # the server serves the lake while mounted
        listing = nfs("nfs-ls", url(port, "/"))
        assert {line.split()[-1] for line in listing.stdout.decode().splitlines()} >= {
            "ops",
            "sales",
        }
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"Unmounted; stopped serving {lake}." in out
    assert "fake-umount" in log.read_text()


def test_serving_an_empty_directory_warns_that_it_is_an_empty_lake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import click

    from cli._lake import open_lake
    from cli.main import cli

    (tmp_path / "empty").mkdir()
    with click.Context(cli).scope():
        fs = open_lake(str(tmp_path / "empty"), read_only=False, state_dir=str(tmp_path / "s"))
    try:
        assert fs.tables() == []
        assert "holds none (yet): serving it as an empty lake" in capsys.readouterr().err
    finally:
        fs.close()
