"""Latency percentiles and contention figures in ``get_metrics`` (issue 14, metrics)."""

from __future__ import annotations

from pathlib import Path

import pytest

from posixlake import DatabaseOps
from posixlake._metrics import percentiles
from posixlake.errors import InvalidOperation, QueryError


def test_percentiles_are_nearest_rank() -> None:
    p = percentiles([float(v) for v in range(100, 0, -1)], 250)
    assert (p.count, p.p50, p.p90, p.p99, p.max) == (250, 50.0, 90.0, 99.0, 100.0)
    assert percentiles([], 0).p50 == 0.0


def test_get_metrics_times_each_operation(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine="local", primary_key="id")
    for i in range(5):
        db.insert({"id": i})
    db.query("SELECT * FROM data WHERE id = 3")
    with pytest.raises(QueryError):
        db.query("SELECT nope FROM data")
    db.health_check()
    db.insert_buffered({"id": 10})
    m = db.get_metrics()
    assert m.latency_ms["insert"].count == 5
    assert m.latency_ms["query"].count == 2  # failed calls are timed too
    assert m.latency_ms["health"].count == 1
    assert m.latency_ms["commit"].count == 5
    assert m.buffered_rows == 1
    assert (m.commit_conflicts, m.commit_retries, m.commits_given_up) == (0, 0, 0)
    assert m.errors == 1
    db.close()


def test_commit_timeout_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLAKE_COMMIT_TIMEOUT", "7.5")
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine="local")
    assert db.commit_timeout == 7.5
    db.commit_timeout = 30
    assert db.commit_timeout == 30.0
    with pytest.raises(InvalidOperation):
        db.commit_timeout = 0
    monkeypatch.setenv("POSIXLAKE_COMMIT_TIMEOUT", "soon")
    with pytest.raises(InvalidOperation):
        DatabaseOps.open(tmp_path / "t", engine="local")
