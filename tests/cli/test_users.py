"""users enable|add|list|remove|passwd|roles|audit, create --auth, and logging in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posixlake import DatabaseOps
from tests.cli.conftest import ROWS, Cli, unchanged

ADMIN_PW = "admin-secret-1"
BOB_PW = "bob-secret-22"


@pytest.fixture(autouse=True)
def _cheap_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cheaper scrypt for tests (the stored parameters are used to verify)."""
    monkeypatch.setenv("POSIXLAKE_SCRYPT_LOG2_N", "10")


@pytest.fixture
def secured(run: Cli, table: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The sales table with users: admin, and bob with the read role."""
    monkeypatch.setenv("POSIXLAKE_NEW_PASSWORD", ADMIN_PW)
    run.ok("users", "enable", table, "--user", "admin")
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    monkeypatch.setenv("POSIXLAKE_NEW_PASSWORD", BOB_PW)
    run.ok("users", "add", table, "bob", "--user", "admin")
    monkeypatch.delenv("POSIXLAKE_PASSWORD")
    monkeypatch.delenv("POSIXLAKE_NEW_PASSWORD")
    return table


def test_create_with_auth(run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "t")
    result = run.ok(
        "create",
        path,
        "--schema",
        "id:Int64",
        "--auth",
        "--user",
        "root",
        input=f"{ADMIN_PW}\n{ADMIN_PW}\n",
    )
    assert "New password for root" in result.stderr and "Repeat for confirmation" in result.stderr
    with DatabaseOps.open(path, engine="local", credentials=("root", ADMIN_PW)) as db:
        assert [u.name for u in db.list_users()] == ["root"]


def test_create_with_auth_needs_an_admin(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POSIXLAKE_ADMIN_PASSWORD", raising=False)
    run.fails(1, "create", str(tmp_path / "t"), "--schema", "id:Int64", "--auth")
    assert not (tmp_path / "t" / "_delta_log").exists()


def test_user_without_auth_is_a_usage_error(run: Cli, tmp_path: Path) -> None:
    run.fails(2, "create", str(tmp_path / "t"), "--schema", "id:Int64", "--user", "x")


def test_password_option_warns(run: Cli, secured: str) -> None:
    # accepted for the original project's scripts, with a warning (ps shows it)
    result = run.ok("info", secured, "--user", "admin", "--password", ADMIN_PW)
    assert result.stderr.startswith("Warning: --password on the command line can be seen")


def test_a_table_with_users_needs_a_login(run: Cli, secured: str) -> None:
    result = run.fails(1, "info", secured)
    assert "--user" in result.stderr and "POSIXLAKE_PASSWORD" in result.stderr


def test_login_with_a_prompt(run: Cli, secured: str) -> None:
    result = run.ok(
        "query",
        secured,
        "SELECT count(*) AS n FROM data",
        "--json",
        "-u",
        "bob",
        "--engine",
        "local",
        input=f"{BOB_PW}\n",
    )
    assert json.loads(result.stdout) == [{"n": 3}]
    assert result.stderr == "Password for bob: \n"
    assert BOB_PW not in result.stdout + result.stderr


def test_login_from_the_environment(
    run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSIXLAKE_USER", "bob")
    monkeypatch.setenv("POSIXLAKE_PASSWORD", BOB_PW)
    result = run.ok("info", secured, "--json")
    assert json.loads(result.stdout)["rows"] == 3 and result.stderr == ""


def test_wrong_password(run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", "not-the-password")
    assert "authentication failed" in run.fails(1, "info", secured, "--user", "bob").stderr


def test_permission_denied_changes_nothing(
    run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", BOB_PW)
    before = DatabaseOps.open(secured, engine="local", credentials=("admin", ADMIN_PW)).version
    result = run.fails(
        1, "insert", secured, "--user", "bob", "--engine", "local", input='{"id": 9, "item": "x"}'
    )
    assert "lacks the 'write' permission" in result.stderr
    run.fails(1, "users", "list", secured, "--user", "bob")
    with DatabaseOps.open(secured, engine="local", credentials=("admin", ADMIN_PW)) as db:
        assert db.version == before
        assert db.query("SELECT * FROM data ORDER BY id").to_pylist() == ROWS


def test_list(run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    lines = run.ok("users", "list", secured, "--user", "admin").stdout.splitlines()
    assert lines[0].split() == ["USER", "ROLES", "PERMISSIONS"]
    assert lines[1].split()[:2] == ["admin", "admin"]
    assert lines[2].split() == ["bob", "read", "read"]
    users = json.loads(run.ok("users", "list", secured, "--user", "admin", "--json").stdout)
    assert [(u["name"], u["roles"]) for u in users] == [("admin", ["admin"]), ("bob", ["read"])]


def test_add_with_roles_and_permissions(
    run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    out = run.ok(
        "users",
        "add",
        secured,
        "carol",
        "-r",
        "write",
        "-p",
        "backup",
        "--user",
        "admin",
        "--json",
        input="carol-secret-3\ncarol-secret-3\n",
    ).stdout
    assert json.loads(out)["permissions"] == ["backup", "delete", "read", "write"]
    with DatabaseOps.open(secured, engine="local", credentials=("carol", "carol-secret-3")) as db:
        db.insert({"id": 10, "item": "by carol"})


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["bob"], 1, "exists"),
        (["bad name!"], 1, "name"),
        (["dave", "--role", "king"], 2, "king"),
    ],
)
def test_add_errors(
    run: Cli,
    secured: str,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    code: int,
    message: str,
) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    monkeypatch.setenv("POSIXLAKE_NEW_PASSWORD", "long-enough-pw")
    assert message in run.fails(code, "users", "add", secured, *args, "--user", "admin").stderr


def test_add_short_password(run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    monkeypatch.setenv("POSIXLAKE_NEW_PASSWORD", "short")
    assert "8" in run.fails(1, "users", "add", secured, "dave", "--user", "admin").stderr


def test_mistyped_confirmation_aborts(
    run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    result = run(
        "users", "add", secured, "dave", "--user", "admin", input="one-password\nanother-one\n"
    )
    assert result.exit_code == 1
    assert "do not match" in result.stderr
    with DatabaseOps.open(secured, engine="local", credentials=("admin", ADMIN_PW)) as db:
        assert "dave" not in [u.name for u in db.list_users()]


def test_remove(run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    assert run.ok("users", "remove", secured, "bob", "--user", "admin").stdout == "Removed bob\n"
    assert "bob" in run.fails(1, "users", "remove", secured, "bob", "--user", "admin").stderr
    run.fails(1, "users", "remove", secured, "admin", "--user", "admin")


def test_passwd_own(run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", BOB_PW)
    monkeypatch.setenv("POSIXLAKE_NEW_PASSWORD", "bob-new-secret")
    assert run.ok("users", "passwd", secured, "--user", "bob").stdout == "Password of bob changed\n"
    DatabaseOps.open(secured, engine="local", credentials=("bob", "bob-new-secret")).close()


def test_passwd_of_another_user_needs_admin(
    run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", BOB_PW)
    monkeypatch.setenv("POSIXLAKE_NEW_PASSWORD", "hijacked-pw")
    run.fails(1, "users", "passwd", secured, "admin", "--user", "bob")
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    monkeypatch.setenv("POSIXLAKE_NEW_PASSWORD", "reset-by-admin")
    run.ok("users", "passwd", secured, "bob", "--user", "admin")
    DatabaseOps.open(secured, engine="local", credentials=("bob", "reset-by-admin")).close()


def test_passwd_needs_a_login(run: Cli, secured: str) -> None:
    run.fails(2, "users", "passwd", secured)


def test_roles(run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    out = run.ok("users", "roles", secured, "bob", "--role", "write", "--user", "admin").stdout
    assert out == "bob: delete, read, write\n"
    run.fails(2, "users", "roles", secured, "bob", "--user", "admin")


def test_audit(run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    out = run.ok("users", "audit", secured, "--user", "admin").stdout
    assert "create_user bob ok" in out
    events = json.loads(
        run.ok("users", "audit", secured, "--user", "admin", "--json", "-n", "2").stdout
    )
    assert len(events) == 2 and {"timestamp", "user", "action", "ok"} <= set(events[0])


def test_enable_twice_fails(run: Cli, secured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", ADMIN_PW)
    monkeypatch.setenv("POSIXLAKE_NEW_PASSWORD", ADMIN_PW)
    run.fails(1, "users", "enable", secured, "--user", "admin")
    run.fails(2, "users", "enable", secured)


def test_users_on_a_table_without_users(run: Cli, table: str) -> None:
    assert "posixlake users enable" in run.fails(1, "users", "list", table).stderr
    unchanged(table, 1, ROWS)


def test_user_on_a_table_without_users_is_a_warning(
    run: Cli, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSIXLAKE_PASSWORD", "whatever-pw")
    result = run.ok("info", table, "--user", "bob", "--json")
    assert result.stderr == f"Warning: {table} has no users; --user bob is not used\n"
    assert json.loads(result.stdout)["rows"] == 3
