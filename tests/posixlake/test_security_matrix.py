"""Every operation x every role: allowed operations succeed, the others raise PermissionDenied
naming the operation and change nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from posixlake import DatabaseOps, InvalidOperation, PermissionDenied, security
from posixlake._authz import Permission

ADMIN = ("root", "root-password")

#: user -> (roles, single permissions)
USERS: dict[str, tuple[list[str], list[str]]] = {
    "reader": (["read"], []),
    "writer": (["write"], []),
    "admin2": (["admin"], []),
    "inserter": (["read"], ["write"]),
    "backup_op": ([], ["backup"]),
    "restorer": ([], ["restore"]),
}


@dataclass
class World:
    uri: str
    admin: DatabaseOps
    base_backup: str
    scratch: Path
    counter: Iterator[int]

    def fresh(self, name: str) -> str:
        return str(self.scratch / f"{name}-{next(self.counter)}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(security.SCRYPT_LOG2_N_ENV, "6")
        root = tmp_path_factory.mktemp("matrix")
        db = DatabaseOps.create(
            root / "t",
            {"id": "Int64", "name": "String"},
            engine="local",
            auth=True,
            credentials=ADMIN,
        )
        db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
        for user, (roles, perms) in USERS.items():
            db.create_user(user, f"{user}-password", roles, permissions=perms)
        base = str(root / "base-backup")
        db.backup(base)
        yield World(db.uri, db, base, root, itertools.count())
        db.close()


def creds(user: str) -> tuple[str, str]:
    return (user, f"{user}-password")


Op = Callable[[DatabaseOps, World, str], object]


def _enable_auth(db: DatabaseOps, w: World, user: str) -> None:
    with pytest.raises(InvalidOperation, match="already"):  # allowed; the table has auth
        db.enable_auth(("x", "long-enough"))


def _victim(w: World, user: str, op: str) -> str:
    name = f"v{next(w.counter)}"
    w.admin.create_user(name, "victim-password", ["read"])
    return name


def _buffered(db: DatabaseOps, w: World, user: str) -> None:
    db.insert_buffered({"id": 40, "name": "buf"})
    db.flush()


def _now() -> str:
    return datetime.now(UTC).isoformat()


#: (operation, the name its PermissionDenied carries, permissions it needs, callable)
def _changes(db: DatabaseOps) -> None:
    """Read the change data feed: permitted means past the check, to "no feed recorded"."""
    try:
        db.changes(0)
    except InvalidOperation as err:
        assert "change data feed" in str(err)


def _subscribed(db: DatabaseOps) -> None:
    """Follow the table's commits: permitted means a feed that reads the first batches."""
    with db.subscribe(from_version=0) as feed:
        list(feed.available())


def _renamed(db: DatabaseOps, *, drop: bool) -> None:
    """Rename / drop: permitted means past the check, to "no column mapping" (the table
    of this world has none)."""
    with pytest.raises(InvalidOperation, match="columnMapping"):
        if drop:
            db.drop_columns("name")
        else:
            db.rename_column("name", "label")


OPERATIONS: list[tuple[str, str, frozenset[Permission], Op]] = [
    # read
    ("query", "query", frozenset({"read"}), lambda db, w, u: db.query("SELECT * FROM data")),
    ("query_json", "query", frozenset({"read"}), lambda db, w, u: db.query_json("SELECT 1")),
    (
        "query_version",
        "query",
        frozenset({"read"}),
        lambda db, w, u: db.query_version("SELECT * FROM data", 1),
    ),
    (
        "query_version_json",
        "query",
        frozenset({"read"}),
        lambda db, w, u: db.query_version_json("SELECT 1", 1),
    ),
    (
        "query_timestamp",
        "query",
        frozenset({"read"}),
        lambda db, w, u: db.query_timestamp("SELECT 1", _now()),
    ),
    (
        "query_timestamp_json",
        "query",
        frozenset({"read"}),
        lambda db, w, u: db.query_timestamp_json("SELECT 1", _now()),
    ),
    ("to_arrow", "read", frozenset({"read"}), lambda db, w, u: db.to_arrow()),
    ("iterate", "read", frozenset({"read"}), lambda db, w, u: list(db)),
    ("history", "history", frozenset({"read"}), lambda db, w, u: db.history()),
    ("get_history", "history", frozenset({"read"}), lambda db, w, u: db.get_history(3)),
    (
        "get_version_history",
        "history",
        frozenset({"read"}),
        lambda db, w, u: db.get_version_history(),
    ),
    (
        "query_json_at_version",
        "query",
        frozenset({"read"}),
        lambda db, w, u: db.query_json_at_version("SELECT 1", 1),
    ),
    (
        "query_json_at_timestamp",
        "query",
        frozenset({"read"}),
        lambda db, w, u: db.query_json_at_timestamp("SELECT 1", _now()),
    ),
    (
        "list_parquet_files",
        "list_parquet_files",
        frozenset({"read"}),
        lambda db, w, u: db.list_parquet_files(),
    ),
    ("get_schema", "get_schema", frozenset({"read"}), lambda db, w, u: db.get_schema()),
    (
        "get_data_skipping_stats",
        "get_data_skipping_stats",
        frozenset({"read"}),
        lambda db, w, u: db.get_data_skipping_stats("id > 1"),
    ),
    ("get_metrics", "get_metrics", frozenset({"read"}), lambda db, w, u: db.get_metrics()),
    ("health_check", "health_check", frozenset({"read"}), lambda db, w, u: db.health_check()),
    ("changes", "changes", frozenset({"read"}), lambda db, w, u: _changes(db)),
    ("subscribe", "subscribe", frozenset({"read"}), lambda db, w, u: _subscribed(db)),
    # write
    ("insert", "insert", frozenset({"write"}), lambda db, w, u: db.insert({"id": 10, "name": "i"})),
    (
        "insert_json",
        "insert",
        frozenset({"write"}),
        lambda db, w, u: db.insert_json('[{"id": 11, "name": "j"}]'),
    ),
    ("insert_buffered", "insert_buffered", frozenset({"write"}), _buffered),
    (
        "insert_buffered_json",
        "insert_buffered",
        frozenset({"write"}),
        lambda db, w, u: db.insert_buffered_json('[{"id": 41, "name": "bj"}]'),
    ),
    (
        "merge",
        "merge",
        frozenset({"write"}),
        lambda db, w, u: db.merge(
            [{"id": 1, "name": "m", "_op": "UPDATE"}, {"id": 12, "name": "n", "_op": "INSERT"}],
            "id",
        ),
    ),
    (
        "merge_json",
        "merge",
        frozenset({"write"}),
        lambda db, w, u: db.merge_json('[{"id": 2, "name": "mj", "_op": "UPDATE"}]', "id"),
    ),
    ("update", "update", frozenset({"write"}), lambda db, w, u: db.update("id = 1", {"name": "u"})),
    (
        "replace_rows",
        "replace_rows",
        frozenset({"write"}),
        lambda db, w, u: db.replace_rows(delete=[], insert=[{"id": 13, "name": "r"}]),
    ),
    ("optimize", "optimize", frozenset({"write"}), lambda db, w, u: db.optimize()),
    ("optimize_compact", "optimize", frozenset({"write"}), lambda db, w, u: db.optimize.compact()),
    (
        "optimize_with_target_size",
        "optimize",
        frozenset({"write"}),
        lambda db, w, u: db.optimize_with_target_size(1 << 20),
    ),
    (
        "optimize_with_filter",
        "optimize",
        frozenset({"write"}),
        lambda db, w, u: db.optimize_with_filter([]),
    ),
    (
        "optimize_z_order",
        "zorder",
        frozenset({"write"}),
        lambda db, w, u: db.optimize.z_order(["id"]),
    ),
    ("zorder", "zorder", frozenset({"write"}), lambda db, w, u: db.zorder(["id"])),
    # delete
    (
        "delete_rows_where",
        "delete",
        frozenset({"delete"}),
        lambda db, w, u: db.delete_rows_where("id = 999"),
    ),
    ("delete", "delete", frozenset({"delete"}), lambda db, w, u: db.delete("id >= 10")),
    ("truncate", "truncate", frozenset({"delete"}), lambda db, w, u: db.truncate()),
    (
        "merge_delete",
        "merge",
        frozenset({"write", "delete"}),
        lambda db, w, u: db.merge([{"id": 12, "_op": "DELETE"}], "id"),
    ),
    (
        "replace_rows_delete",
        "replace_rows",
        frozenset({"write", "delete"}),
        lambda db, w, u: db.replace_rows(delete=[{"id": 13, "name": "r"}], insert=[]),
    ),
    # admin
    ("vacuum", "vacuum", frozenset({"admin"}), lambda db, w, u: db.vacuum(168, dry_run=True)),
    (
        "add_columns",
        "add_columns",
        frozenset({"admin"}),
        lambda db, w, u: db.add_columns({"extra": "Int32"}),
    ),
    (
        "rename_column",
        "rename_column",
        frozenset({"admin"}),
        lambda db, w, u: _renamed(db, drop=False),
    ),
    (
        "drop_columns",
        "drop_columns",
        frozenset({"admin"}),
        lambda db, w, u: _renamed(db, drop=True),
    ),
    ("vacuum_dry_run", "vacuum", frozenset({"admin"}), lambda db, w, u: db.vacuum_dry_run(168)),
    (
        "set_primary_key",
        "set_primary_key",
        frozenset({"admin"}),
        lambda db, w, u: db.set_primary_key(None),
    ),
    (
        "create_user",
        "create_user",
        frozenset({"admin"}),
        lambda db, w, u: db.create_user(f"n{next(w.counter)}", "new-user-pw", ["read"]),
    ),
    (
        "delete_user",
        "delete_user",
        frozenset({"admin"}),
        lambda db, w, u: db.delete_user(_victim(w, u, "delete")),
    ),
    (
        "set_roles",
        "set_roles",
        frozenset({"admin"}),
        lambda db, w, u: db.set_roles(_victim(w, u, "roles"), ["write"]),
    ),
    (
        "change_password_of_another",
        "change_password",
        frozenset({"admin"}),
        lambda db, w, u: db.change_password(_victim(w, u, "pw"), "changed-password"),
    ),
    ("list_users", "list_users", frozenset({"admin"}), lambda db, w, u: db.list_users()),
    ("audit_log", "audit_log", frozenset({"admin"}), lambda db, w, u: db.audit_log(limit=5)),
    ("enable_auth", "enable_auth", frozenset({"admin"}), _enable_auth),
    # backup
    ("backup", "backup", frozenset({"backup"}), lambda db, w, u: db.backup(w.fresh("full"))),
    (
        "backup_incremental",
        "backup_incremental",
        frozenset({"backup"}),
        lambda db, w, u: db.backup_incremental(w.base_backup, w.fresh("incr")),
    ),
    # restore (checked against the backup's users)
    (
        "restore",
        "restore",
        frozenset({"restore"}),
        lambda db, w, u: DatabaseOps.restore(
            w.base_backup, w.fresh("restored"), credentials=creds(u)
        ),
    ),
    (
        "restore_to_transaction",
        "restore",
        frozenset({"restore"}),
        lambda db, w, u: DatabaseOps.restore_to_transaction(
            w.base_backup, w.fresh("restored"), 1, credentials=creds(u)
        ),
    ),
    (
        "restore_with_credentials",
        "restore",
        frozenset({"restore"}),
        lambda db, w, u: DatabaseOps.restore_with_credentials(
            w.base_backup, w.fresh("restored"), *creds(u)
        ),
    ),
]


def _granted(user: str) -> frozenset[Permission]:
    roles, perms = USERS[user]
    out: set[Permission] = set()
    for r in roles:
        out |= security.ROLES[r]
    out |= {p for p in security.ROLES["admin"] if p in perms}
    return frozenset(out)


#: public methods that are not operations on table data (no permission of their own)
NOT_OPERATIONS = {
    # construction and lifecycle (open checks the credentials)
    "create",
    "open",
    "create_from_csv",
    "create_from_parquet",
    "create_with_auth",
    "open_with_credentials",
    "create_with_s3",
    "open_with_s3",
    "create_with_azure",
    "open_with_azure",
    "close",
    # tags the commits this thread makes; each of those commits checks its own permission
    "commit_tags",
    # metadata: a successful login is enough
    "commit_time",
    "primary_key",
    "get_base_path",
    "get_current_version",
    # flush commits what insert_buffered (write) accepted; it checks write when rows wait
    "flush",
    "flush_write_buffer",
    # your own password needs the old one; another's needs admin (tested above)
    "change_password",
    # read a backup's own files, no table involved
    "verify_backup",
    "get_backup_metadata",
    # the same check as restore_to_transaction / restore_with_credentials
    "restore_to_transaction_with_credentials",
}


def test_the_matrix_covers_every_public_operation() -> None:
    public = {
        n for n in vars(DatabaseOps) if not n.startswith("_") and callable(getattr(DatabaseOps, n))
    }
    covered = {op for op, *_ in OPERATIONS}
    assert sorted(public - NOT_OPERATIONS - covered) == []


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize(("op", "named", "needs", "fn"), OPERATIONS, ids=[o[0] for o in OPERATIONS])
def test_permission_matrix(
    world: World,
    monkeypatch: pytest.MonkeyPatch,
    user: str,
    op: str,
    named: str,
    needs: frozenset[Permission],
    fn: Op,
) -> None:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")
    db = DatabaseOps.open(world.uri, engine="local", credentials=creds(user))
    allowed = needs <= _granted(user)
    before = world.admin.version
    users_before = [u.name for u in world.admin.list_users()]
    if allowed:
        fn(db, world, user)
        return
    with pytest.raises(PermissionDenied) as err:
        fn(db, world, user)
    assert f"{named}:" in str(err.value)
    assert user in str(err.value) or op.startswith("restore")
    assert world.admin.version == before
    now = [u.name for u in world.admin.list_users()]
    assert [n for n in now if not n.startswith("v")] == [
        n for n in users_before if not n.startswith("v")
    ]
