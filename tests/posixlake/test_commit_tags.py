"""commit_tags (what the NFS journal matches after a crash) and replace_rows(require_present=)."""

from __future__ import annotations

from pathlib import Path

import pytest

from posixlake import DatabaseOps
from posixlake.errors import ConcurrentChange, InvalidOperation


@pytest.fixture
def db(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "name": "String"}, engine="local")
    d.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    return d


def test_commit_tags_reach_the_history_of_this_threads_commits(db: DatabaseOps) -> None:
    with db.commit_tags({"posixlake.nfs_write": "w1"}):
        db.insert({"id": 3, "name": "c"})
    db.insert({"id": 4, "name": "d"})
    newest, tagged = db.history(2)
    assert tagged.tags.get("posixlake.nfs_write") == "w1"
    assert "posixlake.nfs_write" not in newest.tags


def test_commit_tags_refuse_other_keys_and_commit_nothing(db: DatabaseOps) -> None:
    v = db.version
    with pytest.raises(InvalidOperation), db.commit_tags({"user.note": "x"}):
        db.insert({"id": 5, "name": "e"})
    assert db.version == v and db.to_arrow().num_rows == 2


def test_replace_rows_require_present_refuses_a_row_changed_meanwhile(db: DatabaseOps) -> None:
    db.update("id = 2", {"name": "changed"})
    v = db.version
    with pytest.raises(ConcurrentChange):
        db.replace_rows(
            delete=[{"id": 2, "name": "b"}], insert=[{"id": 2, "name": "B"}], require_present=True
        )
    assert db.version == v
    assert sorted(db.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a"},
        {"id": 2, "name": "changed"},
    ]
