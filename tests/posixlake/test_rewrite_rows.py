"""A few rows replaced in place by posixlake rewriting the files that hold them
(``posixlake.delta._rewrite``): the same rows, in the same places, with exact statistics,
in one commit that delta-rs conflict-checks; delta-rs' UPDATE where that commit would
not be exact."""

from __future__ import annotations

import datetime
import decimal
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import posixlake.delta._rewrite as rewrite
from posixlake import DatabaseOps
from posixlake.delta.datafiles import read_data_file

_SCHEMA = {
    "id": "Int64",
    "small": "Int16",
    "name": "String",
    "score": "Float64",
    "day": "Date32",
    "ok": "Boolean",
}
_DAY0 = datetime.date(2024, 1, 1)


def _row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "small": None if i % 7 == 0 else i % 300,
        "name": None if i % 5 == 0 else f"n{i}, 'q' \"x\"",
        "score": i / 8 + 0.25,
        "day": _DAY0 + datetime.timedelta(days=i % 400),
        "ok": None if i % 11 == 0 else i % 2 == 0,
    }


def _make(path: Path, files: int = 3, per_file: int = 200) -> DatabaseOps:
    db = DatabaseOps.create(path, _SCHEMA, engine="local")
    for f in range(files):
        db.insert([_row(i) for i in range(f * per_file, (f + 1) * per_file)])
    return db


def _actions(path: Path, version: int) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {"add": [], "remove": []}
    for line in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        action = json.loads(line)
        for kind in out:
            if kind in action:
                out[kind].append(action[kind])
    return out


def _file_rows(path: Path, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(path / name).to_pylist()
    return rows


def _stats_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Delta statistics of ``rows`` computed from the values (dates as ISO text)."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for c in _SCHEMA:
        values = [r[c] for r in rows if r[c] is not None]
        nulls[c] = len(rows) - len(values)
        if values:
            lo, hi = min(values), max(values)
            mins[c] = lo.isoformat() if isinstance(lo, datetime.date) else lo
            maxs[c] = hi.isoformat() if isinstance(hi, datetime.date) else hi
    return {"numRecords": len(rows), "minValues": mins, "maxValues": maxs, "nullCount": nulls}


def test_rows_replaced_in_their_files_in_place_with_exact_stats(tmp_path: Path) -> None:
    """Two rows in two files: one commit removing exactly those two files and adding two
    whose rows are the old files' rows with the two replaced at their positions, with
    statistics true to the new values (a query on a new value finds it)."""
    path = tmp_path / "t"
    db = _make(path)
    old = {a["path"]: _file_rows(path, a["path"]) for a in _actions(path, 1)["add"]}
    old |= {
        a["path"]: _file_rows(path, a["path"]) for v in (2, 3) for a in _actions(path, v)["add"]
    }
    a, b = _row(17), _row(450)
    new_a = {**a, "id": 10_000, "name": None, "score": -1e300, "day": datetime.date(1999, 1, 1)}
    new_b = {**b, "small": -32768, "ok": None, "name": "zzz \u00fc"}
    version = db.version
    assert db.replace_rows(delete=[a, b], insert=[new_a, new_b]) == (2, 2)
    assert db.version == version + 1
    assert db.history(1)[0].operation == "UPDATE"
    actions = _actions(path, version + 1)
    removed = sorted(r["path"] for r in actions["remove"])
    holding = sorted(p for p, rows in old.items() if a in rows or b in rows)
    assert removed == holding and len(removed) == 2
    for add in actions["add"]:
        rows = _file_rows(path, add["path"])
        (before,) = [
            old[p]
            for p in removed
            if len(old[p]) == len(rows)
            and (sum(x != y for x, y in zip(old[p], rows, strict=True)) == 1)
        ]
        changed = [i for i, (x, y) in enumerate(zip(before, rows, strict=True)) if x != y]
        assert len(changed) == 1
        assert (before[changed[0]], rows[changed[0]]) in ((a, new_a), (b, new_b))
        assert json.loads(add["stats"]) == _stats_of(rows)
        assert add["dataChange"] is True
    got = db.query("SELECT name FROM data WHERE id = 10000").to_pylist()
    assert got == [{"name": None}]
    expect = Counter(json.dumps(r, default=str) for p in old for r in old[p])
    expect -= Counter([json.dumps(a, default=str), json.dumps(b, default=str)])
    expect += Counter([json.dumps(new_a, default=str), json.dumps(new_b, default=str)])
    assert Counter(json.dumps(r, default=str) for r in db.to_arrow().to_pylist()) == expect
    db.close()


def test_by_key_the_new_row_replaces_the_one_holding_the_key(tmp_path: Path) -> None:
    path = tmp_path / "t"
    db = _make(path, files=2, per_file=100)
    db.set_primary_key("id")
    version = db.version
    old = _row(42)
    stale = {**old, "name": "what the writer read", "score": 0.5}  # changed since
    new = {**old, "name": "new", "score": 3.5}
    assert db.replace_rows(delete=[stale], insert=[new], key=["id"]) == (1, 1)
    assert db.history(1)[0].operation == "UPDATE"
    assert len(_actions(path, version + 1)["remove"]) == 1
    rows = {r["id"]: r for r in db.to_arrow().to_pylist()}
    assert rows[42] == new and len(rows) == 200
    db.close()


def test_a_row_held_twice_or_not_at_all_is_never_rewritten_here(tmp_path: Path) -> None:
    """The rewrite finds each row exactly once or writes nothing (the MERGE runs)."""
    path = tmp_path / "t"
    db = _make(path, files=1, per_file=50)
    db.insert([_row(3)])
    assert db.replace_rows(delete=[_row(3)], insert=[{**_row(3), "name": "one"}]) == (1, 1)
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "MERGE"
    names = [r["name"] for r in db.to_arrow().to_pylist() if r["id"] == 3]
    assert sorted(names, key=str) == sorted(["one", _row(3)["name"]], key=str)
    files = set((path).glob("*.parquet"))
    assert db.replace_rows(delete=[_row(999)], insert=[_row(1000)]) == (0, 1)
    assert len(set(path.glob("*.parquet")) - files) == 1  # the MERGE's file, no other
    db.close()


@pytest.mark.parametrize("feature", ["cdf", "constraint"])
def test_tables_whose_features_a_file_commit_would_break_keep_delta_rs_update(
    tmp_path: Path, feature: str
) -> None:
    path = tmp_path / "t"
    db = _make(path, files=1, per_file=20)
    dt = DeltaTable(str(path))
    if feature == "cdf":
        dt.alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    else:
        dt.alter.add_constraint({"id_nonneg": "id >= 0"})
    assert db.replace_rows(delete=[_row(4)], insert=[{**_row(4), "name": "x"}]) == (1, 1)
    raw = DeltaTable(str(path)).history(1)[0]
    assert raw["operation"] == "UPDATE"  # delta-rs' own
    if feature == "cdf":
        assert list((path / "_change_data").glob("*.parquet"))
    db.close()


def test_a_concurrent_rewrite_of_the_same_file_is_a_conflict_and_re_planned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer rewrites the file after this replace read it and before it
    commits: delta-rs refuses the commit (the file it removes is gone), the file this
    replace wrote is deleted, and the retry re-plans on the new version: both changes
    are in the table, no row lost or doubled, no stray file left."""
    path = tmp_path / "t"
    db = _make(path, files=1, per_file=100)
    other = DatabaseOps.open(path, engine="local")
    real_write = rewrite._write
    calls = {"n": 0}

    def racing_write(fs: Any, snap: Any, table: pa.Table) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:  # the first attempt: another writer commits meanwhile
            assert other.replace_rows(delete=[_row(7)], insert=[{**_row(7), "name": "other"}])
        return real_write(fs, snap, table)

    monkeypatch.setattr(rewrite, "_write", racing_write)
    assert db.replace_rows(delete=[_row(8)], insert=[{**_row(8), "name": "mine"}]) == (1, 1)
    assert calls["n"] == 3  # ours, the other writer's (the same code), ours re-planned
    assert [c.operation for c in db.history(2)] == ["UPDATE", "UPDATE"]
    rows = {r["id"]: r["name"] for r in db.to_arrow().to_pylist()}
    assert len(rows) == 100 and db.to_arrow().num_rows == 100
    assert rows[7] == "other" and rows[8] == "mine"
    active = {Path(u.removeprefix("file://")).name for u in DeltaTable(str(path)).file_uris()}
    written_since = {p.name for p in path.glob("*.parquet")}
    logged = {a["path"] for v in range(db.version + 1) for a in _actions(path, v)["add"]}
    assert written_since <= logged  # the losing attempt's file was deleted
    assert len(active) == 1
    other.close()
    db.close()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(
    picks=st.lists(st.integers(0, 299), min_size=1, max_size=6, unique=True),
    seed=st.integers(0, 1000),
)
def test_same_rows_and_order_as_delta_rs_update(
    tmp_path_factory: pytest.TempPathFactory, picks: list[int], seed: int
) -> None:
    """Per file, the rows after the rewrite are delta-rs' UPDATE's, in the same order."""
    base = tmp_path_factory.mktemp("same")
    results = []
    for ours in (True, False):
        path = base / ("ours" if ours else "delta_rs")
        db = _make(path, files=3, per_file=100)
        delete = [_row(i) for i in picks]
        insert = [
            {**r, "name": f"c{seed}-{k}", "score": float(seed + k) + 0.5}
            for k, r in enumerate(delete)
        ]
        if not ours:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(rewrite, "_applies", lambda log: False)
                assert db.replace_rows(delete=delete, insert=insert) == (len(picks),) * 2
            assert DeltaTable(str(path)).history(1)[0]["operation"] == "UPDATE"
        else:
            assert db.replace_rows(delete=delete, insert=insert) == (len(picks),) * 2
        results.append(db.to_arrow().to_pylist())
        db.close()
    assert results[0] == results[1]


def test_the_reads_statistics_narrow_to_the_files_that_may_hold_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t"
    db = _make(path, files=5, per_file=100)
    read: list[str] = []
    real = read_data_file

    def spy(fs: Any, spec: Any, f: Any, **kw: Any) -> Any:
        read.append(f.path)
        return real(fs, spec, f, **kw)

    monkeypatch.setattr("posixlake.delta._rewrite.read_data_file", spy)
    assert db.replace_rows(delete=[_row(250)], insert=[{**_row(250), "name": "x"}]) == (1, 1)
    assert len(read) == 1  # ids 200..299 only in the third file
    db.close()


@pytest.mark.parametrize("bound", ["MAX_ROWS", "MAX_BYTES"])
def test_files_too_large_to_read_whole_keep_delta_rs_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    path = tmp_path / "t"
    db = _make(path, files=1, per_file=100)
    (data,) = path.glob("*.parquet")
    monkeypatch.setattr(rewrite, bound, 99 if bound == "MAX_ROWS" else data.stat().st_size - 1)
    assert db.replace_rows(delete=[_row(5)], insert=[{**_row(5), "name": "x"}]) == (1, 1)
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "UPDATE"
    assert pc.sum(pc.equal(db.to_arrow()["name"], "x")).as_py() == 1
    db.close()


def test_timestamps_decimals_and_binary_are_rewritten_in_place_exactly(tmp_path: Path) -> None:
    """Types without an exact SQL literal (which the UPDATE cannot take: they went through
    the MERGE) are matched by Arrow's equality: nanosecond-free microseconds, zoned
    timestamps, decimals and bytes keep every digit; a NaN is never matched this way."""
    path = tmp_path / "t"
    db = DatabaseOps.create(
        path,
        {
            "id": "Int64",
            "at": "Timestamp",
            "local": "TimestampNtz",
            "price": "Decimal(38,10)",
            "blob": "Binary",
            "x": "Float64",
        },
        engine="local",
    )
    base = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=datetime.UTC)
    rows = [
        {
            "id": i,
            "at": base + datetime.timedelta(microseconds=i),
            "local": (base + datetime.timedelta(days=i)).replace(tzinfo=None),
            "price": decimal.Decimal(f"{i}.0000000001"),
            "blob": bytes([i, 0, 255]),
            "x": float("nan") if i == 3 else i + 0.5,
        }
        for i in range(10)
    ]
    db.insert(rows)
    stored = db.to_arrow().to_pylist()
    new = {**stored[5], "price": decimal.Decimal("12345678901234567890.0000000009"), "blob": b""}
    assert db.replace_rows(delete=[stored[5]], insert=[new]) == (1, 1)
    assert db.history(1)[0].operation == "UPDATE"
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "WRITE"
    got = {r["id"]: r for r in db.to_arrow().to_pylist()}
    assert got[5] == new and got[4] == stored[4]
    # a NaN row: Arrow's equality never finds it, the MERGE does (NaN equals NaN there)
    nan_row = next(r for r in stored if r["id"] == 3)
    assert db.replace_rows(delete=[nan_row], insert=[{**nan_row, "blob": b"z"}]) == (1, 1)
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "MERGE"
    assert {r["id"]: r["blob"] for r in db.to_arrow().to_pylist()}[3] == b"z"
    db.close()
