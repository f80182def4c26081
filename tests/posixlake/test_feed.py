"""db.subscribe(): every commit's changes, once, in order, from any writer.

Real tables in tmp_path; commits from this process, another process (plain delta-rs,
no posixlake) and the Spark engine. Waiting is on queues and events with a bound, never
on sleeps; the polling test injects its sleep.
"""

from __future__ import annotations

import asyncio
import queue
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posixlake import DatabaseOps
from posixlake.errors import VersionError
from posixlake.feed import ChangeBatch, ChangeFeed, ChangesExpired, diff_rows, open_feed
from posixlake.feed._watch import InotifyWaiter, PollingWaiter

WAIT = 60.0  # seconds a test waits for an event at most (a bound, not a delay)
ROOT = Path(__file__).resolve().parents[2]


def _table(path: Path, *, cdf: bool, key: bool = True, **kw: Any) -> DatabaseOps:
    return DatabaseOps.create(
        str(path),
        {"id": "Int64", "name": "String"},
        primary_key="id" if key else None,
        engine="local",
        change_data_feed=cdf,
        **kw,
    )


def _rows(batch: ChangeBatch) -> list[tuple[Any, ...]]:
    return sorted((r["_change_type"], r["id"], r["name"]) for r in batch.rows.to_pylist())


def _follow(feed: ChangeFeed) -> tuple[queue.Queue[ChangeBatch | BaseException], threading.Thread]:
    """Iterate ``feed`` in a thread; its batches (or its error) arrive on the queue."""
    out: queue.Queue[ChangeBatch | BaseException] = queue.Queue()

    def run() -> None:
        try:
            for batch in feed:
                out.put(batch)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            out.put(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return out, thread


def _next(q: queue.Queue[ChangeBatch | BaseException]) -> ChangeBatch:
    item = q.get(timeout=WAIT)
    if isinstance(item, BaseException):
        raise item
    return item


@pytest.mark.parametrize("cdf", [True, False], ids=["cdf", "files"])
def test_each_kind_of_commit(tmp_path: Path, cdf: bool) -> None:
    db = _table(tmp_path / "t", cdf=cdf)
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}])  # v1
    db.update("id = 2", {"name": "B"})  # v2
    db.delete_rows_where("id = 3")  # v3
    db.merge([{"_op": "UPDATE", "id": 1, "name": "A"}, {"_op": "INSERT", "id": 4, "name": "d"}])
    with db.subscribe(from_version=1) as feed:
        batches = list(feed.available())
    assert [(b.version, b.operation, b.source) for b in batches] == [
        (1, "WRITE", "cdf" if cdf else "files"),
        (2, "UPDATE", "cdf" if cdf else "files"),
        (3, "DELETE", "cdf" if cdf else "files"),
        (4, "MERGE", "cdf" if cdf else "files"),
    ]
    # the rows a rewrite copied (2 of 3 in v2) are not changes
    assert [_rows(b) for b in batches] == [
        [("insert", 1, "a"), ("insert", 2, "b"), ("insert", 3, "c")],
        [("update_postimage", 2, "B"), ("update_preimage", 2, "b")],
        [("delete", 3, "c")],
        [("insert", 4, "d"), ("update_postimage", 1, "A"), ("update_preimage", 1, "a")],
    ]
    history = {c.version: c.timestamp for c in db.history()}
    assert [b.timestamp for b in batches] == [history[v] for v in (1, 2, 3, 4)]
    assert batches[0].rows.schema.names == ["id", "name", "_change_type"]


def test_without_a_key_an_update_is_a_delete_and_an_insert(tmp_path: Path) -> None:
    db = _table(tmp_path / "t", cdf=False, key=False)
    db.insert([{"id": 1, "name": "a"}, {"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    db.update("id = 2", {"name": "B"})
    db.delete_rows_where("id = 1")
    with db.subscribe(from_version=2) as feed:
        batches = list(feed.available())
    assert [_rows(b) for b in batches] == [
        [("delete", 2, "b"), ("insert", 2, "B")],
        [("delete", 1, "a"), ("delete", 1, "a")],  # a duplicate row is two deletes
    ]


def test_cdf_turned_on_and_off_by_another_writer(tmp_path: Path) -> None:
    """Each version's rows come from where that version recorded them."""
    from deltalake import DeltaTable

    db = _table(tmp_path / "t", cdf=False)
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])  # v1
    outside = DeltaTable(db.uri)
    outside.alter.set_table_properties({"delta.enableChangeDataFeed": "true"})  # v2
    db.update("id = 2", {"name": "B"})  # v3: _change_data files
    outside.update_incremental()
    outside.alter.set_table_properties({"delta.enableChangeDataFeed": "false"})  # v4
    db.delete_rows_where("id = 1")  # v5
    with db.subscribe(from_version=1) as feed:
        batches = list(feed.available())
    assert [(b.version, b.source, _rows(b)) for b in batches] == [
        (1, "files", [("insert", 1, "a"), ("insert", 2, "b")]),
        (2, "cdf", []),
        (3, "cdf", [("update_postimage", 2, "B"), ("update_preimage", 2, "b")]),
        (4, "files", []),
        (5, "files", [("delete", 1, "a")]),
    ]


def test_partitioned_table_without_cdf(tmp_path: Path) -> None:
    db = DatabaseOps.create(
        str(tmp_path / "t"),
        {"id": "Int64", "region": "String", "qty": "Int32"},
        primary_key="id",
        partition_by=["region"],
        engine="local",
    )
    db.insert([{"id": 1, "region": "eu", "qty": 1}, {"id": 2, "region": "us", "qty": 2}])
    db.update("region = 'us'", {"qty": 20})
    with db.subscribe(from_version=2) as feed:
        (batch,) = list(feed.available())
    assert sorted(batch.rows.to_pylist(), key=lambda r: r["_change_type"]) == [
        {"id": 2, "region": "us", "qty": 20, "_change_type": "update_postimage"},
        {"id": 2, "region": "us", "qty": 2, "_change_type": "update_preimage"},
    ]


def test_schema_change_between_commits(tmp_path: Path) -> None:
    db = _table(tmp_path / "t", cdf=False)
    db.insert({"id": 1, "name": "a"})
    db.add_columns({"qty": "Int32"})
    db.update("id = 1", {"qty": 5})
    with db.subscribe(from_version=3) as feed:
        (batch,) = list(feed.available())
    assert sorted(batch.rows.to_pylist(), key=lambda r: r["_change_type"]) == [
        {"id": 1, "name": "a", "qty": 5, "_change_type": "update_postimage"},
        {"id": 1, "name": "a", "qty": None, "_change_type": "update_preimage"},
    ]


def test_another_process_appending_with_delta_rs(tmp_path: Path) -> None:
    """A writer outside posixlake (plain delta-rs in another process) is seen live."""
    db = _table(tmp_path / "t", cdf=False)
    feed = db.subscribe()
    assert isinstance(feed._waiter, InotifyWaiter)  # local: watched, not polled
    q, thread = _follow(feed)
    code = (
        "import sys, pyarrow as pa\n"
        "from deltalake import write_deltalake\n"
        "write_deltalake(sys.argv[1], pa.table({'id': pa.array([7], pa.int64()),"
        " 'name': pa.array(['from outside'])}), mode='append')\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "t")], check=True, timeout=WAIT)
    batch = _next(q)
    assert (batch.version, batch.operation) == (1, "WRITE")
    assert _rows(batch) == [("insert", 7, "from outside")]
    feed.close()
    thread.join(WAIT)
    assert not thread.is_alive()


def test_async_for(tmp_path: Path) -> None:
    db = _table(tmp_path / "t", cdf=True)

    async def consume() -> list[int]:
        seen = []
        async with asyncio.timeout(WAIT):
            with db.subscribe() as feed:
                writer = asyncio.create_task(
                    asyncio.to_thread(
                        lambda: [db.insert({"id": i, "name": str(i)}) for i in range(3)]
                    )
                )
                async for batch in feed:
                    seen.append(batch.version)
                    if len(seen) == 3:
                        break
                await writer
        return seen

    assert asyncio.run(consume()) == [1, 2, 3]


def test_resume_sees_each_change_once(tmp_path: Path) -> None:
    db = _table(tmp_path / "t", cdf=False)
    for i in range(3):
        db.insert({"id": i, "name": str(i)})
    with db.subscribe(from_version=0) as feed:
        first = [next(feed), next(feed)]
    last = first[-1].version
    db.insert({"id": 10, "name": "later"})
    with db.subscribe(from_version=last + 1) as feed:
        rest = list(feed.available())
    versions = [b.version for b in first + rest]
    assert versions == [0, 1, 2, 3, 4]
    inserted = [r["id"] for b in first + rest for r in b.rows.to_pylist()]
    assert inserted == [0, 1, 2, 10]


def test_a_vacuumed_version_names_the_oldest_available(tmp_path: Path) -> None:
    db = _table(tmp_path / "t", cdf=False)
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])  # v1 adds file F
    db.delete_rows_where("id = 1")  # v2 removes F
    db.vacuum(0)  # v3 VACUUM START, v4 VACUUM END: F is deleted
    with db.subscribe(from_version=1) as feed, pytest.raises(ChangesExpired) as info:
        list(feed.available())
    assert info.value.version == 1
    assert info.value.oldest_available == 3
    assert "oldest version whose changes can be read is 3" in str(info.value)
    assert isinstance(info.value, VersionError)
    with db.subscribe(from_version=info.value.oldest_available) as feed:
        assert [b.operation for b in feed.available()] == ["VACUUM START", "VACUUM END"]


def test_bad_from_version(tmp_path: Path) -> None:
    db = _table(tmp_path / "t", cdf=False)
    with pytest.raises(VersionError, match="0 or more"):
        db.subscribe(from_version=-1)


def test_close_from_another_thread_ends_iteration(tmp_path: Path) -> None:
    db = _table(tmp_path / "t", cdf=False)
    feed = db.subscribe()
    q, thread = _follow(feed)
    db.insert({"id": 1, "name": "a"})
    assert _next(q).version == 1
    feed.close()
    thread.join(WAIT)
    assert not thread.is_alive() and q.empty()


@pytest.mark.parametrize("steps", range(6))
def test_a_cancelled_wait_is_cancelled_when_a_commit_lands_at_the_same_time(
    tmp_path: Path, steps: int
) -> None:
    """A change stream whose client left is cancelled (aiohttp's handler_cancellation).

    The cancel is sent ``steps`` turns of the event loop after the watch became readable,
    so one of them lands after the wake-up but before the waiting task resumes: there,
    ``asyncio.wait_for`` on Python 3.11 returned normally and the stream waited on.
    """
    log_dir = tmp_path / "_delta_log"
    log_dir.mkdir()
    waiter = InotifyWaiter(str(log_dir))

    async def run() -> None:
        task = asyncio.create_task(waiter.wait_async())
        for _ in range(3):
            await asyncio.sleep(0)  # the task now waits on the watch
        assert not task.done()
        (log_dir / "00000000000000000001.json").write_text("{}")
        # the event is queued in the kernel when write_text returns
        for _ in range(steps):
            await asyncio.sleep(0)
        if task.done():  # the wait ended before the cancel: nothing to cancel
            assert task.result() is True
            return
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, WAIT)

    try:
        asyncio.run(run())
    finally:
        waiter.close()


def test_polling_backs_off_and_resets_after_a_commit(tmp_path: Path) -> None:
    """Object stores are polled: delays double while nothing lands, then start over."""
    db = _table(tmp_path / "t", cdf=False)
    delays: list[float] = []

    def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 4:
            db.insert({"id": 1, "name": "a"})

    with open_feed(
        db.uri, None, min_interval=0.1, max_interval=0.5, sleep=sleep, from_version=1
    ) as feed:
        assert isinstance(feed._waiter, PollingWaiter)
        assert next(feed).version == 1
        db.insert({"id": 2, "name": "b"})
        assert next(feed).version == 2  # found without a wait
        delays.clear()
        feed._waiter.wait()
    assert delays == [0.1]


def test_polling_delays_are_bounded(tmp_path: Path) -> None:
    db = _table(tmp_path / "t", cdf=False)
    delays: list[float] = []

    def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 5:
            db.insert({"id": 1, "name": "a"})

    with open_feed(
        db.uri, None, min_interval=0.1, max_interval=0.5, sleep=sleep, from_version=1
    ) as feed:
        next(feed)
    assert delays == [0.1, 0.2, 0.4, 0.5, 0.5]


@pytest.mark.s3
def test_an_object_store_table_is_polled(moto_server: Any) -> None:
    """On S3 (moto_server) the feed polls with backoff and reads the rewritten files there."""
    import uuid

    import boto3

    from posixlake.storage import S3Config

    bucket = f"pl-{uuid.uuid4().hex[:16]}"
    boto3.client(
        "s3",
        endpoint_url=moto_server.endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    config = S3Config(moto_server.endpoint, "testing", "testing", "us-east-1")
    db = DatabaseOps.create(
        f"s3://{bucket}/t",
        {"id": "Int64", "name": "String"},
        primary_key="id",
        storage=config,
        engine="local",
    )
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    delays: list[float] = []

    def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 3:
            db.update("id = 2", {"name": "B"})

    with db.subscribe(sleep=sleep, min_interval=0.05, max_interval=1.0) as feed:
        assert isinstance(feed._waiter, PollingWaiter)
        batch = next(feed)
    assert delays == [0.05, 0.1, 0.2]
    assert (batch.version, batch.source) == (2, "files")
    assert _rows(batch) == [("update_postimage", 2, "B"), ("update_preimage", 2, "b")]


@pytest.mark.spark
def test_spark_engine_update_is_seen(tmp_path: Path, spark_session: Any) -> None:
    """A copy-on-write UPDATE that Spark executors wrote, seen by a subscriber."""
    from posixlake.engines.spark import SparkEngine

    uri = str(tmp_path / "t")
    db = _table(tmp_path / "t", cdf=False)
    db.insert([{"id": i, "name": f"n{i}"} for i in range(5)])
    feed = db.subscribe()
    q, thread = _follow(feed)
    spark_db = DatabaseOps.open(uri, engine=SparkEngine(spark=spark_session))
    assert spark_db.update("id = 3", {"name": "spark"}) == 1
    batch = _next(q)
    assert _rows(batch) == [("update_postimage", 3, "spark"), ("update_preimage", 3, "n3")]
    feed.close()
    thread.join(WAIT)


# -- diff_rows: a multiset difference ---------------------------------------------------

_row = st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None]))


@given(st.lists(_row, max_size=12), st.lists(_row, max_size=12))
def test_diff_rows_turns_old_into_new(old: list[Any], new: list[Any]) -> None:
    def table(rows: list[Any]) -> pa.Table:
        return pa.table(
            {
                "id": pa.array([r[0] for r in rows], pa.int64()),
                "v": pa.array([r[1] for r in rows], pa.string()),
            }
        )

    changes = diff_rows(table(old), table(new), key=[]).to_pylist()
    gone = Counter((r["id"], r["v"]) for r in changes if r["_change_type"] == "delete")
    came = Counter((r["id"], r["v"]) for r in changes if r["_change_type"] == "insert")
    assert Counter(old) - gone + came == Counter(new)
    assert not gone & came  # nothing both deleted and inserted
    assert gone <= Counter(old) and came <= Counter(new)


@given(
    st.dictionaries(st.integers(0, 6), st.sampled_from(["a", "b", None]), max_size=6),
    st.dictionaries(st.integers(0, 6), st.sampled_from(["a", "b", None]), max_size=6),
)
def test_diff_rows_with_a_key_pairs_updates(old: dict[int, Any], new: dict[int, Any]) -> None:
    def table(rows: dict[int, Any]) -> pa.Table:
        return pa.table(
            {
                "id": pa.array(list(rows), pa.int64()),
                "v": pa.array(list(rows.values()), pa.string()),
            }
        )

    changes = diff_rows(table(old), table(new), key=["id"]).to_pylist()
    by_type: dict[str, dict[int, Any]] = {}
    for r in changes:
        assert r["id"] not in by_type.setdefault(r["_change_type"], {})  # one row per key
        by_type[r["_change_type"]][r["id"]] = r["v"]
    changed = {k for k in old.keys() & new.keys() if old[k] != new[k]}
    assert by_type.get("delete", {}) == {k: old[k] for k in old.keys() - new.keys()}
    assert by_type.get("insert", {}) == {k: new[k] for k in new.keys() - old.keys()}
    assert by_type.get("update_preimage", {}) == {k: old[k] for k in changed}
    assert by_type.get("update_postimage", {}) == {k: new[k] for k in changed}


def test_diff_rows_nan_and_nested_values_compare_equal() -> None:
    t = pa.table({"f": [float("nan")], "l": pa.array([[1, 2]]), "s": [{"x": 1}]})
    assert diff_rows(t, t, key=[]).num_rows == 0
