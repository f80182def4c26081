"""Segmented renderings (nfs.table.segments) on real Delta tables, local engine.

The invariant: a version's segmented bytes equal a full rendering (``render_csv``) of that
version's rows as delta-rs reads them, put in segment order (the add actions sorted by
modification time and path, each file's rows in file order); reads at any offset are
slices of those bytes; a restart reuses the on-disk segments and never serves another
table's or file's bytes.
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import posixlake.delta._snapshot as snapshots
from nfs.table.render_cache import RenderCache
from nfs.table.segments import Plan, SegmentedRendering, Segmenter, SegmentStore
from posixlake import DatabaseOps
from posixlake.csvcodec import render_csv
from posixlake.errors import PosixLakeError
from tests.storage.servers import LocalServer

SCHEMA = {"id": "Int64", "name": "String", "score": "Float64", "city": "String"}
_text = st.text(alphabet=st.sampled_from("ab ,\"\n\r'é∑x"), max_size=6)
_cities = st.sampled_from(["Paris", "", "a,b", 'q"t', "Zürich"]) | st.none()
_scores = st.floats(allow_nan=True, allow_infinity=True) | st.none()


def _rows(start: int, n: int, draw: Any) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "name": pa.array([draw(_text | st.none()) for _ in range(n)], pa.string()),
            "score": pa.array([draw(_scores) for _ in range(n)], pa.float64()),
            "city": pa.array([draw(_cities) for _ in range(n)], pa.string()),
        }
    )


def _expected(db: DatabaseOps, version: int) -> bytes:
    """The full rendering of ``version``'s rows in segment order (the order from the log)."""
    full = db.to_arrow(version=version)
    snap = db._log.at(version)
    actions = snap.add_actions().to_pylist()
    actions.sort(key=lambda a: (a["modification_time"], urllib.parse.unquote(a["path"])))
    ids: list[int] = []
    for a in actions:
        path = os.path.join(snap.uri, urllib.parse.unquote(a["path"]))
        ids.extend(pq.read_table(path, columns=["id"]).column("id").to_pylist())
    assert sorted(ids) == sorted(full.column("id").to_pylist())
    order = pc.index_in(pa.array(ids, pa.int64()), value_set=full.column("id"))
    return render_csv(full.take(order))


def _bytes(r: SegmentedRendering) -> bytes:
    out, eof = r.read(0, r.size + 1)
    assert eof
    return bytes(out)


_op = st.sampled_from(["append", "append", "delete", "update", "compact", "zorder", "vacuum"])


@settings(max_examples=12, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), partitioned=st.booleans(), ops=st.lists(_op, min_size=1, max_size=6))
def test_segmented_bytes_equal_a_full_render_in_segment_order(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, partitioned: bool, ops: list[str]
) -> None:
    work = tmp_path_factory.mktemp("seg")
    db = DatabaseOps.create(
        work / "t", SCHEMA, engine="local", partition_by=["city"] if partitioned else None
    )
    store = SegmentStore(work / "cache")
    seg = Segmenter(db, store, workers=2)
    next_id = 0
    seen: dict[int, bytes] = {}
    previous: SegmentedRendering | None = None
    for op in ops:
        if op == "append":
            n = data.draw(st.integers(1, 5))
            db.insert(_rows(next_id, n, data.draw))
            next_id += n
        elif op == "delete":
            db.delete_rows_where(f"id % 3 = {data.draw(st.integers(0, 2))}")
        elif op == "update":
            db.update("id % 2 = 0", {"score": 1.5})
        elif op == "compact":
            db.optimize.compact()
        elif op == "zorder":
            db.optimize.z_order(["score"])
        else:
            db.vacuum(0, enforce_retention_duration=False)
        version = db.version
        expected = _expected(db, version)
        r = seg(version)
        got = _bytes(r)
        assert got == expected
        seen[version] = expected
        # reads anywhere are slices; .data is the same bytes
        for _ in range(3):
            off = data.draw(st.integers(0, r.size + 2))
            count = data.draw(st.integers(0, r.size + 2))
            chunk, eof = r.read(off, count)
            assert bytes(chunk) == expected[off : off + count]
            assert eof == (off + count >= r.size)
        assert bytes(r.data) == expected
        assert sum(length for _, _, length in r.segments) + len(r.header) == r.size
        if op == "append" and previous is not None:
            # appends land at the end (new files sort after old ones)
            assert got.startswith(_bytes(previous)) or _same_millisecond(db)
        previous = r
    # a restart: a new store and segmenter on the same directory render nothing again
    seg.close()  # (a one-row segment's file is written after its rendering)
    seg2 = Segmenter(db, SegmentStore(work / "cache"), workers=2)
    for version, expected in seen.items():
        try:
            r = seg2(version)
        except PosixLakeError:
            continue  # vacuumed, and its segments were not all cached
        assert _bytes(r) == expected
    assert seg2.stats.rendered == 0
    seg2.close()


_plan_op = st.sampled_from(
    ["append", "append", "append", "delete", "compact", "restore", "column", "past"]
)


@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), partitioned=st.booleans(), ops=st.lists(_plan_op, min_size=1, max_size=8))
def test_a_plan_from_the_last_one_equals_a_plan_from_scratch(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, partitioned: bool, ops: list[str]
) -> None:
    """A Segmenter lists a version's files from its last plan's (`snapshot_since`): the
    files, their order and keys are those a new Segmenter plans from a full listing,
    after appends, deletes, compactions, a restore (files removed come back), a new
    column, and plans of earlier versions in between."""
    work = tmp_path_factory.mktemp("plan")
    saved = snapshots._DIFF_MIN
    setattr(snapshots, "_DIFF_MIN", 0)  # noqa: B010 - a Final name: compare every listing
    try:
        _plans_from_the_last_one(work, data, partitioned, ops)
    finally:
        setattr(snapshots, "_DIFF_MIN", saved)  # noqa: B010


def _plans_from_the_last_one(
    work: Path, data: st.DataObject, partitioned: bool, ops: list[str]
) -> None:
    db = DatabaseOps.create(
        work / "t", SCHEMA, engine="local", partition_by=["city"] if partitioned else None
    )
    seg = Segmenter(db, SegmentStore(work / "cache"), workers=2)
    next_id = 0
    for op in ops:
        if op == "append":
            n = data.draw(st.integers(1, 3))
            db.insert(_rows(next_id, n, data.draw))
            next_id += n
        elif op == "delete":
            db.delete_rows_where(f"id % 3 = {data.draw(st.integers(0, 2))}")
        elif op == "compact":
            db.optimize.compact()
        elif op == "restore" and db.version > 1:
            db.restore_version(data.draw(st.integers(1, db.version - 1)))
        elif op == "column" and all(f.name != "extra" for f in db.schema.fields):
            db.add_columns({"extra": "Int64"})
        elif op == "past" and db.version > 0:
            past = data.draw(st.integers(0, db.version - 1))
            _same_plans(seg.plan(past), Segmenter(db, SegmentStore(work / "c2")).plan(past))
        _same_plans(seg.plan(db.version), Segmenter(db, SegmentStore(work / "c2")).plan(db.version))
    seg.close()


def _same_plans(got: Plan | None, fresh: Plan | None) -> None:
    assert got is not None and fresh is not None
    assert got.files == fresh.files
    assert got.keys == fresh.keys
    assert got.header == fresh.header
    assert got.snapshot.version == fresh.snapshot.version
    assert got.snapshot.schema == fresh.snapshot.schema


def test_a_plan_converts_only_the_files_added_since_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first plan, a version that adds one file converts one add action (the
    cost of a one-row append does not grow with the table's files); a table of fewer
    than `_DIFF_MIN` files is listed whole."""
    db = _table(tmp_path / "t", chunks=6)
    small = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    small.plan(db.version)
    converted: list[int] = []
    data_files = snapshots._data_files

    def counted(actions: pa.Table, *args: Any) -> Any:
        converted.append(actions.num_rows)
        return data_files(actions, *args)

    monkeypatch.setattr(snapshots, "_data_files", counted)
    db.insert({"id": 10_001, "name": "n", "score": 1.0, "city": "c"})
    small.plan(db.version)
    assert converted == [7]  # below _DIFF_MIN: whole
    small.close()
    monkeypatch.undo()
    monkeypatch.setattr(snapshots, "_DIFF_MIN", 6)
    seg = Segmenter(db, SegmentStore(tmp_path / "cache2"), workers=2)
    seg.plan(db.version)
    converted.clear()
    monkeypatch.setattr(snapshots, "_data_files", counted)
    db.insert({"id": 10_000, "name": "n", "score": 1.0, "city": "c"})
    plan = seg.plan(db.version)
    assert plan is not None and len(plan.files) == 8
    assert converted == [1]
    assert _bytes(seg(db.version)) == _expected(db, db.version)
    seg.close()


def _same_millisecond(db: DatabaseOps) -> bool:
    times = [a["modification_time"] for a in db._log.add_actions().to_pylist()]
    return len(times) != len(set(times))


def _table(path: Path, n: int = 300, *, chunks: int = 3) -> DatabaseOps:
    db = DatabaseOps.create(path, SCHEMA, engine="local")
    per = n // chunks
    for i in range(chunks):
        ids = pa.array(range(i * per, (i + 1) * per), pa.int64())
        db.insert(
            pa.table(
                {
                    "id": ids,
                    "name": pc.cast(ids, pa.string()),
                    "score": pc.cast(ids, pa.float64()),
                    "city": pa.array(["x,y"] * per),
                }
            )
        )
    return db


def test_a_new_version_renders_only_the_files_it_adds(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"))
    seg(db.version)
    assert seg.stats.rendered == 3
    db.insert({"id": 10_000, "name": "n", "score": 1.0, "city": "c"})
    r = seg(db.version)
    assert seg.stats.rendered == 4 and seg.stats.reused == 3
    assert _bytes(r).endswith(b"10000,n,1,c\n")
    db.delete_rows_where("id = 10000")
    r = seg(db.version)
    assert seg.stats.rendered == 4  # a removed file only drops its segment
    assert _bytes(r) == _expected(db, db.version)


def test_restart_reuses_segments_and_rejects_corrupt_ones(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    expected = _expected(db, db.version)
    r = Segmenter(db, SegmentStore(tmp_path / "cache"))(db.version)
    files = [tmp_path / "cache" / f"{key}.seg" for key, _, _ in r.segments]
    assert len(files) == 3 and all(f.exists() for f in files)
    other = _table(tmp_path / "other", chunks=1)
    foreign_segmenter = Segmenter(other, SegmentStore(tmp_path / "cache"))
    (foreign_key, _, _), *_ = foreign_segmenter(other.version).segments
    foreign_segmenter.close()  # its one small segment's file is written after it
    foreign = tmp_path / "cache" / f"{foreign_key}.seg"
    # one corruption per file: a flipped key byte, a truncation, another table's segment
    raw = bytearray(files[0].read_bytes())
    raw[12] ^= 0xFF
    files[0].write_bytes(bytes(raw))
    files[1].write_bytes(files[1].read_bytes()[:-5])
    shutil.copyfile(foreign, files[2])
    store = SegmentStore(tmp_path / "cache")
    seg = Segmenter(db, store)
    assert _bytes(seg(db.version)) == expected
    assert store.stats.rejected == 3 and seg.stats.rendered == 3
    # and now everything is valid again: a restart renders nothing
    seg2 = Segmenter(db, SegmentStore(tmp_path / "cache"))
    assert _bytes(seg2(db.version)) == expected
    assert seg2.stats.rendered == 0 and seg2.store.stats.hits == 4  # and the header


def test_two_tables_with_the_same_file_names_never_share_segments(tmp_path: Path) -> None:
    a = _table(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # same metaData id, same file names
    b = DatabaseOps.open(tmp_path / "b", engine="local")
    b.update("id < 50", {"name": "changed"})
    store = SegmentStore(tmp_path / "cache")
    sa = Segmenter(a, store)
    sb = Segmenter(b, store)
    assert _bytes(sa(a.version)) == _expected(a, a.version)
    assert _bytes(sb(b.version)) == _expected(b, b.version)
    assert sb.stats.reused == 0  # nothing of a's is served for b
    assert b"changed" in _bytes(sb(b.version)) and b"changed" not in _bytes(sa(a.version))


def test_render_cache_keeps_segmented_renderings(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    cache = RenderCache(segmenter=Segmenter(db, SegmentStore(tmp_path / "cache")), keep=2)
    r = cache.get(db.version)
    assert isinstance(r, SegmentedRendering)
    assert cache.get(db.version) is r and cache.peek(db.version) is r
    assert bytes(r.data) == _expected(db, db.version)


def test_eviction_keeps_the_cache_under_its_bound(tmp_path: Path) -> None:
    db = _table(tmp_path / "t", chunks=3)
    store = SegmentStore(tmp_path / "cache", max_bytes=1)
    r = Segmenter(db, store)(db.version)
    # the header and three segments were written, each write evicts all but itself
    assert store.stats.evicted == 3 and len(list((tmp_path / "cache").glob("*.seg"))) == 1
    assert _bytes(r) == _expected(db, db.version)  # live segments stay readable


def test_an_empty_table_is_the_header(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    r = Segmenter(db, SegmentStore(tmp_path / "cache"))(db.version)
    assert _bytes(r) == b"id,name,score,city\n" == bytes(r.data)
    chunk, eof = r.read(r.size, 10)
    assert bytes(chunk) == b"" and eof


def test_column_mapping_falls_back_to_one_segment_per_version(tmp_path: Path) -> None:
    from deltalake import DeltaTable, write_deltalake

    rows = pa.table({"id": pa.array([2, 1], pa.int64()), "name": ["b", "a,z"]})
    DeltaTable.create(
        str(tmp_path / "t"), rows.schema, configuration={"delta.columnMapping.mode": "name"}
    )
    write_deltalake(str(tmp_path / "t"), rows, mode="append")
    db = DatabaseOps.open(tmp_path / "t", engine="local")
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"))
    r = seg(db.version)
    assert _bytes(r) == render_csv(db.to_arrow(version=db.version))
    assert seg.stats.whole == 1 and len(r.segments) == 1
    # cached on disk per version: a restart renders nothing
    seg2 = Segmenter(db, SegmentStore(tmp_path / "cache"))
    assert _bytes(seg2(db.version)) == _bytes(r) and seg2.stats.whole == 0


def test_deletion_vectors_fall_back_to_one_segment_per_version(tmp_path: Path) -> None:
    from tests.posixlake.interop_tables import shared_fixture

    uri = shared_fixture("table-with-dv-small", tmp_path / "dv")  # skips without shared/
    db = DatabaseOps.open(uri, engine="local")
    r = Segmenter(db, SegmentStore(tmp_path / "cache"))(db.version)
    assert _bytes(r) == render_csv(db.to_arrow(version=db.version))
    assert len(r.segments) == 1


@given(
    values=st.lists(_text | st.none(), max_size=20),
    picks=st.lists(st.integers(0, 30) | st.none(), max_size=40),
)
def test_a_dictionary_column_renders_as_its_values(
    values: list[str | None], picks: list[int | None]
) -> None:
    # segments read small-dictionary string columns as dictionaries (rendered once each)
    dictionary = pa.array(values, pa.string())
    indices = pa.array(
        [None if p is None or not values else p % len(values) for p in picks], pa.int32()
    )
    encoded = pa.DictionaryArray.from_arrays(indices, dictionary)
    as_dict = pa.table({"a": encoded, "b": pa.array(range(len(picks)), pa.int64())})
    plain = pa.table({"a": encoded.dictionary_decode(), "b": as_dict.column("b")})
    assert render_csv(as_dict) == render_csv(plain)


def test_a_dead_writers_temporary_file_is_removed_once_stale(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / ".tmp-old.seg").write_bytes(b"partial")
    (cache / ".tmp-new.seg").write_bytes(b"being written")
    os.utime(cache / ".tmp-old.seg", (0, 0))
    assert SegmentStore(cache).total_bytes() == 0  # neither counts as a segment
    assert not (cache / ".tmp-old.seg").exists() and (cache / ".tmp-new.seg").exists()


@pytest.mark.s3
def test_segments_of_a_table_on_s3(moto_server: LocalServer, tmp_path: Path) -> None:
    import uuid

    import boto3

    from posixlake import S3Config

    bucket = f"seg-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=moto_server.endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    config = S3Config(moto_server.endpoint, "testing", "testing", "us-east-1")
    db = DatabaseOps.create(
        f"s3://{bucket}/t", SCHEMA, storage=config, engine="local", partition_by=["city"]
    )
    db.insert([{"id": i, "name": f"n{i}", "score": i / 2, "city": "ab"[i % 2]} for i in range(9)])
    db.insert({"id": 100, "name": "x,y", "score": None, "city": None})
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"))
    got = _bytes(seg(db.version))
    full = db.to_arrow(version=db.version)
    assert sorted(got.splitlines()[1:]) == sorted(render_csv(full).splitlines()[1:])
    assert got.endswith(b'100,"x,y",,\n')  # the newest file's segment comes last


def test_released_pages_read_back_the_same_bytes(tmp_path: Path) -> None:
    """After a rewrite is compared, the base's mapped pages are let go (madvise): the
    rendering still reads the same bytes, from the page cache or the file."""
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    db.insert(
        pa.table(
            {
                "id": pa.array(range(20_000), pa.int64()),
                "name": [f"n{i}" for i in range(20_000)],
                "score": [i / 3 for i in range(20_000)],
                "city": ["Paris"] * 20_000,
            }
        )
    )
    segmenter = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=1)
    try:
        rendering = segmenter(db.version)
        before = _bytes(rendering)
        assert rendering.size > 256 << 10  # mapped, not read into memory
        rendering.release(0, rendering.size)
        rendering.release(5000, 70_000)
        assert _bytes(rendering) == before
    finally:
        segmenter.close()


def test_a_version_is_planned_from_one_listing_of_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot's listing carries each file's modification time (the segment order):
    a plan lists the add actions once, not a second time for the times (O(files) each)."""
    from posixlake.delta import loaded_log, snapshot_of

    db = _table(tmp_path / "t")
    db.insert({"id": 10_000, "name": "n", "score": 1.0, "city": "c"})
    log = loaded_log(db)
    listed = {
        urllib.parse.unquote(a["path"]): a["modification_time"]
        for a in log.add_actions().to_pylist()
    }
    assert {f.path: f.modification_time for f in snapshot_of(log).files} == listed
    expected = _expected(db, db.version)

    def no_second_listing(self: object) -> pa.Table:
        raise AssertionError("the add actions were listed again")

    monkeypatch.setattr(type(log), "add_actions", no_second_listing)
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"))
    assert _bytes(seg(db.version)) == expected
    seg.close()


def test_a_lone_small_new_file_is_rendered_on_the_calling_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version that adds one small file (a one-row append) renders it whole on the
    caller's thread, with the same bytes as a full rendering; several files still go to
    the pool."""
    import threading

    import nfs.table.segments as segments

    threads: list[str] = []
    unit_batches = segments._unit_batches

    def recorded(*args: Any) -> Iterator[pa.RecordBatch]:
        threads.append(threading.current_thread().name)  # the thread decoding the file
        return unit_batches(*args)

    monkeypatch.setattr(segments, "_unit_batches", recorded)
    db = _table(tmp_path / "t")
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    seg(db.version)
    assert threads and all(t.startswith("posixlake-segments") for t in threads)
    threads.clear()
    db.insert({"id": 10_000, "name": 'a "quoted", name', "score": None, "city": "Zürich"})
    r = seg(db.version)
    assert threads == [threading.current_thread().name]
    assert _bytes(r) == _expected(db, db.version)
    assert _bytes(r).endswith('10000,"a ""quoted"", name",,Zürich\n'.encode())
    # a restart reuses the segment the caller rendered (its file written by then)
    seg.close()
    _restart_renders_nothing(db, tmp_path / "cache")


def _restart_renders_nothing(db: DatabaseOps, cache: Path) -> None:
    """A new Segmenter on ``cache`` serves the current version without rendering."""
    again = Segmenter(db, SegmentStore(cache), workers=2)
    assert _bytes(again(db.version)) == _expected(db, db.version)
    assert again.stats.rendered == 0
    again.close()


def test_a_small_segment_is_given_now_and_its_file_written_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-row append's segment is in the rendering before its file is written (a file
    created costs more than the render); the process finds it meanwhile, and `flush`
    (a Segmenter's close) waits for the file, which a restart then reuses."""
    import threading

    db = _table(tmp_path / "t")
    store = SegmentStore(tmp_path / "cache")
    seg = Segmenter(db, store, workers=2)
    seg(db.version)
    started, gate = threading.Event(), threading.Event()
    write = SegmentStore.write

    def gated(self: SegmentStore, key: str, parts: Any) -> Any:
        started.set()
        gate.wait()
        return write(self, key, parts)

    wait_for = store._written.wait_for

    def flushing(predicate: Any, timeout: float | None = None) -> Any:
        gate.set()  # the file is waited for now: let it be written
        return wait_for(predicate, timeout)

    monkeypatch.setattr(SegmentStore, "write", gated)
    monkeypatch.setattr(store._written, "wait_for", flushing)
    try:
        db.insert({"id": 10_000, "name": "n", "score": 1.0, "city": "c"})
        r = seg(db.version)  # does not wait for the file
        assert _bytes(r) == _expected(db, db.version)
        key = r.segments[-1][0]
        assert started.wait(timeout=60)  # the file is being written
        assert not (tmp_path / "cache" / f"{key}.seg").exists()
        assert store.open(key) is not None  # the process has it meanwhile
        seg.close()
        assert (tmp_path / "cache" / f"{key}.seg").exists()
    finally:
        gate.set()
    monkeypatch.undo()
    _restart_renders_nothing(db, tmp_path / "cache")


def test_a_small_segment_file_that_cannot_be_written_is_rendered_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file of a segment given at once fails to be written: logged, and the next
    process renders the segment again (it is derived data)."""
    db = _table(tmp_path / "t")
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    seg(db.version)

    def failing(self: SegmentStore, key: str, parts: Any) -> Any:
        raise PosixLakeError("disk full")

    monkeypatch.setattr(SegmentStore, "write", failing)
    db.insert({"id": 10_000, "name": "n", "score": 1.0, "city": "c"})
    assert _bytes(seg(db.version)) == _expected(db, db.version)
    seg.close()  # returns: the failure is not waited for forever
    monkeypatch.undo()
    again = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    assert _bytes(again(db.version)) == _expected(db, db.version)
    assert again.stats.rendered == 1
    again.close()


def test_a_new_column_gives_later_versions_its_header(tmp_path: Path) -> None:
    """The header line is kept per schema: a version with another schema (a column added
    by an insert) gets its own, and the older version keeps the older one."""
    db = _table(tmp_path / "t")
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"))
    first = db.version
    assert _bytes(seg(first)).startswith(b"id,name,score,city\n")
    db.insert(
        [{"id": 10_000, "name": "n", "score": 1.0, "city": "c", "extra": 7}], schema_mode="merge"
    )
    r = seg(db.version)
    assert r.header == b"id,name,score,city,extra\n"
    assert _bytes(r) == _expected(db, db.version)
    assert _bytes(r).endswith(b"10000,n,1,c,7\n")
    assert seg(first).header == b"id,name,score,city\n"
    seg.close()


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_file_of_many_batches_renders_the_same_bytes_in_parallel(
    tmp_path: Path, workers: int
) -> None:
    """A file is decoded in batches that the pool renders in parallel (a table of one
    file too); the segment holds them in row order, with the file's row count."""
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    n = 3 * 65_536 + 123  # four batches
    ids = pa.array(range(n), pa.int64())
    marks = pc.equal(pc.bit_wise_and(ids, 1023), 0)  # some names need quotes
    names = pc.if_else(marks, 'say "hi", ', pc.cast(ids, pa.string()))
    cities = pa.array(["Paris", "New York, NY", "", None], pa.string())
    table = pa.table(
        {
            "id": ids,
            "name": names,
            "score": pc.divide(pc.cast(ids, pa.float64()), 7.0),
            "city": cities.take(pc.cast(pc.bit_wise_and(ids, 3), pa.int64())),
        }
    )
    db.insert(table)
    db.insert(table.slice(0, 70_000).set_column(0, "id", pc.add(ids.slice(0, 70_000), n)))
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=workers)
    r = seg(db.version)
    assert _bytes(r) == _expected(db, db.version)
    store = SegmentStore(tmp_path / "cache")
    rows = sorted(s.rows for s in (store.open(key) for key, _, _ in r.segments) if s)
    assert rows == [70_000, n]
    seg.close()


def test_a_missing_data_file_fails_the_rendering_and_leaves_no_partial_segment(
    tmp_path: Path,
) -> None:
    """A data file gone from under the table (deleted by hand) is NotFound; no segment and
    no temporary file of it stays in the cache, and a later call fails the same way."""
    db = _table(tmp_path / "t", n=3 * 70_000)
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    plan = seg.plan(db.version)
    assert plan is not None
    os.unlink(os.path.join(plan.snapshot.uri, plan.files[1].path))
    for _ in range(2):
        with pytest.raises(PosixLakeError, match="missing"):
            seg(db.version)
    names = os.listdir(tmp_path / "cache")
    assert not [n for n in names if n.startswith(".tmp-")]
    assert plan.keys[1] + ".seg" not in names
    seg.close()


def test_the_batches_of_one_file_render_on_several_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table of one big file is rendered by more than one thread: the first batch's
    rendering waits until another thread renders a batch too (or gives up after 20 s, and
    the test fails: one thread rendered the file alone)."""
    import threading

    import posixlake.csvcodec._render as render

    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    n = 3 * 65_536 + 123  # four batches
    ids = pa.array(range(n), pa.int64())
    db.insert(
        pa.table(
            {
                "id": ids,
                "name": pc.cast(ids, pa.string()),
                "score": pc.cast(ids, pa.float64()),
                "city": pa.array(["x,y"] * n),
            }
        )
    )
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    threads: set[str] = set()
    lock = threading.Lock()
    two = threading.Event()
    native_lines = render._native_lines  # every batch passes here (compiled pass or not)

    def recorded(
        batch: pa.RecordBatch, end: str, buffers: render.LineBuffers | None = None
    ) -> memoryview | None:
        if batch.num_rows > 1000:  # not the warm-up's one-row table
            with lock:
                threads.add(threading.current_thread().name)
                if len(threads) > 1:
                    two.set()
            if not two.wait(timeout=20):
                two.set()  # gave up: the other batches need not wait too
        return native_lines(batch, end, buffers)

    monkeypatch.setattr(render, "_native_lines", recorded)
    r = seg(db.version)
    assert len(threads) > 1
    assert _bytes(r) == _expected(db, db.version)
    seg.close()


def test_a_first_rendering_writes_its_chunks_into_buffers_used_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rendered chunks of a first rendering go into a few buffers, each taken again
    once its chunk is in the segment file (`LineBuffers`: no fresh pages to fault in),
    and the segments still hold the right bytes."""
    import nfs.table.segments as segments
    import posixlake.csvcodec._render as render

    native = render.native_module()
    if native is None:
        pytest.fail("the compiled pass is not built (scripts/setup.sh builds it)")
    db = _eight_files(tmp_path / "t")  # rendered on the pool, not inline
    monkeypatch.setattr(segments, "_BATCH_ROWS", 1_000)  # 40 batches, 5 a file
    made: list[int] = []
    taken_back: list[int] = []
    new_buffer = native.buffer
    release = render.LineBuffers.release

    def counted_buffer(size: int) -> bytearray:
        buf: bytearray = new_buffer(size)
        made.append(id(buf))
        return buf

    def counted_release(self: render.LineBuffers, chunk: memoryview) -> None:
        if type(chunk.obj) is bytearray:
            taken_back.append(id(chunk.obj))
        release(self, chunk)

    monkeypatch.setattr(native, "buffer", counted_buffer)
    monkeypatch.setattr(render.LineBuffers, "release", counted_release)
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    r = seg(db.version)
    assert _bytes(r) == _expected(db, db.version)
    assert seg.stats.rendered == 8
    assert len(taken_back) == 40  # every chunk, once written
    # chunks live at once, at most: the three files decoded or written (workers + 1); a
    # chunk is written as soon as it is rendered, so usually far fewer (2 to 5 here)
    assert len(made) <= 3 * 5 and len(set(taken_back)) == len(made)


def _eight_files(path: Path) -> DatabaseOps:
    """A table of eight files of 5,000 rows (ids 0..39,999 in file order)."""
    db = DatabaseOps.create(path, SCHEMA, engine="local")
    for start in range(0, 40_000, 5_000):
        ids = pa.array(range(start, start + 5_000), pa.int64())
        db.insert(
            pa.table(
                {
                    "id": ids,
                    "name": pc.cast(ids, pa.string()),
                    "score": pc.divide(pc.cast(ids, pa.float64()), 3.0),
                    "city": pc.cast(pc.bit_wise_and(ids, 7), pa.string()),
                }
            )
        )
    return db


def _watched_writes(monkeypatch: pytest.MonkeyPatch, seen: Any) -> None:
    """Call ``seen(key, chunk)`` for every chunk a SegmentStore writes, before it is written."""
    write = SegmentStore.write

    def watched(self: SegmentStore, key: str, parts: Any) -> Any:
        def each() -> Iterator[Any]:
            for chunk, rows in parts:
                seen(key, chunk)
                yield chunk, rows

        return write(self, key, each())

    monkeypatch.setattr(SegmentStore, "write", watched)


def test_the_segments_of_units_decoded_side_by_side_are_written_side_by_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file's chunks go into its segment file as they are rendered, while other files
    are decoded: the last batch of the first file is rendered only once the second file's
    segment has a chunk (or after 20 s, and the test fails). Before, a segment was written
    only after its whole file was decoded, and only after the segments before it.

    The held batch makes a decoding thread wait for a writer, which the Segmenter itself
    never does; so the writers of the first segments get a pool of the test's own, as the
    process-wide one may be busy with other tests' renderings (it failed so once in CI:
    with one writer thread free, the second segment's writer could not start)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import nfs.table.segments as segments

    db = _eight_files(tmp_path / "t")
    monkeypatch.setattr(segments, "_BATCH_ROWS", 1_000)  # 5 batches a file
    writers = ThreadPoolExecutor(max_workers=3, thread_name_prefix="test-segment-writer")
    monkeypatch.setattr(segments, "_writer_pool", writers)
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    plan = seg.plan(db.version)
    assert plan is not None
    first, second = plan.keys[0], plan.keys[1]
    first_ids = pq.read_table(os.path.join(plan.snapshot.uri, plan.files[0].path), columns=["id"])
    last_batch_start = first_ids.column("id")[4_000].as_py()  # the first file's last batch
    second_started = threading.Event()
    waited: list[bool] = []
    render_batch = segments._render_batch

    def seen(key: str, chunk: Any) -> None:
        if key == second and len(chunk):
            second_started.set()

    def held(batch: pa.RecordBatch, schema: pa.Schema, buffers: Any) -> Any:
        if batch.column(0)[0].as_py() == last_batch_start:
            waited.append(second_started.wait(timeout=20))
        return render_batch(batch, schema, buffers)

    _watched_writes(monkeypatch, seen)
    monkeypatch.setattr(segments, "_render_batch", held)
    try:
        r = seg(db.version)
    finally:
        writers.shutdown()
    assert waited == [True]
    assert _bytes(r) == _expected(db, db.version)
    assert first != second
    seg.close()


@pytest.mark.parametrize("fail_in", ["render", "write"])
def test_a_failed_segment_stops_the_rendering_and_leaves_no_partial_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_in: str
) -> None:
    """An error rendering a batch, or writing a segment file, is the rendering's error
    (not the cancellation it causes in the other writers); no segment of the failed file
    and no temporary file stays in the cache, every segment kept holds its whole file, and
    the next rendering (the error gone) is whole."""
    import nfs.table.segments as segments

    db = _eight_files(tmp_path / "t")
    monkeypatch.setattr(segments, "_BATCH_ROWS", 1_000)
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    plan = seg.plan(db.version)
    assert plan is not None
    third = plan.keys[2]
    third_ids = pq.read_table(os.path.join(plan.snapshot.uri, plan.files[2].path), columns=["id"])
    doomed = third_ids.column("id")[2_000].as_py()  # the third file's third batch
    render_batch = segments._render_batch

    def failing_render(batch: pa.RecordBatch, schema: pa.Schema, buffers: Any) -> Any:
        if batch.column(0)[0].as_py() == doomed:
            raise OSError("injected render failure")
        return render_batch(batch, schema, buffers)

    written: dict[str, int] = {}

    def failing_write(key: str, chunk: Any) -> None:
        written[key] = written.get(key, 0) + 1
        if key == third and written[key] == 3:
            raise OSError("injected write failure")

    if fail_in == "render":
        monkeypatch.setattr(segments, "_render_batch", failing_render)
    else:
        _watched_writes(monkeypatch, failing_write)
    with pytest.raises(OSError, match=f"injected {fail_in} failure"):
        seg(db.version)
    names = os.listdir(tmp_path / "cache")
    assert not [n for n in names if n.startswith(".tmp-")]
    assert third + ".seg" not in names
    store = SegmentStore(tmp_path / "cache")
    for i, key in enumerate(plan.keys):
        kept = store.open(key)
        if kept is not None:  # a whole file's rows, never part of them
            assert kept.rows == 5_000, i
    monkeypatch.undo()
    monkeypatch.setattr(segments, "_BATCH_ROWS", 1_000)
    assert _bytes(seg(db.version)) == _expected(db, db.version)
    seg.close()


def test_a_local_data_file_is_read_through_a_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first rendering of a local table maps its data files (Parquet's column chunks are
    views of the page cache, not copies into fresh memory) and renders the same bytes."""
    import nfs.table.segments as segments

    db = _eight_files(tmp_path / "t")
    mapped: list[bool] = []
    open_file = segments.open_file

    def recorded(fs: Any, snapshot: Any, data_file: Any, read_only: bool) -> Any:
        handle = open_file(fs, snapshot, data_file, read_only)
        path = os.path.realpath(os.path.join(snapshot.uri, data_file.path))
        mapped.append(path in Path("/proc/self/maps").read_text())
        return handle

    monkeypatch.setattr(segments, "open_file", recorded)
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    r = seg(db.version)
    assert _bytes(r) == _expected(db, db.version)
    assert mapped and all(mapped)
    seg.close()


def test_many_first_renderings_at_once_all_finish_with_the_right_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sixteen threads render eight versions of each of two tables at once (a Segmenter
    each, two workers; the segment writers of the process are far fewer than the segments
    in flight): every rendering finishes, within a minute, with its version's bytes. A
    writer never waits for a caller that waits for a writer queued behind it."""
    import threading

    import nfs.table.segments as segments

    monkeypatch.setattr(segments, "_BATCH_ROWS", 1_000)
    work: list[tuple[DatabaseOps, Segmenter, int]] = []
    for name in ("t", "u"):
        db = _eight_files(tmp_path / name)
        seg = Segmenter(db, SegmentStore(tmp_path / f"cache-{name}"), workers=2)
        work += [(db, seg, v) for v in range(db.version - 7, db.version + 1)]
    got: dict[tuple[int, int], bytes] = {}
    failed: list[BaseException] = []

    def render(i: int) -> None:
        _, seg, version = work[i]
        try:
            got[i, version] = _bytes(seg(version))
        except BaseException as err:  # noqa: BLE001 - reported by the test
            failed.append(err)

    threads = [threading.Thread(target=render, args=(i,), daemon=True) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not [t for t in threads if t.is_alive()], "a rendering never finished"
    assert not failed
    for i, (db, _, v) in enumerate(work):
        assert got[i, v] == _expected(db, v), (i, v)
    for seg in {id(s): s for _, s, _ in work}.values():
        seg.close()


def test_an_earlier_version_planned_while_current_loads_no_snapshot_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plans of versions rendered while current are kept: asking for one of them
    again (an append's search for its base reads up to 16) loads no snapshot of it, and
    gives the same bytes; a version never planned here is loaded."""
    import nfs.table.segments as segments

    db = _table(tmp_path / "t")
    before = db.version
    seg = Segmenter(db, SegmentStore(tmp_path / "cache"), workers=2)
    versions = []
    for i in range(3):
        db.insert({"id": 10_000 + i, "name": "n", "score": 1.0, "city": "c"})
        seg(db.version)
        versions.append(db.version)
    loads: list[int] = []
    from posixlake.delta import log_at

    def loading(db: DatabaseOps, version: int) -> Any:
        loads.append(version)
        return log_at(db, version)

    monkeypatch.setattr(segments, "log_at", loading)
    for v in versions[:-1]:
        assert _bytes(seg(v)) == _expected(db, v)
    assert loads == []
    assert _bytes(seg(before)) == _expected(db, before)
    assert loads == [before]
    seg.close()
