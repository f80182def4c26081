"""Full and incremental backups, verification, restores (to a version or a time).

Restored tables are read back with delta-rs directly (``deltalake.DeltaTable``), so the
tests check what any Delta reader sees.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posixlake import (
    AlreadyExists,
    AuthenticationError,
    DatabaseOps,
    InvalidOperation,
    NotFound,
    PermissionDenied,
    StorageError,
    VersionError,
    security,
)
from posixlake.backup import (
    FILES_DIR,
    MANIFEST_NAME,
    BackupCorrupted,
    get_backup_metadata,
    restore,
    verify_backup,
)

SCHEMA = {"id": "Int64", "name": "String", "qty": "Int32"}


def rows_at(path: str | Path, version: int | None = None) -> list[tuple[Any, ...]]:
    """Rows of a Delta table as delta-rs reads them (sorted)."""
    dt = DeltaTable(str(path))
    if version is not None:
        dt.load_as_version(version)
    table = dt.to_pyarrow_table()
    return sorted(tuple(r.values()) for r in table.to_pylist())


def source_rows(db: DatabaseOps, version: int) -> list[tuple[Any, ...]]:
    return rows_at(db.uri, version)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[DatabaseOps]:
    """A table with history: inserts, an update, a delete, a merge, a compaction."""
    d = DatabaseOps.create(tmp_path / "table", SCHEMA, engine="local")
    d.insert([{"id": i, "name": f"n{i}", "qty": i} for i in range(5)])  # v1
    d.insert([{"id": i, "name": f"n{i}", "qty": i} for i in range(5, 9)])  # v2
    d.update("id = 1", {"name": "one"})  # v3
    d.delete_rows_where("id = 2")  # v4
    d.merge(
        [
            {"id": 3, "name": "three", "qty": 33, "_op": "UPDATE"},
            {"id": 20, "name": "x", "qty": 0, "_op": "INSERT"},
        ],
        "id",
    )  # v5
    d.optimize()  # v6
    yield d
    d.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(backup: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((backup / MANIFEST_NAME).read_text())
    return doc


def data_files(backup: Path) -> list[Path]:
    return sorted(p for p in (backup / FILES_DIR).rglob("*.parquet") if "_delta_log" not in p.parts)


# -- full backups ---------------------------------------------------------------------------


def test_full_backup_round_trip_at_every_version(db: DatabaseOps, tmp_path: Path) -> None:
    meta = db.backup(tmp_path / "bk")
    assert meta.kind == "full" and meta.table_version == db.version == 6
    assert meta.total_rows == len(source_rows(db, 6))
    assert meta.restorable_from == 0
    report = DatabaseOps.verify_backup(tmp_path / "bk")
    assert report.ok, report
    assert (
        report.files_checked == meta.total_files and report.bytes_checked == meta.total_size_bytes
    )
    res = DatabaseOps.restore(tmp_path / "bk", tmp_path / "restored")
    assert res.version == 6
    assert rows_at(tmp_path / "restored") == source_rows(db, 6)
    assert len(DeltaTable(str(tmp_path / "restored")).history()) == 7
    for v in range(7):
        target = tmp_path / f"at{v}"
        assert DatabaseOps.restore(tmp_path / "bk", target, version=v).version == v
        dt = DeltaTable(str(target))
        assert dt.version() == v  # the restored log ends at v
        assert rows_at(target) == source_rows(db, v), v
        reopened = DatabaseOps.open(target, engine="local")
        assert sorted(reopened.query("SELECT * FROM data").fetchall()) == source_rows(db, v)


def test_manifest_lists_every_file_with_size_and_sha256(db: DatabaseOps, tmp_path: Path) -> None:
    db.backup(tmp_path / "bk")
    doc = manifest(tmp_path / "bk")
    assert doc["table_version"] == 6 and doc["kind"] == "full"
    assert datetime.fromisoformat(doc["created_at"]) <= datetime.now(UTC)
    listed = {f["path"]: f for f in doc["files"]}
    on_disk = {
        str(p.relative_to(tmp_path / "bk" / FILES_DIR)): p
        for p in (tmp_path / "bk" / FILES_DIR).rglob("*")
        if p.is_file()
    }
    assert set(listed) == set(on_disk)
    for path, f in listed.items():
        assert f["size"] == on_disk[path].stat().st_size
        assert f["sha256"] == digest(on_disk[path])
    assert {f"_delta_log/{v:020d}.json" for v in range(7)} <= set(listed)
    assert "_delta_log/_last_checkpoint" not in listed
    # every data file any version up to 6 used, so older versions restore too
    live_then = set()
    for v in range(7):
        dt = DeltaTable(db.uri)
        dt.load_as_version(v)
        live_then |= {os.path.relpath(u, db.uri) for u in dt.file_uris()}
    assert live_then <= set(listed)


def test_get_backup_metadata(db: DatabaseOps, tmp_path: Path) -> None:
    made = db.backup(tmp_path / "bk")
    meta = DatabaseOps.get_backup_metadata(tmp_path / "bk")
    assert meta == made
    assert meta.timestamp == int(meta.created_at.timestamp() * 1000)
    assert meta.to_dict()["table_version"] == 6
    with pytest.raises(NotFound):
        get_backup_metadata(tmp_path / "nothing-here")


def test_a_partitioned_table_with_awkward_values(tmp_path: Path) -> None:
    d = DatabaseOps.create(
        tmp_path / "t", {"id": "Int64", "day": "String"}, engine="local", partition_by=["day"]
    )
    d.insert([{"id": 1, "day": "a b/c%"}, {"id": 2, "day": "ü=?&"}, {"id": 3, "day": None}])
    d.delete_rows_where("id = 2")
    d.backup(tmp_path / "bk")
    assert verify_backup(tmp_path / "bk").ok
    restore(tmp_path / "bk", tmp_path / "r")
    assert rows_at(tmp_path / "r") == rows_at(tmp_path / "t")
    restore(tmp_path / "bk", tmp_path / "r1", version=1)
    assert rows_at(tmp_path / "r1") == rows_at(tmp_path / "t", 1)


def test_progress_reports_bytes_up_to_the_total(db: DatabaseOps, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    meta = db.backup(tmp_path / "bk", progress=lambda done, total: seen.append((done, total)))
    assert seen[0] == (0, meta.bytes_copied)
    assert seen[-1] == (meta.bytes_copied, meta.bytes_copied)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    seen.clear()
    DatabaseOps.verify_backup(tmp_path / "bk", progress=lambda d, t: seen.append((d, t)))
    assert seen[-1][0] == seen[-1][1] == meta.total_size_bytes
    seen.clear()
    DatabaseOps.restore(tmp_path / "bk", tmp_path / "r", progress=lambda d, t: seen.append((d, t)))
    assert seen[-1][0] == seen[-1][1] > 0


def test_checkpoints_and_a_cleaned_up_log(db: DatabaseOps, tmp_path: Path) -> None:
    dt = DeltaTable(db.uri)
    dt.create_checkpoint()  # checkpoint at version 6
    db.insert({"id": 30, "name": "after", "qty": 1})  # v7
    db.backup(tmp_path / "bk")
    listed = {f["path"] for f in manifest(tmp_path / "bk")["files"]}
    assert f"_delta_log/{6:020d}.checkpoint.parquet" in listed
    restore(tmp_path / "bk", tmp_path / "r5", version=5)  # before the checkpoint
    assert rows_at(tmp_path / "r5") == source_rows(db, 5)
    assert not any("checkpoint" in p.name for p in (tmp_path / "r5" / "_delta_log").iterdir())
    restore(tmp_path / "bk", tmp_path / "r7")
    assert rows_at(tmp_path / "r7") == source_rows(db, 7)
    # the log before the checkpoint expires: versions 6.. remain restorable
    for v in range(6):
        (Path(db.uri) / "_delta_log" / f"{v:020d}.json").unlink()
    meta = db.backup(tmp_path / "bk2")
    assert meta.restorable_from == 6
    restore(tmp_path / "bk2", tmp_path / "r6", version=6)
    assert rows_at(tmp_path / "r6") == rows_at(tmp_path / "r7", 6)
    with pytest.raises(VersionError):
        restore(tmp_path / "bk2", tmp_path / "r3", version=3)


def test_files_vacuumed_before_the_backup_limit_the_restorable_versions(
    db: DatabaseOps, tmp_path: Path
) -> None:
    db.vacuum(0, enforce_retention_duration=False)  # drops files only old versions used
    meta = db.backup(tmp_path / "bk")
    assert 0 < meta.restorable_from <= 6
    assert DatabaseOps.verify_backup(tmp_path / "bk").ok
    with pytest.raises(VersionError, match="vacuumed"):
        restore(tmp_path / "bk", tmp_path / "old", version=meta.restorable_from - 1)
    assert not (tmp_path / "old").exists()
    restore(tmp_path / "bk", tmp_path / "new")
    assert rows_at(tmp_path / "new") == rows_at(db.uri)


# -- restoring to a time --------------------------------------------------------------------


def test_restore_to_a_timestamp(db: DatabaseOps, tmp_path: Path) -> None:
    db.backup(tmp_path / "bk")
    times = {c.version: c.timestamp for c in db.history()}
    # between the commits of versions 3 and 4 -> version 3
    between = times[3] + (times[4] - times[3]) / 2
    assert times[3] < times[4]
    res = DatabaseOps.restore_to_transaction(tmp_path / "bk", tmp_path / "a", between)
    assert res.version == 3 and rows_at(tmp_path / "a") == source_rows(db, 3)
    # the original's epoch milliseconds, and ISO strings
    ms = int(times[4].timestamp() * 1000)
    assert DatabaseOps.restore_to_transaction(tmp_path / "bk", tmp_path / "b", ms).version == 4
    iso = times[2].isoformat()
    assert DatabaseOps.restore(tmp_path / "bk", tmp_path / "c", as_of=iso).version == 2
    # a small int is a version
    assert DatabaseOps.restore_to_transaction(tmp_path / "bk", tmp_path / "d", 1).version == 1
    with pytest.raises(VersionError):
        DatabaseOps.restore(tmp_path / "bk", tmp_path / "e", as_of=times[0] - timedelta(days=1))
    with pytest.raises(InvalidOperation):
        DatabaseOps.restore(tmp_path / "bk", tmp_path / "f", version=1, as_of=iso)


def test_restored_log_keeps_commit_times_for_time_travel(db: DatabaseOps, tmp_path: Path) -> None:
    db.backup(tmp_path / "bk")
    restore(tmp_path / "bk", tmp_path / "r")
    src = Path(db.uri) / "_delta_log"
    dst = tmp_path / "r" / "_delta_log"
    for v in range(7):
        name = f"{v:020d}.json"
        assert (dst / name).stat().st_mtime == pytest.approx((src / name).stat().st_mtime, abs=1e-3)


# -- incremental backups --------------------------------------------------------------------


def test_incremental_backup_copies_only_new_files_and_restores(
    db: DatabaseOps, tmp_path: Path
) -> None:
    base = db.backup(tmp_path / "full")
    db.insert({"id": 40, "name": "forty", "qty": 4})  # v7
    db.delete_rows_where("id = 5")  # v8
    incr = db.backup_incremental(tmp_path / "full", tmp_path / "incr1")
    assert incr.kind == "incremental" and incr.base_backup_id == base.backup_id
    assert incr.table_version == 8
    assert 0 < incr.files_copied < incr.total_files
    base_names = {p.name for p in data_files(tmp_path / "full")}
    assert not base_names & {p.name for p in data_files(tmp_path / "incr1")}
    copied_logs = sorted(p.name for p in (tmp_path / "incr1" / FILES_DIR / "_delta_log").iterdir())
    assert copied_logs == [f"{7:020d}.json", f"{8:020d}.json"]
    db.insert({"id": 50, "name": "fifty", "qty": 5})  # v9
    incr2 = db.backup_incremental(tmp_path / "incr1", tmp_path / "incr2")
    report = DatabaseOps.verify_backup(tmp_path / "incr2")
    assert report.ok, report
    assert report.chain == (
        str(tmp_path / "incr2"),
        str(tmp_path / "incr1"),
        str(tmp_path / "full"),
    )
    assert incr2.files_copied < incr.files_copied + 3
    for v in range(10):
        target = tmp_path / f"r{v}"
        assert DatabaseOps.restore(tmp_path / "incr2", target, version=v).version == v
        assert rows_at(target) == source_rows(db, v), v


def test_a_chain_can_move_together(db: DatabaseOps, tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    db.backup(tmp_path / "old" / "full")
    db.insert({"id": 40, "name": "forty", "qty": 4})
    db.backup_incremental(tmp_path / "old" / "full", tmp_path / "old" / "incr")
    shutil.move(tmp_path / "old", tmp_path / "moved")
    assert verify_backup(tmp_path / "moved" / "incr").ok
    restore(tmp_path / "moved" / "incr", tmp_path / "r")
    assert rows_at(tmp_path / "r") == rows_at(db.uri)


def test_an_incremental_survives_a_vacuum_of_files_the_base_holds(
    db: DatabaseOps, tmp_path: Path
) -> None:
    db.backup(tmp_path / "full")
    db.vacuum(0, enforce_retention_duration=False)
    db.insert({"id": 60, "name": "sixty", "qty": 6})
    meta = db.backup_incremental(tmp_path / "full", tmp_path / "incr")
    assert meta.restorable_from == 0  # the base still has what VACUUM removed
    restore(tmp_path / "incr", tmp_path / "r2", version=2)
    assert rows_at(tmp_path / "r2") == rows_at(tmp_path / "full" / FILES_DIR, 2)


def test_incremental_bad_bases(db: DatabaseOps, tmp_path: Path) -> None:
    other = DatabaseOps.create(tmp_path / "other", SCHEMA, engine="local")
    other.insert({"id": 1, "name": "a", "qty": 1})
    other.backup(tmp_path / "other-bk")
    with pytest.raises(InvalidOperation, match="another table"):
        db.backup_incremental(tmp_path / "other-bk", tmp_path / "x")
    with pytest.raises(NotFound):
        db.backup_incremental(tmp_path / "missing", tmp_path / "y")
    db.backup(tmp_path / "full")
    doc = manifest(tmp_path / "full")
    doc["table_version"] = 1
    (tmp_path / "full" / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(BackupCorrupted, match="checksum"):
        db.backup_incremental(tmp_path / "full", tmp_path / "z")
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


# -- tampering ------------------------------------------------------------------------------


def flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture
def backup(db: DatabaseOps, tmp_path: Path) -> Path:
    db.backup(tmp_path / "bk")
    return tmp_path / "bk"


def test_a_single_flipped_byte_is_caught(backup: Path, tmp_path: Path) -> None:
    victim = data_files(backup)[0]
    flip_byte(victim)
    report = verify_backup(backup)
    assert not report.ok
    assert report.corrupted == (str(victim),)
    assert not report.missing and not report.extra
    with pytest.raises(BackupCorrupted, match=victim.name):
        restore(backup, tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_flipped_byte_in_the_log_is_caught(backup: Path, tmp_path: Path) -> None:
    victim = backup / FILES_DIR / "_delta_log" / f"{3:020d}.json"
    flip_byte(victim, 5)
    assert verify_backup(backup).corrupted == (str(victim),)
    with pytest.raises(BackupCorrupted, match=victim.name):
        restore(backup, tmp_path / "r")
    # a restore to a version before it does not need it
    restore(backup, tmp_path / "r2", version=2)


def test_a_truncated_file_is_caught(backup: Path, tmp_path: Path) -> None:
    victim = data_files(backup)[-1]
    victim.write_bytes(victim.read_bytes()[:-1])
    assert verify_backup(backup).corrupted == (str(victim),)
    with pytest.raises(BackupCorrupted, match=victim.name):
        restore(backup, tmp_path / "r")


def test_missing_and_extra_files(backup: Path, tmp_path: Path) -> None:
    victim = data_files(backup)[0]
    victim.unlink()
    (backup / FILES_DIR / "stray.parquet").write_bytes(b"x")
    (backup / "notes.txt").write_text("hello")
    report = verify_backup(backup)
    assert report.missing == (str(victim),)
    assert set(report.extra) == {
        str(backup / FILES_DIR / "stray.parquet"),
        str(backup / "notes.txt"),
    }
    assert not report.corrupted and not report.ok
    with pytest.raises(BackupCorrupted, match=f"{victim.name} is missing"):
        restore(backup, tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_an_extra_file_alone_fails_verify_but_not_restore(backup: Path, tmp_path: Path) -> None:
    (backup / FILES_DIR / "stray.bin").write_bytes(b"x")
    assert not verify_backup(backup).ok
    restore(backup, tmp_path / "r")
    assert not (tmp_path / "r" / "stray.bin").exists()


def test_an_edited_manifest_is_caught(backup: Path, tmp_path: Path) -> None:
    doc = manifest(backup)
    doc["files"][0]["sha256"] = "0" * 64
    (backup / MANIFEST_NAME).write_text(json.dumps(doc))
    report = verify_backup(backup)
    assert not report.ok and "checksum" in report.errors[0]
    assert not report.schema_valid
    with pytest.raises(BackupCorrupted, match="checksum"):
        restore(backup, tmp_path / "r")
    with pytest.raises(BackupCorrupted):
        get_backup_metadata(backup)


def test_a_manifest_rewritten_to_hide_a_file_is_caught(backup: Path) -> None:
    """Someone drops a data file and its manifest entry and recomputes the checksum."""
    from posixlake.backup.manifest import _checksum

    doc = manifest(backup)
    dropped = next(f for f in doc["files"] if f["kind"] == "data" and "removed" not in f)
    doc["files"].remove(dropped)
    doc.pop("checksum")
    doc["checksum"] = _checksum(doc)
    (backup / MANIFEST_NAME).write_text(json.dumps(doc))
    (backup / FILES_DIR / dropped["path"]).unlink()
    report = verify_backup(backup)
    assert not report.ok
    assert any(dropped["path"] in e for e in report.errors)


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"format": "other"}'])
def test_a_damaged_or_foreign_manifest(backup: Path, tmp_path: Path, content: bytes) -> None:
    (backup / MANIFEST_NAME).write_bytes(content)
    report = verify_backup(backup)
    assert not report.ok and report.errors
    with pytest.raises(BackupCorrupted):
        restore(backup, tmp_path / "r")


def test_a_missing_manifest_is_an_interrupted_backup(backup: Path, tmp_path: Path) -> None:
    (backup / MANIFEST_NAME).unlink()
    assert "interrupted" in verify_backup(backup).errors[0]
    with pytest.raises(BackupCorrupted, match="interrupted"):
        restore(backup, tmp_path / "r")


def test_a_manifest_cannot_write_outside_the_destination(backup: Path, tmp_path: Path) -> None:
    from posixlake.backup.manifest import _checksum

    doc = manifest(backup)
    evil = dict(doc["files"][0], path="../../escaped.txt")
    doc["files"].append(evil)
    doc.pop("checksum")
    doc["checksum"] = _checksum(doc)
    (backup / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(BackupCorrupted, match="unsafe"):
        restore(backup, tmp_path / "deep" / "r")
    assert not (tmp_path / "escaped.txt").exists()
    assert not verify_backup(backup).ok


def test_a_damaged_base_breaks_the_incremental(db: DatabaseOps, tmp_path: Path) -> None:
    db.backup(tmp_path / "full")
    db.insert({"id": 40, "name": "forty", "qty": 4})
    db.backup_incremental(tmp_path / "full", tmp_path / "incr")
    victim = data_files(tmp_path / "full")[0]
    flip_byte(victim)
    report = verify_backup(tmp_path / "incr")
    assert report.corrupted == (str(victim),)
    with pytest.raises(BackupCorrupted, match=victim.name):
        restore(tmp_path / "incr", tmp_path / "r")


def test_a_replaced_or_missing_base_is_caught(db: DatabaseOps, tmp_path: Path) -> None:
    db.backup(tmp_path / "full")
    db.insert({"id": 40, "name": "forty", "qty": 4})
    db.backup_incremental(tmp_path / "full", tmp_path / "incr")
    shutil.rmtree(tmp_path / "full")
    db.backup(tmp_path / "full")  # a different backup at the same place
    report = verify_backup(tmp_path / "incr")
    assert not report.ok and "not the one" in report.errors[0]
    with pytest.raises(BackupCorrupted, match="not the one"):
        restore(tmp_path / "incr", tmp_path / "r")
    shutil.rmtree(tmp_path / "full")
    assert "not found" in verify_backup(tmp_path / "incr").errors[0]


# -- destinations ---------------------------------------------------------------------------


def test_restore_refuses_a_non_empty_destination(
    backup: Path, db: DatabaseOps, tmp_path: Path
) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(AlreadyExists, match="overwrite=True"):
        restore(backup, target)
    assert (target / "keep.txt").read_text() == "mine"
    restore(backup, target, overwrite=True)
    assert not (target / "keep.txt").exists()
    assert rows_at(target) == rows_at(db.uri)


def test_an_empty_existing_destination_is_fine(backup: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    restore(backup, tmp_path / "empty")
    assert DeltaTable(str(tmp_path / "empty")).version() == 6


def test_overwrite_with_a_corrupted_backup_keeps_the_old_table(
    backup: Path, db: DatabaseOps, tmp_path: Path
) -> None:
    restore(backup, tmp_path / "live", version=3)
    flip_byte(data_files(backup)[-1])
    with pytest.raises(BackupCorrupted):
        restore(backup, tmp_path / "live", overwrite=True)
    assert rows_at(tmp_path / "live") == source_rows(db, 3)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("live")) == ["live"]


def test_backup_destination_checks(db: DatabaseOps, tmp_path: Path) -> None:
    db.backup(tmp_path / "bk")
    with pytest.raises(AlreadyExists):
        db.backup(tmp_path / "bk")
    again = db.backup(tmp_path / "bk", overwrite=True)
    assert verify_backup(tmp_path / "bk").backup_id == again.backup_id
    with pytest.raises(InvalidOperation, match="inside the table"):
        db.backup(Path(db.uri) / "backups" / "b1")
    assert not (Path(db.uri) / "backups").exists()


def test_missing_backups_and_bad_versions(backup: Path, tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        verify_backup(tmp_path / "nope")
    with pytest.raises(NotFound):
        restore(tmp_path / "nope", tmp_path / "r")
    for bad in (7, -1):
        with pytest.raises(VersionError):
            restore(backup, tmp_path / "r", version=bad)
    with pytest.raises(VersionError):
        restore(backup, tmp_path / "r", version="3")  # type: ignore[arg-type]
    with pytest.raises(InvalidOperation, match="overlap"):
        restore(backup, backup / "inside")
    assert not (tmp_path / "r").exists()


# -- consistency under concurrent writers ---------------------------------------------------


def test_writes_during_the_copy_do_not_leak_into_the_backup(
    db: DatabaseOps, tmp_path: Path
) -> None:
    writer = DatabaseOps.open(db.uri, engine="local")
    pinned = db.version
    expected = source_rows(db, pinned)
    fired = threading.Event()

    def meddle(done: int, total: int) -> None:
        if not fired.is_set():  # once the copy has started
            fired.set()
            writer.insert([{"id": 100 + i, "name": "late", "qty": i} for i in range(20)])
            writer.delete_rows_where("id < 4")
            writer.optimize()
            writer.update(None, {"qty": 0})

    meta = db.backup(tmp_path / "bk", progress=meddle, workers=1)
    assert fired.is_set() and writer.version == pinned + 4
    assert meta.table_version == pinned
    assert verify_backup(tmp_path / "bk").ok
    restore(tmp_path / "bk", tmp_path / "r")
    assert rows_at(tmp_path / "r") == expected
    assert DeltaTable(str(tmp_path / "r")).version() == pinned


def test_a_backup_while_another_thread_keeps_writing(db: DatabaseOps, tmp_path: Path) -> None:
    writer = DatabaseOps.open(db.uri, engine="local")
    stop = threading.Event()
    started = threading.Event()
    errors: list[BaseException] = []

    def keep_writing() -> None:
        i = 0
        try:
            while not stop.is_set():
                writer.insert({"id": 1000 + i, "name": "w", "qty": i})
                i += 1
                started.set()
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)
            started.set()

    thread = threading.Thread(target=keep_writing)
    thread.start()
    try:
        assert started.wait(30)
        metas = [db.backup(tmp_path / f"bk{n}") for n in range(3)]
    finally:
        stop.set()
        thread.join()
    assert not errors
    for n, meta in enumerate(metas):
        assert verify_backup(tmp_path / f"bk{n}").ok
        restore(tmp_path / f"bk{n}", tmp_path / f"r{n}")
        assert rows_at(tmp_path / f"r{n}") == source_rows(db, meta.table_version)


def test_a_live_file_vanishing_during_the_copy_fails_the_backup(
    db: DatabaseOps, tmp_path: Path
) -> None:
    victim = sorted(Path(db.uri).glob("*.parquet"))
    live = {Path(u) for u in DeltaTable(db.uri).file_uris()}
    target = next(p for p in victim if p in live)

    def vanish(done: int, total: int) -> None:
        if target.exists():
            target.rename(target.with_suffix(".moved"))

    with pytest.raises(StorageError, match="vanished") as err:
        db.backup(tmp_path / "bk", progress=vanish, workers=1)
    assert target.name in str(err.value)
    assert not (tmp_path / "bk").exists() or not any((tmp_path / "bk").rglob("*.json"))


def test_an_old_file_vacuumed_during_the_copy_only_limits_old_versions(
    db: DatabaseOps, tmp_path: Path
) -> None:
    live = {Path(u) for u in DeltaTable(db.uri).file_uris()}
    old = [p for p in Path(db.uri).glob("*.parquet") if p not in live]
    assert old

    def vacuum_now(done: int, total: int) -> None:
        for p in old:
            p.unlink(missing_ok=True)

    meta = db.backup(tmp_path / "bk", progress=vacuum_now, workers=1)
    assert meta.restorable_from > 0
    assert verify_backup(tmp_path / "bk").ok
    restore(tmp_path / "bk", tmp_path / "r")
    assert rows_at(tmp_path / "r") == rows_at(db.uri)
    with pytest.raises(VersionError):
        restore(tmp_path / "bk", tmp_path / "r0", version=meta.restorable_from - 1)


# -- auth-enabled tables ------------------------------------------------------------------


@pytest.fixture
def auth_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DatabaseOps]:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")
    d = DatabaseOps.create(
        tmp_path / "secure",
        SCHEMA,
        engine="local",
        auth=True,
        credentials=("root", "root-password"),
    )
    d.insert({"id": 1, "name": "a", "qty": 1})
    d.create_user("reader", "reader-password", ["read"])
    yield d
    d.close()


def test_restoring_an_auth_table_needs_the_restore_permission(
    auth_table: DatabaseOps, tmp_path: Path
) -> None:
    meta = auth_table.backup(tmp_path / "bk")
    assert meta.auth and meta.created_by == "root"
    with pytest.raises(AuthenticationError):
        restore(tmp_path / "bk", tmp_path / "r")
    with pytest.raises(AuthenticationError):
        restore(tmp_path / "bk", tmp_path / "r", credentials=("root", "wrong-password"))
    with pytest.raises(PermissionDenied, match="restore"):
        restore(tmp_path / "bk", tmp_path / "r", credentials=("reader", "reader-password"))
    assert not (tmp_path / "r").exists()
    DatabaseOps.restore_with_credentials(tmp_path / "bk", tmp_path / "r", "root", "root-password")
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(tmp_path / "r", engine="local")
    again = DatabaseOps.open(
        tmp_path / "r", engine="local", credentials=("reader", "reader-password")
    )
    assert again.query("SELECT count(*) FROM data").scalar() == 1
    actions = [
        (e.action, e.user)
        for e in DatabaseOps.open(
            tmp_path / "r", engine="local", credentials=("root", "root-password")
        ).audit_log()
    ]
    assert ("restore", "root") in actions
    assert ("backup", "root") in [(e.action, e.user) for e in auth_table.audit_log()]


def test_backup_needs_the_backup_permission(auth_table: DatabaseOps, tmp_path: Path) -> None:
    reader = DatabaseOps.open(
        auth_table.uri, engine="local", credentials=("reader", "reader-password")
    )
    with pytest.raises(PermissionDenied, match="backup"):
        reader.backup(tmp_path / "bk")
    assert not (tmp_path / "bk").exists()


def test_a_backup_without_its_user_database_is_refused(
    auth_table: DatabaseOps, tmp_path: Path
) -> None:
    from posixlake.backup.manifest import _checksum

    auth_table.backup(tmp_path / "bk")
    doc = manifest(tmp_path / "bk")
    doc["files"] = [f for f in doc["files"] if not f["path"].startswith("_posixlake/users/")]
    doc.pop("checksum")
    doc["checksum"] = _checksum(doc)
    (tmp_path / "bk" / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(BackupCorrupted, match="user database"):
        restore(tmp_path / "bk", tmp_path / "r", credentials=("root", "root-password"))


# -- property: restore equals the source at every version ----------------------------------


ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.lists(st.integers(0, 30), min_size=1, max_size=5)),
        st.tuples(st.just("delete"), st.integers(0, 30)),
        st.tuples(st.just("update"), st.integers(0, 30)),
        st.tuples(st.just("optimize"), st.just(0)),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=ops, split=st.integers(0, 6))
def test_restore_equals_the_source_at_every_version(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, Any]], split: int
) -> None:
    root = tmp_path_factory.mktemp("prop")
    d = DatabaseOps.create(root / "t", SCHEMA, engine="local")
    for i, (kind, arg) in enumerate(steps):
        if i == min(split, len(steps)):
            d.backup(root / "full")
        if kind == "insert":
            d.insert([{"id": x, "name": str(x), "qty": x} for x in arg])
        elif kind == "delete":
            d.delete_rows_where(f"id = {arg}")
        elif kind == "update":
            d.update(f"id = {arg}", {"qty": -1})
        else:
            d.optimize()
    if not (root / "full").exists():
        d.backup(root / "full")
    last = d.backup_incremental(root / "full", root / "incr")
    assert verify_backup(root / "incr").ok
    for v in range(last.table_version + 1):
        restore(root / "incr", root / f"r{v}", version=v)
        assert rows_at(root / f"r{v}") == rows_at(d.uri, v)
    shutil.rmtree(root)


def test_backups_leave_no_temporary_files(db: DatabaseOps, tmp_path: Path) -> None:
    db.backup(tmp_path / "bk")
    restore(tmp_path / "bk", tmp_path / "r")
    for top in (tmp_path / "bk", tmp_path / "r"):
        assert not [p for p in top.rglob("*") if "posixlake-tmp" in p.name]
    assert not [p for p in os.listdir(tmp_path) if ".restore-" in p or ".old-" in p]
