"""replace_rows and data files: what a one-row change after a dense rewrite reads and rewrites.

A row change rewrites every file holding a matched row (delta-rs writes no deletion
vectors), so the files a MERGE writes must stay small (``delta.targetFileSize`` on the
tables posixlake creates) and the MERGE must skip, by the files' statistics, the files
that cannot hold a row it deletes.
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from posixlake import DatabaseOps

_DAY0 = datetime.date(2020, 1, 1)


def _active_files(path: Path) -> list[str]:
    return sorted(
        Path(u.removeprefix("file://")).as_uri() for u in DeltaTable(str(path)).file_uris()
    )


def _commit_actions(path: Path, version: int) -> dict[str, list[dict[str, Any]]]:
    actions: dict[str, list[dict[str, Any]]] = {"add": [], "remove": []}
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    for line in text.splitlines():
        action = json.loads(line)
        for kind in actions:
            if kind in action:
                actions[kind].append(action[kind])
    return actions


def _merge_metrics(path: Path) -> dict[str, Any]:
    metrics: dict[str, Any] = DeltaTable(str(path)).history(1)[0]["operationMetrics"]
    return metrics


def _bag(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in table.to_pylist())


def test_tables_posixlake_creates_target_small_files(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "ours", {"id": "Int64"}, engine="local")
    config = DeltaTable(str(tmp_path / "ours")).metadata().configuration
    assert config["delta.targetFileSize"] == str(32 << 20)  # 32 MiB, as docs/design.md says
    db.close()


def test_a_table_someone_else_created_keeps_its_properties(tmp_path: Path) -> None:
    """posixlake never sets delta.targetFileSize on a table it did not create."""
    path = tmp_path / "theirs"
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    db = DatabaseOps.open(path, engine="local")
    db.insert([{"id": 4}])
    assert db.replace_rows(delete=[{"id": 1}], insert=[{"id": 5}]) == (1, 1)
    db.close()
    assert "delta.targetFileSize" not in DeltaTable(str(path)).metadata().configuration


def test_one_row_replace_after_a_dense_rewrite_touches_only_the_file_holding_it(
    tmp_path: Path,
) -> None:
    """After a dense rewrite (a quarter of the rows, as ``sed -i`` does) in files of the
    table's target size, a one-row replace removes only the file holding that row and scans
    only it (and the files its statistics do not rule out), even when the row's only
    prunable values are a date and a NULL (no integer or string to narrow the MERGE by)."""
    path = tmp_path / "t"
    db = DatabaseOps.create(
        path, {"day": "Date32", "note": "String", "qty": "Float64"}, engine="local"
    )
    # the test's stand-in for 32 MiB: a few KiB, so that a few thousand rows make files
    DeltaTable(str(path)).alter.set_table_properties({"delta.targetFileSize": "10000"})
    n = 4000
    for start in range(0, n, 1000):  # four inserts, each a range of days
        days = [_DAY0 + datetime.timedelta(days=i) for i in range(start, start + 1000)]
        db.insert(
            {
                "day": days,
                "note": [None if i % 2 else f"n{i}" for i in range(start, start + 1000)],
                "qty": [i / 4 for i in range(start, start + 1000)],
            }
        )
    before = db.to_arrow()
    index = pc.cast(pc.multiply(before["qty"], 4), pa.int64())  # row i has qty i / 4
    dense = before.filter(pc.equal(pc.bit_wise_and(index, 3), 0))
    changed = dense.set_column(2, "qty", pc.negate(dense["qty"]))
    assert db.replace_rows(delete=dense, insert=changed) == (dense.num_rows, dense.num_rows)
    # a file the row's statistics surely rule out (later days, no NULL note): the MERGE
    # writes the dense rewrite's rows in an order of its own, so under load every file it
    # wrote may span every day, and then no file would be left to skip
    later = [_DAY0 + datetime.timedelta(days=n + i) for i in range(10)]
    db.insert({"day": later, "note": [f"later {i}" for i in range(10)], "qty": [0.5] * 10})
    after_dense = db.to_arrow()
    files = _active_files(path)
    assert len(files) >= 4  # the dense rewrite wrote files of the target size, not one

    holding = _holding(files, {"day": _DAY0 + datetime.timedelta(days=2501), "note": None})
    assert len(holding) == 1
    # a one-row change (what an edit of one line becomes): rewritten in place
    row = {"day": _DAY0 + datetime.timedelta(days=2501), "note": None, "qty": 2501 / 4}
    version = db.version
    assert db.replace_rows(delete=[row], insert=[{**row, "qty": -1.0}]) == (1, 1)
    assert db.version == version + 1
    assert _removed(path, version + 1) == holding

    # one row replaced by two (a MERGE): it reads only the files whose statistics admit
    # the row (the one holding it, and the files of the dense rewrite's new rows, which
    # span every day), none other, and removes only the file holding it
    files = _active_files(path)
    holding = _holding(files, {"day": row["day"], "note": None})
    version = db.version
    changed = {**row, "qty": -1.0}
    two = [{**row, "qty": -2.0}, {**row, "qty": -3.0}]
    assert db.replace_rows(delete=[changed], insert=two) == (1, 2)
    assert _removed(path, version + 1) == holding
    stats = pa.table(DeltaTable(str(path), version=version).get_add_actions(flatten=True))
    admit = pc.and_(
        pc.and_(
            pc.less_equal(stats["min.day"], row["day"]),
            pc.greater_equal(stats["max.day"], row["day"]),
        ),
        pc.greater(stats["null_count.note"], 0),
    )
    admitted = pc.sum(pc.cast(admit, pa.int64())).as_py()
    assert admitted < len(files)
    metrics = _merge_metrics(path)
    assert metrics["num_target_files_scanned"] == admitted
    assert metrics["num_target_files_skipped_during_scan"] == len(files) - admitted
    expected = _bag(after_dense)
    expected -= Counter([tuple(row.values())])
    expected += Counter([(row["day"], None, -2.0), (row["day"], None, -3.0)])
    assert _bag(db.to_arrow().select(["day", "note", "qty"])) == expected
    # the one-row change was one UPDATE (in place: the file holding the row rewritten by
    # posixlake, a Delta WRITE carrying posixlake.operation), the one row by two a MERGE
    assert [c.operation for c in db.history(2)] == ["MERGE", "UPDATE"]
    raw = DeltaTable(str(path)).history(2)
    assert [h["operation"] for h in raw] == ["MERGE", "WRITE"]
    assert raw[1]["posixlake.commitOperation"] == "UPDATE"
    db.close()


def _holding(files: list[str], values: dict[str, Any]) -> list[str]:
    """The files (URIs) holding a row with these values."""
    out = []
    for f in files:
        t = pq.read_table(Path(f.removeprefix("file://")))
        mask = None
        for c, v in values.items():
            m = pc.is_null(t[c]) if v is None else pc.equal(t[c], v)
            mask = m if mask is None else pc.and_(mask, m)
        if pc.any(mask).as_py():
            out.append(f)
    return out


def _removed(path: Path, version: int) -> list[str]:
    """The files (URIs) the commit of ``version`` removed."""
    return sorted(
        Path(str(path), r["path"]).as_uri() for r in _commit_actions(path, version)["remove"]
    )


def test_range_predicates_cover_dates_and_nulls() -> None:
    from posixlake.delta._rows import _ranges

    few = pa.table(
        {
            "d": pa.array([datetime.date(2024, 1, 2), None, datetime.date(2024, 1, 1)]),
            "n": pa.array([None, None, None], pa.string()),
            "i": pa.array([1, None, 3], pa.int64()),
            "f": pa.array([1.5, None, 2.5]),
        }
    )
    assert _ranges(few, ["d", "n", "i", "f"], "t.") == [
        "(t.\"d\" IS NULL OR t.\"d\" IN (CAST('2024-01-01' AS DATE), CAST('2024-01-02' AS DATE)))",
        't."n" IS NULL',
        '(t."i" IS NULL OR t."i" IN (1, 3))',
    ]
    days = [_DAY0 + datetime.timedelta(days=i) for i in [*range(20), *range(5000, 5020)]]
    (clause,) = _ranges(pa.table({"d": days}), ["d"])
    assert clause == (
        "((\"d\" >= CAST('2020-01-01' AS DATE) AND \"d\" <= CAST('2020-01-20' AS DATE)) OR "
        "(\"d\" >= CAST('2033-09-09' AS DATE) AND \"d\" <= CAST('2033-09-28' AS DATE)))"
    )


_TYPES = {
    "i8": "Int8",
    "i16": "Int16",
    "i32": "Int32",
    "i64": "Int64",
    "f32": "Float32",
    "f64": "Float64",
    "b": "Boolean",
    "d": "Date32",
    "s": "String",
}


def _typed_row(i: int, **changes: Any) -> dict[str, Any]:
    row = {
        "i8": -128 + i,
        "i16": 2**15 - 1 - i,
        "i32": 2**31 - 1 - i,
        "i64": -(2**63) + i,
        "f32": 0.1 + i,
        "f64": 1e300 / (i + 1),
        "b": i % 2 == 0,
        "d": _DAY0 + datetime.timedelta(days=i),
        "s": f"it's \\\\ {i} \\n 'ü'",
    }
    return {**row, **changes}


def test_a_few_changed_rows_are_rewritten_in_place_exactly(tmp_path: Path) -> None:
    """n rows replaced by n rows, each in the table once: one UPDATE whose literals keep
    every value exact (extremes, quotes, backslashes, NULLs, float32); rows repeated, and
    values a literal cannot match exactly (NaN, 0.0), go through the MERGE."""
    db = DatabaseOps.create(tmp_path / "t", _TYPES, engine="local")
    rows = [_typed_row(i) for i in range(6)]
    rows[5] = {c: None for c in _TYPES}
    db.insert([*rows, rows[4]])  # row 4 twice
    table = db.to_arrow()  # the values as stored (float32 rounded)
    stored = table.to_pylist()
    new = [
        {**stored[1], "s": None, "f32": 2.5, "i64": 2**63 - 1},
        {**stored[2], "d": None, "b": None, "s": "x'y"},
        {**stored[5], "s": "was null", "i8": 127},
    ]
    version = db.version
    assert db.replace_rows(delete=[stored[1], stored[2], stored[5]], insert=new) == (3, 3)
    assert db.history(1)[0].operation == "UPDATE"
    assert db.version == version + 1
    want = Counter(_key(r) for r in [stored[0], stored[3], stored[4], stored[4], *new])
    assert Counter(_key(r) for r in db.to_arrow().to_pylist()) == want
    # a repeated row: one copy goes (MERGE), the other stays
    assert db.replace_rows(delete=[stored[4]], insert=[{**stored[4], "s": "one"}]) == (1, 1)
    assert db.history(1)[0].operation == "MERGE"
    got = Counter(_key(r) for r in db.to_arrow().to_pylist())
    assert got[_key(stored[4])] == 1 and got[_key({**stored[4], "s": "one"})] == 1


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in _TYPES)


def test_in_place_by_key_and_keys_gone_meanwhile(tmp_path: Path) -> None:
    """By key: a key held once is updated in place; a key no row holds (deleted by another
    writer) makes the replace a MERGE, which inserts the new row."""
    db = DatabaseOps.create(
        tmp_path / "t", {"a": "Int64", "b": "String", "v": "Float64", "w": "String"}, engine="local"
    )
    db.insert([{"a": i, "b": f"k{i}", "v": i + 0.5, "w": "x"} for i in range(10)])
    key = ["a", "b"]
    assert db.replace_rows(
        delete=[{"a": 3, "b": "k3", "v": 3.5, "w": "x"}],
        insert=[{"a": 3, "b": "k3", "v": -1.5, "w": "x"}],
        key=key,
    ) == (1, 1)
    assert db.history(1)[0].operation == "UPDATE"
    db.delete_rows_where("a = 4")
    assert db.replace_rows(
        delete=[{"a": 4, "b": "k4", "v": 4.5, "w": "x"}],
        insert=[{"a": 4, "b": "k4", "v": 9.5, "w": "x"}],
        key=key,
    ) == (0, 1)
    assert db.history(1)[0].operation == "MERGE"
    # another writer changed a value the edit leaves as it read it: the new row wins whole
    db.update("a = 5", values={"v": 100.0})
    assert db.replace_rows(
        delete=[{"a": 5, "b": "k5", "v": 5.5, "w": "x"}],
        insert=[{"a": 5, "b": "k5", "v": 5.5, "w": "y"}],
        key=key,
    ) == (1, 1)
    assert db.history(1)[0].operation == "UPDATE"
    got = {(r["a"], r["b"]): (r["v"], r["w"]) for r in db.to_arrow().to_pylist()}
    assert got == {
        **{(i, f"k{i}"): (i + 0.5, "x") for i in range(10)},
        (3, "k3"): (-1.5, "x"),
        (4, "k4"): (9.5, "x"),
        (5, "k5"): (5.5, "y"),
    }
