"""The original's names are one table (posixlake._compat.ALIASES: alias -> canonical), and
the users and backups groups (``db.users``, ``db.backups``) stand behind the flat names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from posixlake import DatabaseOps, Optimizer, PermissionDenied
from posixlake._compat import ALIASES, OriginalNames
from posixlake.engines import Engine

ADMIN = ("root", "root-password")


def _resolve(name: str) -> Any:
    owner: Any = DatabaseOps
    for part in name.split("."):
        owner = Optimizer if part == "optimize" else getattr(owner, part)
    return owner


@pytest.mark.parametrize(("alias", "canonical"), sorted(ALIASES.items()))
def test_every_alias_names_an_existing_canonical_method(alias: str, canonical: str) -> None:
    assert alias != canonical
    assert callable(getattr(DatabaseOps, alias))
    assert _resolve(canonical) is not None


def test_the_table_holds_every_original_method_alias() -> None:
    declared = {n for n in vars(OriginalNames) if not n.startswith("_")}
    assert declared == set(ALIASES)
    assert ALIASES["insert_json"] == "insert"
    assert ALIASES["delete"] == "delete_rows_where"
    assert ALIASES["open_with_credentials"] == "open"


@pytest.fixture(autouse=True)
def fast_kdf(monkeypatch: pytest.MonkeyPatch) -> None:
    from posixlake import security

    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")


def test_users_group_and_flat_names_are_the_same(tmp_path: Path, local_engine: Engine) -> None:
    db = DatabaseOps.create(
        tmp_path / "t", {"id": "Int64"}, engine=local_engine, auth=True, credentials=ADMIN
    )
    db.users.create("ann", "ann-password", ["read"])
    db.create_user("bob", "bob-password", role="write")
    assert [u.name for u in db.users.list()] == [u.name for u in db.list_users()]
    assert {"ann", "bob"} <= {u.name for u in db.list_users()}
    db.users.delete("bob")
    assert "bob" not in {u.name for u in db.list_users()}
    reader = DatabaseOps.open(
        tmp_path / "t", engine=local_engine, credentials=("ann", "ann-password")
    )
    errors = reader.get_metrics().errors
    with pytest.raises(PermissionDenied):
        reader.users.create("eve", "eve-password")
    assert reader.get_metrics().errors == errors + 1  # counted once
    assert db.users.audit_log(limit=5)


def test_backups_group_and_flat_names(tmp_path: Path, local_engine: Engine) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine=local_engine)
    db.insert({"id": 1})
    full = db.backups.create(tmp_path / "full")
    db.insert({"id": 2})
    inc = db.backup_incremental(tmp_path / "full", tmp_path / "inc")
    assert full.table_version == 1 and inc.table_version == 2
    assert DatabaseOps.verify_backup(tmp_path / "inc").ok
    restored = DatabaseOps.restore(tmp_path / "inc", tmp_path / "back")
    assert restored.version == 2
