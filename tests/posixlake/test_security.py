"""Users, roles, permissions, login and the audit log of auth-enabled tables."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from posixlake import (
    AlreadyExists,
    AuthenticationError,
    DatabaseOps,
    InvalidOperation,
    NotFound,
    PermissionDenied,
    StorageError,
    security,
)
from posixlake.security import (
    AUTH_PROPERTY,
    ROLES,
    SCRYPT_LOG2_N,
    TableAuthorizer,
    UserStore,
    hash_password,
    verify_password,
)
from posixlake.storage import open_store

SCHEMA = {"id": "Int64", "name": "String"}
ADMIN = ("root", "root-password")


@pytest.fixture(autouse=True)
def fast_kdf(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cheap scrypt for tests (the documented test-only knob); production keeps N=2^15."""
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")
    monkeypatch.delenv(security.ADMIN_PASSWORD_ENV, raising=False)
    monkeypatch.delenv(security.ADMIN_USER_ENV, raising=False)


@pytest.fixture
def table(tmp_path: Path) -> Iterator[DatabaseOps]:
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local", auth=True, credentials=ADMIN)
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    yield db
    db.close()


def open_as(db: DatabaseOps, user: str, password: str) -> DatabaseOps:
    return DatabaseOps.open(db.uri, engine="local", credentials=(user, password))


# -- passwords -------------------------------------------------------------------------------


def test_default_kdf_is_scrypt_2_15_with_a_random_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(security.SCRYPT_LOG2_N_ENV)
    a, b = hash_password("correct horse"), hash_password("correct horse")
    assert a["alg"] == "scrypt" and a["n"] == 2**SCRYPT_LOG2_N == 32768
    assert a["r"] == 8 and a["p"] == 1
    assert len(base64.b64decode(a["salt"])) == 16
    assert a["salt"] != b["salt"] and a["hash"] != b["hash"]
    assert verify_password("correct horse", a)
    assert not verify_password("correct horsf", a)


def test_verification_uses_the_parameters_stored_with_the_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record = hash_password("pässwörd-1")
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "7")
    assert verify_password("pässwörd-1", record)
    # NFC and NFD spellings of the same text are the same password
    assert verify_password("pa\u0308sswo\u0308rd-1", record)


@pytest.mark.parametrize("value", ["abc", "3", "21"])
def test_the_test_knob_is_validated(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, value)
    with pytest.raises(InvalidOperation):
        hash_password("whatever-1")


@pytest.mark.parametrize(
    "record",
    [
        {},
        {"alg": "md5", "n": 2, "r": 1, "p": 1, "salt": "", "hash": ""},
        {"alg": "scrypt", "n": 3, "r": 8, "p": 1, "salt": "AAAA", "hash": "AAAA"},
        {"alg": "scrypt", "n": 2**30, "r": 8, "p": 1, "salt": "AAAA", "hash": "AAAA"},
        {"alg": "scrypt", "n": 16, "r": 8, "p": 1, "salt": "!!", "hash": "AAAA"},
    ],
)
def test_malformed_or_hostile_records_are_refused(record: dict[str, Any]) -> None:
    with pytest.raises(StorageError):
        verify_password("x", record)


# -- creating an auth-enabled table ------------------------------------------------------


def test_create_with_auth_stores_users_inside_the_table(table: DatabaseOps) -> None:
    root = Path(table.uri)
    files = sorted(p.name for p in (root / "_posixlake" / "users").iterdir())
    assert files == ["00000000000000000001.json"]
    doc = json.loads((root / "_posixlake" / "users" / files[0]).read_text())
    rec = doc["users"]["root"]
    assert rec["roles"] == ["admin"]
    assert "root-password" not in json.dumps(doc)
    assert rec["password"]["alg"] == "scrypt"
    assert table.user == "root"
    assert table._log.configuration[AUTH_PROPERTY] == "true"


def test_create_auth_without_credentials_fails_before_writing(tmp_path: Path) -> None:
    with pytest.raises(AuthenticationError, match="POSIXLAKE_ADMIN_PASSWORD"):
        DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local", auth=True)
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())


def test_create_auth_takes_the_admin_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(security.ADMIN_PASSWORD_ENV, "from-the-env")
    db = DatabaseOps.create_with_auth(tmp_path / "t", SCHEMA, True, engine="local")
    assert db.user == "admin"
    monkeypatch.setenv(security.ADMIN_USER_ENV, "boss")
    db2 = DatabaseOps.create(tmp_path / "u", SCHEMA, engine="local", auth=True)
    assert db2.user == "boss"
    assert (
        DatabaseOps.open_with_credentials(
            tmp_path / "t", "admin", "from-the-env", engine="local"
        ).user
        == "admin"
    )


@pytest.mark.parametrize(
    ("credentials", "error"),
    [
        (("root", "short"), InvalidOperation),
        (("bad name", "long-enough"), InvalidOperation),
        ((".hidden", "long-enough"), InvalidOperation),
        (("root",), AuthenticationError),
        (("root", 12345678), AuthenticationError),
    ],
)
def test_create_auth_validates_the_first_admin(
    tmp_path: Path, credentials: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        DatabaseOps.create(
            tmp_path / "t", SCHEMA, engine="local", auth=True, credentials=credentials
        )
    assert not (tmp_path / "t" / "_delta_log").exists()


def test_create_with_auth_false_is_a_plain_table(tmp_path: Path) -> None:
    db = DatabaseOps.create_with_auth(tmp_path / "t", SCHEMA, False, engine="local")
    assert db.user is None
    assert not (tmp_path / "t" / "_posixlake").exists()
    assert DatabaseOps.open(tmp_path / "t", engine="local").user is None


# -- login -----------------------------------------------------------------------------------


def test_open_without_or_with_wrong_credentials_fails(table: DatabaseOps) -> None:
    with pytest.raises(AuthenticationError, match="requires credentials"):
        DatabaseOps.open(table.uri, engine="local")
    with pytest.raises(AuthenticationError) as wrong_password:
        DatabaseOps.open(table.uri, engine="local", credentials=("root", "not-the-password"))
    with pytest.raises(AuthenticationError) as unknown_user:
        DatabaseOps.open(table.uri, engine="local", credentials=("nobody", "root-password"))
    assert str(wrong_password.value) == str(unknown_user.value)
    assert "nobody" not in str(unknown_user.value)
    assert open_as(table, *ADMIN).user == "root"


@pytest.mark.parametrize("bad", [("root",), "root:root-password", ("root", None), (1, 2)])
def test_malformed_credentials_are_an_authentication_error(table: DatabaseOps, bad: Any) -> None:
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(table.uri, engine="local", credentials=bad)


def test_a_table_whose_users_vanished_stays_closed(table: DatabaseOps) -> None:
    users = Path(table.uri) / "_posixlake" / "users"
    for f in users.iterdir():
        f.unlink()
    with pytest.raises(AuthenticationError, match="user database"):
        DatabaseOps.open(table.uri, engine="local", credentials=ADMIN)
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(table.uri, engine="local")


def test_a_corrupt_user_database_fails_closed(table: DatabaseOps) -> None:
    (Path(table.uri) / "_posixlake" / "users" / "00000000000000000001.json").write_text("{")
    with pytest.raises(StorageError):
        DatabaseOps.open(table.uri, engine="local", credentials=ADMIN)


def test_credentials_on_a_plain_table_are_ignored(tmp_path: Path) -> None:
    DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local").close()
    assert DatabaseOps.open(tmp_path / "t", engine="local", credentials=("a", "b")).user is None


def test_login_of_a_plain_table_is_one_cheap_check(tmp_path: Path) -> None:
    DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local").close()
    uri = str(tmp_path / "t")
    assert security.login(uri, None, None) is None
    assert security.login(uri, None, None, configuration={}) is None
    assert not security.auth_required(uri, None, {})


# -- user management -------------------------------------------------------------------------


def test_create_list_and_use_users(table: DatabaseOps) -> None:
    info = table.create_user("alice", "alice-password", ["write"])
    assert info.permissions == ROLES["write"] == {"read", "write", "delete"}
    table.create_user("bob", "bob-password", "read")
    table.create_user("carl", "carl-password", [], permissions=["backup"])
    table.create_user("dora", "dora-password", ["read"], permissions=["write"])
    users = {u.name: u for u in table.list_users()}
    assert sorted(users) == ["alice", "bob", "carl", "dora", "root"]
    assert users["carl"].permissions == {"backup"}
    assert users["dora"].permissions == {"read", "write"}
    assert users["bob"].created_by == "root"
    assert "scrypt" not in json.dumps([u.to_dict() for u in users.values()])
    dora = open_as(table, "dora", "dora-password")
    dora.insert({"id": 3, "name": "c"})
    with pytest.raises(PermissionDenied, match="delete"):
        dora.delete_rows_where("id = 3")


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        (("root", "another-pass", ["read"]), {}, AlreadyExists),
        (("x", "short", ["read"]), {"min_length": 8}, InvalidOperation),  # the CLI's policy
        (("x", "", ["read"]), {}, InvalidOperation),
        (("x", "long-enough", ["superuser"]), {}, InvalidOperation),
        (("x", "long-enough", ["read"]), {"permissions": ["fly"]}, InvalidOperation),
        (("x", "long-enough", []), {}, InvalidOperation),
        (("x/y", "long-enough", ["read"]), {}, InvalidOperation),
        (("x", "p" * 2000, ["read"]), {}, InvalidOperation),
    ],
)
def test_create_user_bad_input_changes_nothing(
    table: DatabaseOps, args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    before = sorted(u.name for u in table.list_users())
    files = sorted((Path(table.uri) / "_posixlake" / "users").iterdir())
    with pytest.raises(error):
        table.create_user(*args, **kwargs)
    assert sorted(u.name for u in table.list_users()) == before
    assert sorted((Path(table.uri) / "_posixlake" / "users").iterdir()) == files


def test_delete_user_ends_their_access(table: DatabaseOps) -> None:
    table.create_user("bob", "bob-password", ["read"])
    bob = open_as(table, "bob", "bob-password")
    table.delete_user("bob")
    with pytest.raises(AuthenticationError):
        open_as(table, "bob", "bob-password")
    assert isinstance(bob.authorizer, TableAuthorizer)
    with pytest.raises(AuthenticationError, match="no longer exists"):
        bob.authorizer.refresh()
    with pytest.raises(AuthenticationError):
        bob.query("SELECT 1")
    with pytest.raises(NotFound):
        table.delete_user("bob")


def test_the_last_admin_and_yourself_cannot_be_removed(table: DatabaseOps) -> None:
    with pytest.raises(InvalidOperation, match="logged in"):
        table.delete_user("root")
    with pytest.raises(InvalidOperation, match="at least one admin"):
        table.set_roles("root", ["read"])
    table.create_user("second", "second-admin", ["admin"])
    second = open_as(table, "second", "second-admin")
    second.set_roles("root", ["read"])
    with pytest.raises(InvalidOperation, match="at least one admin"):
        second.set_roles("second", ["write"])
    with pytest.raises(InvalidOperation, match="logged in"):
        second.delete_user("second")
    second.delete_user("root")
    assert [u.name for u in second.list_users()] == ["second"]


def test_set_roles_takes_effect_in_open_sessions(table: DatabaseOps) -> None:
    table.create_user("bob", "bob-password", ["read"])
    bob = open_as(table, "bob", "bob-password")
    with pytest.raises(PermissionDenied):
        bob.insert({"id": 9, "name": "z"})
    table.set_roles("bob", ["write"])
    assert isinstance(bob.authorizer, TableAuthorizer)
    bob.authorizer.refresh()
    bob.insert({"id": 9, "name": "z"})
    table.set_roles("bob", ["read"])
    bob.authorizer.refresh()
    with pytest.raises(PermissionDenied):
        bob.insert({"id": 10, "name": "z"})


def test_sessions_reread_the_users_after_the_refresh_interval(table: DatabaseOps) -> None:
    table.create_user("bob", "bob-password", ["read"])
    now = [0.0]
    auth = security.login(
        table.uri, None, ("bob", "bob-password"), refresh_seconds=5, clock=lambda: now[0]
    )
    assert isinstance(auth, TableAuthorizer)
    table.set_roles("bob", ["write"])
    assert not auth.allows("write")  # within the interval: the cached roles
    now[0] = 5.0
    assert auth.allows("write")  # re-read after the interval
    table.delete_user("bob")
    now[0] = 9.0
    assert auth.allows("write")
    now[0] = 10.0
    with pytest.raises(AuthenticationError):
        auth.check("read", "query")
    now[0] = 11.0
    with pytest.raises(AuthenticationError):  # the session stays ended
        auth.check("read", "query")


def test_a_session_far_behind_the_pruned_versions_still_refreshes(table: DatabaseOps) -> None:
    table.create_user("bob", "bob-password", ["read"])
    now = [0.0]
    auth = security.login(
        table.uri, None, ("bob", "bob-password"), refresh_seconds=1, clock=lambda: now[0]
    )
    assert isinstance(auth, TableAuthorizer)
    for i in range(40):  # its version is pruned meanwhile
        table.set_roles("root", ["admin"], permissions=["backup"] if i % 2 else [])
    table.set_roles("bob", ["write"])
    now[0] = 2.0
    assert auth.allows("write")


def test_change_password(table: DatabaseOps) -> None:
    table.create_user("bob", "bob-password", ["read"])
    bob = open_as(table, "bob", "bob-password")
    with pytest.raises(AuthenticationError):
        bob.change_password("bob", "new-bob-password", old_password="wrong-password")
    with pytest.raises(PermissionDenied):
        bob.change_password("bob", "new-bob-password")  # own password needs the old one
    with pytest.raises(PermissionDenied):
        bob.change_password("root", "hijacked-root", old_password="bob-password")
    bob.change_password("bob", "new-bob-password", old_password="bob-password")
    bob.query("SELECT 1")  # the session that changed its own password goes on
    with pytest.raises(AuthenticationError):
        open_as(table, "bob", "bob-password")
    assert open_as(table, "bob", "new-bob-password").user == "bob"
    # an admin resets it; bob's other sessions end
    other = open_as(table, "bob", "new-bob-password")
    table.change_password("bob", "reset-by-admin")
    assert isinstance(other.authorizer, TableAuthorizer)
    with pytest.raises(AuthenticationError, match="password"):
        other.authorizer.refresh()
    assert open_as(table, "bob", "reset-by-admin").user == "bob"
    with pytest.raises(InvalidOperation):
        table.change_password("bob", "short", min_length=8)
    with pytest.raises(NotFound):
        table.change_password("nobody", "long-enough")


def test_user_management_on_a_plain_table_is_refused(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    with pytest.raises(InvalidOperation, match="no users"):
        db.create_user("bob", "bob-password", ["read"])
    with pytest.raises(InvalidOperation, match="no users"):
        db.list_users()


def test_enable_auth_on_an_existing_table(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    db.insert({"id": 1, "name": "a"})
    db.enable_auth(("root", "root-password"))
    assert db.user == "root"
    db.insert({"id": 2, "name": "b"})
    assert db.history(1)[0].user == "root"
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(tmp_path / "t", engine="local")
    again = DatabaseOps.open(tmp_path / "t", engine="local", credentials=("root", "root-password"))
    assert again.query("SELECT count(*) FROM data").scalar() == 2
    with pytest.raises(InvalidOperation, match="already"):
        again.enable_auth(("x", "long-enough"))


# -- concurrency -----------------------------------------------------------------------------


def test_a_concurrent_user_change_is_reapplied_not_lost(table: DatabaseOps) -> None:
    other = open_as(table, *ADMIN)
    store = UserStore(open_store(table.uri))
    calls = []

    def change(users: dict[str, dict[str, Any]]) -> None:
        calls.append(len(users))
        if len(calls) == 1:
            other.create_user("sneaky", "sneaky-password", ["read"])  # wins the race
        users["carol"] = dict(users["root"], roles=["read"])

    old, new = store.update(change)
    assert len(calls) == 2 and calls[1] == calls[0] + 1
    assert {"sneaky", "carol", "root"} <= set(new.users)
    assert new.version == old.version + 1


def test_admins_creating_users_at_once_lose_nothing(table: DatabaseOps) -> None:
    sessions = [open_as(table, *ADMIN) for _ in range(6)]
    start = threading.Barrier(len(sessions))
    errors: list[BaseException] = []

    def work(i: int, db: DatabaseOps) -> None:
        try:
            start.wait()
            db.create_user(f"user{i}", f"password-{i}", ["read"])
        except BaseException as err:  # noqa: BLE001 - collected and re-raised by the test
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i, db)) for i, db in enumerate(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    names = {u.name for u in table.list_users()}
    assert {f"user{i}" for i in range(6)} <= names
    for i in range(6):
        assert open_as(table, f"user{i}", f"password-{i}").user == f"user{i}"


def test_old_user_versions_are_pruned(table: DatabaseOps) -> None:
    for i in range(30):
        table.set_roles("root", ["admin"], permissions=["backup"] if i % 2 else [])
    versions = sorted((Path(table.uri) / "_posixlake" / "users").iterdir())
    assert len(versions) <= security.KEEP_USER_VERSIONS + 5
    assert versions[-1].name == f"{31:020d}.json"
    assert open_as(table, *ADMIN).user == "root"


# -- the audit log ---------------------------------------------------------------------------


def test_audit_log_records_who_did_what(table: DatabaseOps) -> None:
    table.create_user("bob", "bob-password", ["read"])
    bob = open_as(table, "bob", "bob-password")
    with pytest.raises(PermissionDenied):
        bob.insert({"id": 5, "name": "x"})
    with pytest.raises(AuthenticationError):
        open_as(table, "bob", "wrong-password")
    with pytest.raises(AuthenticationError):
        open_as(table, "mallory", "wrong-password")
    table.delete_rows_where("id = 1")
    events = table.audit_log()
    seen = [(e.action, e.user, e.target, e.ok) for e in events]
    assert ("enable_auth", "root", "root", True) in seen
    assert ("create_user", "root", "bob", True) in seen
    assert ("login", "bob", None, True) in seen
    assert ("permission_denied", "bob", "insert", False) in seen
    assert ("login_failed", "bob", None, False) in seen
    # an unknown name (it could be a password typed as the user) is kept only as a keyed hash
    tag = security.unknown_user_tag(open_store(table.uri), "mallory")
    assert ("login_failed", tag, None, False) in seen
    assert all(e.user != "mallory" for e in events)
    assert ("commit:DELETE", "root", None, True) in seen
    assert [e.timestamp for e in events] == sorted((e.timestamp for e in events), reverse=True)
    assert len(table.audit_log(limit=3)) == 3
    with pytest.raises(PermissionDenied):
        bob.audit_log()


def test_audit_events_are_append_only_files(table: DatabaseOps) -> None:
    audit = Path(table.uri) / "_posixlake" / "audit"
    before = {p.name: p.read_bytes() for p in audit.iterdir()}
    table.create_user("bob", "bob-password", ["read"])
    after = {p.name: p.read_bytes() for p in audit.iterdir()}
    assert set(before) < set(after)
    assert all(after[name] == data for name, data in before.items())
    new = [json.loads(after[n]) for n in set(after) - set(before)]
    assert [e["action"] for e in new] == ["create_user"]


def test_an_unwritable_audit_log_does_not_block_work(
    table: DatabaseOps, caplog: pytest.LogCaptureFixture
) -> None:
    audit = Path(table.uri) / "_posixlake" / "audit"
    for f in audit.iterdir():
        f.unlink()
    audit.rmdir()
    audit.write_text("not a directory")  # every audit write now fails
    table.create_user("bob", "bob-password", ["read"])
    assert open_as(table, "bob", "bob-password").user == "bob"
    assert "could not write audit event create_user" in caplog.text
