"""`SegmentKeys.repeated_keys` learned incrementally equals the keys a version repeats.

Each step commits to a keyed table (through the API, or behind its back with delta-rs,
which can repeat keys: two processes inserting the same key at once); after each, one
long-lived `SegmentKeys` (incremental from the last version without repeats) and a new
one (from scratch) must both give exactly the keys the version holds more than once.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nfs.table.segkeys import SegmentKeys
from nfs.table.segments import Segmenter, SegmentStore
from posixlake import DatabaseOps

_IDS = st.lists(st.integers(0, 40), min_size=1, max_size=6)
_STEP: st.SearchStrategy[tuple[str, list[int]]] = st.one_of(
    st.tuples(st.just("insert"), _IDS),  # API insert of new keys (those not held yet)
    st.tuples(st.just("update"), _IDS),  # API update: files rewritten, keys kept
    st.tuples(st.just("delete"), _IDS),
    st.tuples(st.just("behind"), _IDS),  # delta-rs append: may repeat keys
    st.tuples(st.just("optimize"), st.just([])),
)


def _truth(db: DatabaseOps, key: list[str]) -> set[tuple[object, ...]]:
    rows = db.to_arrow().select(key)
    counts = rows.group_by(key).aggregate([([], "count_all")])
    twice = counts.filter(pc.greater(counts["count_all"], 1))
    return set(zip(*(twice.column(k).to_pylist() for k in key), strict=True))


def _found(keys: SegmentKeys, version: int, key: list[str]) -> set[tuple[object, ...]]:
    got = keys.repeated_keys(version, key)
    assert got is not None
    return set(zip(*(got.column(k).to_pylist() for k in key), strict=True))


def _run(steps: list[tuple[str, list[int]]], key: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        schema = {"id": "Int64", "part": "Int64", "name": "String"}
        db = DatabaseOps.create(root / "t", schema, primary_key=key, engine="local")
        db.insert([{"id": i, "part": i % 2, "name": f"n{i}"} for i in range(0, 40, 3)])
        store = SegmentStore(root / "cache")
        incremental = SegmentKeys(Segmenter(db, store, workers=1))
        assert _found(incremental, db.version, key) == set()
        for n, (kind, ids) in enumerate(steps):
            held = {r["id"] for r in db.to_arrow().select(["id"]).to_pylist()}
            in_list = ", ".join(map(str, sorted(set(ids))))
            if kind == "insert":
                fresh = sorted(set(ids) - held)
                if not fresh:
                    continue
                db.insert([{"id": i, "part": i % 2, "name": f"i{n}"} for i in fresh])
            elif kind == "update":
                db.update(f"id IN ({in_list})", {"name": f"u{n}"})
            elif kind == "delete":
                db.delete_rows_where(f"id IN ({in_list})")
            elif kind == "behind":
                rows = {"id": ids, "part": [i % 2 for i in ids], "name": [f"b{n}"] * len(ids)}
                write_deltalake(db.uri, pa.table(rows, schema=db.arrow_schema), mode="append")
            else:
                db.optimize()
            version = db.version
            want = _truth(db, key)
            assert _found(incremental, version, key) == want
            scratch = SegmentKeys(Segmenter(db, SegmentStore(root / f"cache{n}"), workers=1))
            assert _found(scratch, version, key) == want
            restarted = SegmentKeys(Segmenter(db, store, workers=1))  # from the kept note
            assert _found(restarted, version, key) == want


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEP, min_size=1, max_size=6))
def test_repeated_keys_learned_incrementally_are_the_versions_repeats(
    steps: list[tuple[str, list[int]]],
) -> None:
    _run(steps, ["id"])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEP, min_size=1, max_size=5))
def test_repeated_keys_of_a_two_column_key(steps: list[tuple[str, list[int]]]) -> None:
    _run(steps, ["id", "part"])


def _overlapping(root: Path) -> DatabaseOps:
    db = DatabaseOps.create(
        root / "t", {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
    )
    for start in range(0, 400, 100):  # four files, key ranges overlapping
        db.insert([{"id": i * 4 + start // 100, "name": "x"} for i in range(100)])
    return db


def _files_read(keys: SegmentKeys, version: int) -> tuple[set[tuple[object, ...]], int]:
    """The keys ``version`` repeats, and how many files' key columns were read for them."""
    import nfs.table.segkeys as segkeys

    read: list[str] = []
    original = segkeys._key_columns

    def counting(fs, plan, data_file, schema):  # type: ignore[no-untyped-def]
        read.append(data_file.path)
        return original(fs, plan, data_file, schema)

    segkeys._key_columns = counting
    try:
        return _found(keys, version, ["id"]), len(read)
    finally:
        segkeys._key_columns = original


def test_a_file_rewritten_with_the_same_keys_reads_only_it_and_the_one_it_replaced(
    tmp_path: Path,
) -> None:
    """After a version known to hold each key once, an UPDATE that rewrites one file
    reads the keys of that file and of the one it replaced, not of the other files."""
    db = _overlapping(tmp_path)
    keys = SegmentKeys(Segmenter(db, SegmentStore(tmp_path / "cache"), workers=1))
    found, read = _files_read(keys, db.version)  # from scratch: every file (overlapping)
    assert found == set() and read >= 4
    db.update("id = 5", {"name": "changed"})
    assert _files_read(keys, db.version) == (set(), 2)
    write_deltalake(db.uri, pa.table({"id": [5], "name": ["again"]}), mode="append")
    assert _found(keys, db.version, ["id"]) == {(5,)}


def test_a_restart_starts_from_the_version_an_earlier_run_found_clean(tmp_path: Path) -> None:
    """The last version known to hold each key once is noted beside the segments: a new
    reader (a server restarted) reads only what changed since; a damaged note, or one
    whose files are not that version's, is not trusted."""
    db = _overlapping(tmp_path)
    store = SegmentStore(tmp_path / "cache")
    found, read = _files_read(SegmentKeys(Segmenter(db, store, workers=1)), db.version)
    assert found == set() and read >= 4
    db.update("id = 5", {"name": "changed"})
    assert _files_read(SegmentKeys(Segmenter(db, store, workers=1)), db.version) == (set(), 2)

    notes = list((tmp_path / "cache").glob("keys-*.json"))
    assert len(notes) == 1
    notes[0].write_text("{not json")
    found, read = _files_read(SegmentKeys(Segmenter(db, store, workers=1)), db.version)
    assert found == set() and read >= 4
    saved = json.loads(notes[0].read_text())
    assert SegmentKeys(Segmenter(db, store, workers=1))._load_clean(notes[0].name) is not None
    saved["files"] = saved["files"][1:]  # not what that version holds
    notes[0].write_text(json.dumps(saved))
    assert SegmentKeys(Segmenter(db, store, workers=1))._load_clean(notes[0].name) is None
    write_deltalake(db.uri, pa.table({"id": [9], "name": ["again"]}), mode="append")
    found, read = _files_read(SegmentKeys(Segmenter(db, store, workers=1)), db.version)
    assert found == {(9,)} and read >= 5
