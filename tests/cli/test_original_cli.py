"""The original posixlake's commands and flags: mount / unmount / status, create's flags and
types, the storage flags with secrets on the command line, migrate.

``mount`` runs the OS mount program: here ``$POSIXLAKE_MOUNT_PROGRAM`` names a fake one
that records its arguments, around a real server that a real NFS client (libnfs) reads.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from cli._mount import DEFAULT_PORT, find_mount, mount_argv, mount_attempts, mount_first
from posixlake import DatabaseOps, security
from posixlake.storage import AzureConfig
from tests.cli.conftest import ROWS, Cli, rows, unchanged, version
from tests.storage.servers import LocalServer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "original"
LIBNFS = all(shutil.which(t) for t in ("nfs-ls", "nfs-cat", "nfs-cp"))
CSV = "id,item,qty\n1,apple,3\n2,pear,5\n3,fig,\n"
FAKE = """#!/bin/sh
{ printf '%s\\n' "$(basename "$0")" "$@"; echo --; } >> "$FAKE_LOG"
exit "${FAKE_EXIT:-0}"
"""


@pytest.fixture
def fake_programs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fake mount and umount programs; returns the log of their argument lists."""
    log = tmp_path / "calls.log"
    for name in ("fake-mount", "fake-umount"):
        prog = tmp_path / name
        prog.write_text(FAKE)
        prog.chmod(prog.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("POSIXLAKE_MOUNT_PROGRAM", str(tmp_path / "fake-mount"))
    monkeypatch.setenv("POSIXLAKE_UMOUNT_PROGRAM", str(tmp_path / "fake-umount"))
    return log


def calls(log: Path) -> list[list[str]]:
    """The argument lists the fake programs were called with, program name first."""
    if not log.exists():
        return []
    out: list[list[str]] = [[]]
    for line in log.read_text().splitlines():
        if line == "--":
            out.append([])
        else:
            out[-1].append(line)
    return [c for c in out if c]


def start_mount(table: str, mount_point: str, *extra: str) -> subprocess.Popen[str]:
    """Run ``posixlake mount`` in a child process (its own signal handling)."""
    return subprocess.Popen(
        [
            *(sys.executable, "-c", "from cli.main import main; main()"),
            *("mount", table, mount_point, "--port", "0", "--engine", "local", *extra),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _port(argv: list[str]) -> int:
    opts = argv[argv.index("-o") + 1]
    return int(next(o for o in opts.split(",") if o.startswith("port=")).split("=")[1])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_mount_serves_mounts_waits_and_unmounts(
    table: str, tmp_path: Path, fake_programs: Path, sig: signal.Signals
) -> None:
    where = str(tmp_path / "mnt" / "sales")
    proc = start_mount(table, where)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # printed once the mount program has returned
    assert first.startswith(f"Mounted {table} at {where} (NFSv4.0 on 127.0.0.1:"), first
    assert os.path.isdir(where)  # created
    (mounted,) = calls(fake_programs)  # NFSv4.0 worked: no NFSv3 mount tried
    port = _port(mounted)
    assert mounted == [
        "fake-mount",
        "-t",
        "nfs",
        "-o",
        f"vers=4.0,proto=tcp,port={port}",
        "127.0.0.1:/",
        where,
    ]
    if LIBNFS:  # the server is up while mounted: a real client reads the table
        url = f"nfs://127.0.0.1/data/data.csv?version=3&nfsport={port}&mountport={port}"
        got = subprocess.run(["nfs-cat", url], capture_output=True, timeout=60, check=False)
        assert got.stdout.decode() == CSV
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Unmounted; stopped." in out
    assert calls(fake_programs)[1] == ["fake-umount", where]
    assert rows(table) == ROWS


def test_mount_failure_keeps_serving(
    table: str, tmp_path: Path, fake_programs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_EXIT", "32")
    proc = start_mount(table, str(tmp_path / "mnt"))
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(f"Serving {table} over NFSv3 on 127.0.0.1:")
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert "Warning: mounting failed (exit 32)" in err and "mount by hand with: " in err
    tried = calls(fake_programs)  # NFSv4.0, then NFSv3; nothing to unmount
    assert [c[0] for c in tried] == ["fake-mount", "fake-mount"]
    assert [c[4].split(",")[0] for c in tried] == ["vers=4.0", "vers=3"]


def test_mount_reports_a_failed_unmount(
    table: str, tmp_path: Path, fake_programs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    umount = tmp_path / "fake-umount"
    umount.write_text(FAKE.replace('"${FAKE_EXIT:-0}"', "16"))
    proc = start_mount(table, str(tmp_path / "mnt"))
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert err.strip().splitlines()[-1].startswith("Error: unmount of ")


def test_mount_defaults(run: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    assert DEFAULT_PORT == 12049
    assert "[default: 12049;" in " ".join(run.ok("mount", "--help").stdout.split())
    monkeypatch.delenv("POSIXLAKE_MOUNT_PROGRAM", raising=False)
    argv = mount_argv(12049, "/mnt/pl")
    assert argv[-7:] == [
        "mount",
        "-t",
        "nfs",
        "-o",
        "vers=3,proto=tcp,port=12049,mountport=12049,mountproto=tcp,nolock,noacl",
        "127.0.0.1:/",
        "/mnt/pl",
    ]
    assert argv[0] == ("mount" if os.geteuid() == 0 else "sudo")
    mac = mount_argv(12049, "/Volumes/pl", platform="darwin")
    assert mac[-5:] == [
        "mount_nfs",
        "-o",
        "vers=3,tcp,port=12049,mountport=12049,nolocks,resvport",
        "127.0.0.1:/",
        "/Volumes/pl",
    ]


def test_mount_tries_nfsv4_on_macos_then_nfsv3(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS: ``mount_nfs -o vers=4.0`` (no MOUNT protocol: no mountport; locks are NFSv4
    operations: no nolocks), then the NFSv3 mount; Linux likewise with ``mount -t nfs``."""
    monkeypatch.delenv("POSIXLAKE_MOUNT_PROGRAM", raising=False)
    mac = mount_attempts(12049, "/Volumes/pl", platform="darwin")
    assert [(argv[-5:], vers) for argv, vers in mac] == [
        (
            ["mount_nfs", "-o", "vers=4.0,tcp,port=12049,resvport", "127.0.0.1:/", "/Volumes/pl"],
            "4.0",
        ),
        (
            [
                "mount_nfs",
                "-o",
                "vers=3,tcp,port=12049,mountport=12049,nolocks,resvport",
                "127.0.0.1:/",
                "/Volumes/pl",
            ],
            "3",
        ),
    ]
    linux = mount_attempts(12049, "/mnt/pl", platform="linux")
    assert [(argv[-3].split(",")[0], vers) for argv, vers in linux] == [
        ("vers=4.0", "4.0"),
        ("vers=3", "3"),
    ]
    other = mount_attempts(12049, "/mnt/pl", platform="freebsd14")  # v3 only
    assert [vers for _argv, vers in other] == ["3"]


@pytest.mark.parametrize("v4_works", [True, False])
def test_mount_first_falls_back_to_nfsv3_on_macos(
    tmp_path: Path, fake_programs: Path, monkeypatch: pytest.MonkeyPatch, v4_works: bool
) -> None:
    """The NFSv4.0 mount is tried first; when it fails (an older macOS, a refused vers=4)
    the NFSv3 mount is run, and its command is what is reported."""
    if not v4_works:  # the fake mount_nfs refuses vers=4.0, as a client without NFSv4
        prog = tmp_path / "fake-mount"
        prog.write_text(FAKE.replace("exit ", 'case "$*" in *vers=4.0*) exit 71;; esac\nexit '))
    where = str(tmp_path / "pl")
    argv, vers, code, _detail = mount_first(mount_attempts(4049, where, platform="darwin"))
    tried = calls(fake_programs)
    assert code == 0
    assert [c[2].split(",")[0] for c in tried] == (
        ["vers=4.0"] if v4_works else ["vers=4.0", "vers=3"]
    )
    assert vers == ("4.0" if v4_works else "3")
    assert argv[1:] == tried[-1][1:] and argv[-1] == where


def test_mount_of_a_missing_table_fails_before_serving(
    run: Cli, tmp_path: Path, fake_programs: Path
) -> None:
    run.fails(1, "mount", str(tmp_path / "none"), str(tmp_path / "mnt"), "--port", "0")
    assert calls(fake_programs) == []


def test_unmount(
    run: Cli, tmp_path: Path, fake_programs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run.ok("unmount", str(tmp_path)).stdout == f"Successfully unmounted {tmp_path}\n"
    assert calls(fake_programs) == [["fake-umount", str(tmp_path)]]
    monkeypatch.setenv("FAKE_EXIT", "1")
    run.fails(1, "unmount", str(tmp_path))


def test_status(run: Cli, tmp_path: Path) -> None:
    assert run.ok("status", "/proc").stdout.startswith("mounted: /proc is an active mount (proc")
    assert (
        run.ok("status", str(tmp_path)).stdout
        == f"not mounted: {tmp_path} is not currently mounted\n"
    )
    table = "127.0.0.1:/ /mnt/my\\040share nfs rw 0 0\n"
    assert find_mount("/mnt/my share", table) == ("127.0.0.1:/", "nfs")
    assert find_mount("/mnt/my", table) is None


# -- create ----------------------------------------------------------------------------------


def test_create_on_an_existing_table_fails_before_importing(
    run: Cli, table: str, tmp_path: Path
) -> None:
    csv = tmp_path / "more.csv"
    csv.write_text("id,item,qty\n9,kiwi,1\n")
    before = (version(table), rows(table))
    for source in ("--from-csv", "--from-parquet"):
        result = run.fails(1, "create", table, source, str(csv))
        assert "Importing" not in result.stderr
        assert result.stderr == f"Error: a Delta table already exists at {table}\n"
    unchanged(table, *before)
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = run.fails(1, "create", str(afile), "--from-csv", str(csv))
    assert "Importing" not in result.stderr and "it is a file" in result.stderr


def test_create_with_the_original_type_names(run: Cli, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    run.ok(
        "create",
        path,
        "--schema",
        "id:int,n:LONG,b:bigint,t:text,v:varchar,s:string,f:float,d:double,ok:bool,i:Int64",
    )
    with DatabaseOps.open(path, engine="local") as db:
        types = {f.name: str(f.type) for f in db.to_arrow().schema}
    assert types == {
        "id": "int32",
        "n": "int64",
        "b": "int64",
        "t": "string",
        "v": "string",
        "s": "string",
        "f": "float",
        "d": "double",
        "ok": "bool",
        "i": "int64",
    }
    run.fails(2, "create", str(tmp_path / "u"), "--schema", "id:unknowntype")


def test_create_auth_with_admin_flags(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")
    path = str(tmp_path / "hr")
    result = run.ok(
        "create",
        path,
        "--schema",
        "id:Int64",
        "--auth",
        "--admin-user",
        "boss",
        "--admin-password",
        "boss-secret-9",
    )
    assert "Warning: --admin-password on the command line can be seen by other users" in (
        result.stderr
    )
    DatabaseOps.open(path, engine="local", credentials=("boss", "boss-secret-9")).close()
    monkeypatch.setenv("POSIXLAKE_ADMIN_PASSWORD", "chief-secret-9")
    other = str(tmp_path / "hr2")
    run.ok("create", other, "--schema", "id:Int64", "--auth", "--admin-user", "chief")
    DatabaseOps.open(other, engine="local", credentials=("chief", "chief-secret-9")).close()
    run.fails(2, "create", str(tmp_path / "x"), "--schema", "id:Int64", "--admin-user", "a")
    assert not (tmp_path / "x").exists()


def test_login_password_flag_warns(
    run: Cli, table: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")
    with DatabaseOps.open(table, engine="local") as db:
        db.enable_auth(("admin", "admin-secret-1"))
    result = run.ok("info", table, "--user", "admin", "--password", "admin-secret-1")
    assert "Warning: --password on the command line can be seen by other users" in result.stderr
    run.fails(1, "info", table, "--user", "admin", "--password", "wrong-secret-1")


# -- storage flags ---------------------------------------------------------------------------


@pytest.mark.s3
def test_s3_flags_of_the_original(
    run: Cli, moto_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    table = f"s3://cli-{uuid.uuid4().hex[:12]}/sales"
    flags = ["--endpoint", moto_server.endpoint, "--access-key", "testing"]
    flags += ["--secret-key", "testing"]
    result = run.ok("create", table, "--schema", "id:int, item:text", "--create-bucket", *flags)
    assert "Warning: --secret-key on the command line can be seen by other users" in (result.stderr)
    run.ok("insert", table, "--engine", "local", *flags, input="id,item\n1,a\n")
    out = run.ok(
        "query", table, "SELECT * FROM data", "--format", "csv", "--engine", "local", *flags
    )
    assert out.stdout == "id,item\n1,a\n"


@pytest.mark.azure
def test_azure_flags_of_the_original(run: Cli, azurite_server: LocalServer) -> None:
    emulator = AzureConfig(use_emulator=True)
    assert emulator.resolved().account_key
    table = f"az://cli-{uuid.uuid4().hex[:12]}/sales"
    flags = ["--endpoint", azurite_server.endpoint, "--azure-account-name", "devstoreaccount1"]
    flags += ["--azure-account-key", str(emulator.resolved().account_key)]
    result = run.ok("create", table, "--schema", "id:long", "--create-bucket", *flags)
    assert "Warning: --azure-account-key on the command line" in result.stderr
    run.ok("insert", table, "--engine", "local", *flags, input="id\n7\n")
    out = run.ok("query", table, "SELECT id FROM data", "--json", "--engine", "local", *flags)
    assert out.stdout.strip() == '[{"id": 7}]'


# -- migrate ---------------------------------------------------------------------------------


def test_migrate_a_table_of_the_original(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")
    shutil.copytree(FIXTURES / "auth", tmp_path / "auth")
    table = str(tmp_path / "auth")
    run.fails(1, "info", table)  # closed without credentials
    run.fails(2, "migrate", table)
    monkeypatch.setenv("POSIXLAKE_PASSWORD", "rita-secret-1")
    run.fails(1, "migrate", table, "--user", "rita")  # not an admin
    monkeypatch.setenv("POSIXLAKE_PASSWORD", "alice-secret-1")
    out = run.ok("migrate", table, "--user", "alice").stdout
    assert "Moved 3 users into posixlake's user store: alice, rita, wendy" in out
    assert "Stored the primary key (id)" in out
    assert "already" in run.ok("migrate", table, "--user", "alice").stdout
    monkeypatch.setenv("POSIXLAKE_PASSWORD", "rita-secret-1")
    assert '"primary_key": ["id"]' in run.ok("info", table, "--json", "--user", "rita").stdout
