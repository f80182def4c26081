"""backup (full, incremental), verify, restore."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posixlake import DatabaseOps
from tests.cli.conftest import ROWS, Cli, rows, version

MORE = [{"id": 4, "item": "kiwi", "qty": 1}]


def _corrupt_one_data_file(backup: Path) -> Path:
    victim = next(p for p in sorted((backup / "files").rglob("*.parquet")))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    return victim


def test_full_backup_verify_restore(run: Cli, table: str, tmp_path: Path) -> None:
    dest = tmp_path / "bk"
    result = run.ok("backup", table, str(dest))
    assert result.stdout.startswith(
        f"Backed up {table} version 1 to {dest} (full backup): 3 rows, "
    )
    assert "Backup id: " in result.stdout
    assert f"Backing up to {dest}" in result.stderr
    verified = run.ok("verify", str(dest))
    assert verified.stdout.startswith("OK: backup ") and "(table version 1)" in verified.stdout
    assert f"Verifying {dest}" in verified.stderr
    restored = str(tmp_path / "restored")
    out = run.ok("restore", str(dest), restored).stdout
    assert out.startswith(f"Restored {restored} at version 1 from backup ")
    assert rows(restored) == ROWS


def test_incremental_chain(run: Cli, table: str, tmp_path: Path) -> None:
    full, inc = tmp_path / "full", tmp_path / "inc"
    run.ok("backup", table, str(full))
    with DatabaseOps.open(table, engine="local") as db:
        db.insert(MORE)
    meta = json.loads(
        run.ok("backup", table, str(inc), "--incremental", "--base", str(full), "--json").stdout
    )
    assert meta["kind"] == "incremental" and meta["table_version"] == 2
    assert meta["files_copied"] < meta["total_files"] and meta["total_rows"] == 4
    report = json.loads(run.ok("verify", str(inc), "--json").stdout)
    assert report["ok"] is True and report["chain"] == [str(inc), str(full)]
    restored = str(tmp_path / "restored")
    run.ok("restore", str(inc), restored)
    assert rows(restored) == ROWS + MORE


def test_restore_to_a_version_and_a_time(run: Cli, table: str, tmp_path: Path) -> None:
    with DatabaseOps.open(table, engine="local") as db:
        db.insert(MORE)
        v1_time = db.commit_time(1)
    run.ok("backup", table, str(tmp_path / "bk"))
    out = json.loads(
        run.ok(
            "restore", str(tmp_path / "bk"), str(tmp_path / "v1"), "--version", "1", "--json"
        ).stdout
    )
    assert out["version"] == 1
    assert rows(str(tmp_path / "v1")) == ROWS
    run.ok("restore", str(tmp_path / "bk"), str(tmp_path / "t1"), "--as-of", v1_time.isoformat())
    assert rows(str(tmp_path / "t1")) == ROWS and version(str(tmp_path / "t1")) == 1


def test_verify_detects_a_flipped_byte(run: Cli, table: str, tmp_path: Path) -> None:
    dest = tmp_path / "bk"
    run.ok("backup", table, str(dest))
    victim = _corrupt_one_data_file(dest)
    result = run("verify", str(dest))
    assert result.exit_code == 1
    assert result.stdout.startswith("DAMAGED: backup ")
    assert f"  corrupted: {victim}" in result.stdout
    assert (
        result.stderr.rstrip().splitlines()[-1]
        == f"Error: backup {dest} failed verification: 1 corrupted"
    )
    result = run("verify", str(dest), "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["corrupted"] == [str(victim)]


def test_restore_refuses_a_corrupted_backup(run: Cli, table: str, tmp_path: Path) -> None:
    dest = tmp_path / "bk"
    run.ok("backup", table, str(dest))
    _corrupt_one_data_file(dest)
    run.fails(1, "restore", str(dest), str(tmp_path / "restored"))
    assert not (tmp_path / "restored" / "_delta_log").exists()


def test_destinations_must_be_empty_unless_overwrite(run: Cli, table: str, tmp_path: Path) -> None:
    dest = tmp_path / "bk"
    run.ok("backup", table, str(dest))
    run.fails(1, "backup", table, str(dest))
    run.ok("backup", table, str(dest), "--overwrite")
    run.fails(1, "restore", str(dest), table)
    assert rows(table) == ROWS
    other = tmp_path / "other"
    run.ok("restore", str(dest), str(other))
    run.ok("restore", str(dest), str(other), "--overwrite")


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["backup", "{table}", "{tmp}/bk", "--incremental"], 2),
        (["backup", "{table}", "{tmp}/bk", "--workers", "0"], 2),
        (["backup", "{table}", "{tmp}/bk", "--base", "{tmp}/none"], 1),
        (["backup", "{tmp}/none", "{tmp}/bk"], 1),
        (["restore", "{tmp}/none", "{tmp}/r"], 1),
        (["restore", "{tmp}/bk", "{tmp}/r", "--version", "1", "--as-of", "2024-01-01"], 2),
        (["verify", "{tmp}/none"], 1),
    ],
)
def test_errors(run: Cli, table: str, tmp_path: Path, args: list[str], code: int) -> None:
    run.fails(code, *[a.format(table=table, tmp=tmp_path) for a in args])
    assert not (tmp_path / "bk").exists() and not (tmp_path / "r" / "_delta_log").exists()


def test_backup_of_a_table_with_users(
    run: Cli, table: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSIXLAKE_SCRYPT_LOG2_N", "10")
    monkeypatch.setenv("POSIXLAKE_NEW_PASSWORD", "admin-secret-1")
    run.ok("users", "enable", table, "--user", "admin")
    monkeypatch.delenv("POSIXLAKE_NEW_PASSWORD")
    run.fails(1, "backup", table, str(tmp_path / "bk"))
    monkeypatch.setenv("POSIXLAKE_PASSWORD", "admin-secret-1")
    run.ok("backup", table, str(tmp_path / "bk"), "--user", "admin")
    run.ok("verify", str(tmp_path / "bk"))
    monkeypatch.delenv("POSIXLAKE_PASSWORD")
    run.fails(1, "restore", str(tmp_path / "bk"), str(tmp_path / "r"))
    run.ok(
        "restore",
        str(tmp_path / "bk"),
        str(tmp_path / "r"),
        "--user",
        "admin",
        input="admin-secret-1\n",
    )
    with DatabaseOps.open(
        str(tmp_path / "r"), engine="local", credentials=("admin", "admin-secret-1")
    ) as db:
        assert db.query("SELECT * FROM data ORDER BY id").to_pylist() == ROWS
