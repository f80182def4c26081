"""The commit time of a version (what the NFS face stamps a new version's files with):
read from that commit back, not from the whole history, which grows with every append."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from posixlake import DatabaseOps
from posixlake.delta._table import LoadedTable


def test_a_new_versions_time_reads_its_own_commit_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine="local")
    for i in range(30):
        db.insert({"id": i})
    limits: list[int | None] = []
    real = LoadedTable.history

    def spy(self: LoadedTable, limit: int | None = None) -> object:
        limits.append(limit)
        return real(self, limit)

    monkeypatch.setattr(LoadedTable, "history", spy)
    db.insert({"id": 99})
    log = db._log
    when = log.commit_time(db.version)
    assert limits == [1]
    raw = DeltaTable(str(tmp_path / "t")).history()
    times = {int(e["version"]): int(e["timestamp"]) for e in raw}
    assert int(when.timestamp() * 1000) == times[db.version]
    # an older version not seen yet: read back to it, then known
    fresh = DatabaseOps.open(tmp_path / "t", engine="local")
    limits.clear()
    assert int(fresh._log.commit_time(25).timestamp() * 1000) == times[25]
    assert limits == [db.version - 25 + 1]
    assert int(fresh._log.commit_time(27).timestamp() * 1000) == times[27]
    assert limits == [db.version - 25 + 1]  # cached on the way
    db.close()
    fresh.close()
