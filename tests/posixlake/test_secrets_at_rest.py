"""Secrets at rest (issue 14, item 7).

Decisions pinned here:

- A failed login with a name that is no user (perhaps a password typed into the user
  field) is recorded as ``unknown#<16 hex>``, a keyed HMAC of the name, never verbatim;
  a failed login of a real user keeps the user's name.
- On local storage, files under ``_posixlake/`` (users, audit, keys) are created 0600 and
  their folders 0700; the table's data and log keep the usual modes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from posixlake import AuthenticationError, DatabaseOps, security
from posixlake.storage import open_store

SCHEMA = {"id": "Int64", "name": "String"}
ADMIN = ("root", "root-password")
SECRET = "Tr0ub4dor&3-horse-battery"


@pytest.fixture(autouse=True)
def fast_kdf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")


def test_an_unknown_user_name_is_not_recorded_verbatim(tmp_path: Path) -> None:
    path = tmp_path / "t"
    db = DatabaseOps.create(path, SCHEMA, engine="local", auth=True, credentials=ADMIN)
    for creds in [(SECRET, "whatever"), ("root", "wrong-password")]:
        with pytest.raises(AuthenticationError):
            DatabaseOps.open(path, engine="local", credentials=creds)
    for f in (path / "_posixlake").rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
    failed = [e for e in db.audit_log() if e.action == "login_failed"]
    users = sorted(str(e.user) for e in failed)
    assert users[0] == "root"
    assert users[1].startswith(security.UNKNOWN_USER_PREFIX) and len(users[1]) == 8 + 16
    store = open_store(str(path))
    assert security.unknown_user_matches(store, users[1], SECRET)
    assert not security.unknown_user_matches(store, users[1], "root")


def test_posixlake_files_are_private_on_local_storage(tmp_path: Path) -> None:
    path = tmp_path / "t"
    old = os.umask(0o022)
    try:
        db = DatabaseOps.create(path, SCHEMA, engine="local", auth=True, credentials=ADMIN)
        db.create_user("alice", "alice-password-1", roles=["read"])
        with pytest.raises(AuthenticationError):
            DatabaseOps.open(path, engine="local", credentials=("nobody", "x"))
    finally:
        os.umask(old)
    private = path / "_posixlake"
    entries = [private, *private.rglob("*")]
    assert len(entries) > 3
    for entry in entries:
        mode = stat.S_IMODE(entry.stat().st_mode)
        assert mode == (0o700 if entry.is_dir() else 0o600), (entry, oct(mode))
    log = next((path / "_delta_log").glob("*.json"))
    assert stat.S_IMODE(log.stat().st_mode) == 0o644
