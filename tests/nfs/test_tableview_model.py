"""TableFs against a model: Hypothesis drives NFS-style edits and API writes.

``KeyedTable`` models a table with a primary key as a dict (key -> row); ``BagTable``
models a table without a key as a multiset of rows. After every step the table's rows,
the bytes of data.csv and the number of Delta versions must match the model: one new
version per effective change, none for a refused or no-op write.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from typing import Any, ClassVar

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from nfs.protocol.nfs3 import Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import NfsError
from nfs.table.diff import diff_rows
from nfs.table.tablefs import DATA_CSV_ID, DATA_DIR_ID, TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import parse_csv, render_csv
from tests.nfs.diff_oracle import apply_diff

ROOT = CallContext.local()
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("qty", pa.int32())])
_names = st.one_of(st.none(), st.sampled_from(["a", "b b", "c,d", 'q"q', "", " x "]))
_qty = st.one_of(st.none(), st.integers(-5, 5))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Machine(RuleBasedStateMachine):
    key: ClassVar[list[str] | None] = None

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="tableview-model-")
        self.clock = Clock()
        self.db = DatabaseOps.create(
            self.dir + "/t",
            {"id": "Int64", "name": "String", "qty": "Int32"},
            primary_key=self.key,
            engine="local",
        )
        self.fs = TableFs(self.db, clock=self.clock, idle_timer=False)
        self.versions = self.db.version
        self.next_id = 100

    def teardown(self) -> None:
        self.fs.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model ----------------------------------------------------------------

    def model_rows(self) -> Counter[tuple[Any, ...]]:
        raise NotImplementedError

    def set_model(self, rows: list[tuple[Any, ...]]) -> None:
        raise NotImplementedError

    def changed(self, before: Counter[tuple[Any, ...]]) -> None:
        """Count one new version when the model changed."""
        if self.model_rows() != before:
            self.versions += 1

    # -- helpers ----------------------------------------------------------------------

    def fresh_rows(self, n: int, data: st.DataObject) -> list[tuple[Any, ...]]:
        out = []
        for _ in range(n):
            self.next_id += 1
            out.append((self.next_id, data.draw(_names), data.draw(_qty)))
        return out

    @staticmethod
    def lines(rows: list[tuple[Any, ...]]) -> bytes:
        table = pa.Table.from_pylist(
            [dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA
        )
        return render_csv(table, header=False)

    def table_of(self, rows: list[tuple[Any, ...]]) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)

    # -- rules --------------------------------------------------------------------

    @rule(data=st.data(), n=st.integers(1, 3))
    def api_insert(self, data: st.DataObject, n: int) -> None:
        before = self.model_rows()
        new = self.fresh_rows(n, data)
        self.db.insert(self.table_of(new))
        self.set_model([*before.elements(), *new])
        self.changed(before)

    @rule(data=st.data(), n=st.integers(1, 3), widened=st.booleans())
    def echo_append(self, data: st.DataObject, n: int, widened: bool) -> None:
        before = self.model_rows()
        new = self.fresh_rows(n, data)
        size = self.fs.getattr(DATA_CSV_ID).size
        if widened:  # the Linux client with the page cached: resend from offset 0
            old = self.fs.paths.read_file("/data/data.csv")
            self.fs.write(DATA_CSV_ID, 0, old + self.lines(new), StableHow.FILE_SYNC, ROOT)
        else:
            self.fs.write(DATA_CSV_ID, size, self.lines(new), StableHow.FILE_SYNC, ROOT)
        self.set_model([*before.elements(), *new])
        self.changed(before)

    @rule(data=st.data(), how=st.sampled_from(["sed", "chunks", "filesync"]))
    def overwrite(self, data: st.DataObject, how: str) -> None:
        before = self.model_rows()
        current = sorted(before.elements(), key=repr)
        keep = [r for r in current if data.draw(st.booleans())]
        edited = [(r[0], data.draw(_names), r[2]) if data.draw(st.booleans()) else r for r in keep]
        new = edited + self.fresh_rows(data.draw(st.integers(0, 2)), data)
        order = data.draw(st.permutations(new))
        content = render_csv(self.table_of(list(order)))
        if how == "sed":
            fid = self.fs.create_exclusive(DATA_DIR_ID, "sedtmp", b"12345678", ROOT)
            self.fs.setattr(fid, Sattr3(mode=0o644), ROOT)
            self.fs.paths.read_file("/data/data.csv")
            self.fs.write(fid, 0, content, StableHow.FILE_SYNC, ROOT)
            self.fs.rename(DATA_DIR_ID, "sedtmp", DATA_DIR_ID, "data.csv", ROOT)
        elif how == "chunks":
            self.fs.setattr(DATA_CSV_ID, Sattr3(size=0), ROOT)
            for off in range(0, len(content), 16):
                self.fs.write(DATA_CSV_ID, off, content[off : off + 16], StableHow.UNSTABLE, ROOT)
            self.fs.commit(DATA_CSV_ID, 0, 0, ROOT)  # durable; applied once the writer is quiet
            self.clock.now += 60
            self.fs.poll()
        else:  # a -o sync mount: FILE_SYNC writes, no COMMIT, applied when idle
            self.fs.setattr(DATA_CSV_ID, Sattr3(size=0), ROOT)
            for off in range(0, len(content), 16):
                self.fs.write(DATA_CSV_ID, off, content[off : off + 16], StableHow.FILE_SYNC, ROOT)
            self.clock.now += 60
            self.fs.poll()
        self.set_model(new)
        self.changed(before)

    @rule(bad=st.sampled_from([b"1,2\n", b"x,y,z\n", b"1,a,notanint\n", b'1,"open\n']))
    def bad_write(self, bad: bytes) -> None:
        content = self.fs.paths.read_file("/data/data.csv")
        try:
            self.fs.paths.write_file("/data/data.csv", content + bad, truncate=True)
        except NfsError:
            pass
        else:
            raise AssertionError("bad content was accepted")

    @rule()
    def remove_data_csv(self) -> None:
        before = self.model_rows()
        self.fs.paths.remove_file("/data/data.csv")
        self.set_model([])
        self.changed(before)

    @rule()
    def truncate_and_close(self) -> None:
        before = self.model_rows()
        self.fs.paths.truncate("/data/data.csv", 0)
        self.clock.now += 60
        self.fs.poll()  # a truncation alone never commits at idle
        assert self.db.version == self.versions
        self.fs.paths.commit("/data/data.csv")
        self.clock.now += 60
        self.fs.poll()
        self.set_model([])
        self.changed(before)

    @precondition(lambda self: sum(self.model_rows().values()) > 0)
    @rule(data=st.data())
    def api_writes_while_an_nfs_writer_works(self, data: st.DataObject) -> None:
        before = self.model_rows()
        content = self.fs.paths.read_file("/data/data.csv")
        victim = data.draw(st.sampled_from(sorted(before.elements(), key=repr)))
        self.fs.setattr(DATA_CSV_ID, Sattr3(size=0), ROOT)
        edited = [r for r in before.elements()]
        edited.remove(victim)
        staged = render_csv(self.table_of(edited))
        self.fs.write(DATA_CSV_ID, 0, staged, StableHow.UNSTABLE, ROOT)
        assert len(content) > 0
        extra = self.fresh_rows(1, data)
        self.db.insert(self.table_of(extra))  # someone else, meanwhile
        self.versions += 1
        self.fs.commit(DATA_CSV_ID, 0, 0, ROOT)
        self.clock.now += 60
        self.fs.poll()
        self.versions += 1
        self.set_model([*edited, *extra])

    # -- invariants ---------------------------------------------------------------

    @invariant()
    def table_matches_model(self) -> None:
        got = Counter(tuple(r.values()) for r in self.db.to_arrow().to_pylist())
        assert got == self.model_rows()
        assert self.db.version == self.versions

    @invariant()
    def data_csv_matches_model(self) -> None:
        content = self.fs.paths.read_file("/data/data.csv")
        assert self.fs.getattr(DATA_CSV_ID).size == len(content)
        shown = parse_csv(content, SCHEMA)
        assert Counter(tuple(r.values()) for r in shown.to_pylist()) == self.model_rows()


class KeyedTable(_Machine):
    """A table with a primary key, modelled as a dict."""

    key: ClassVar[list[str] | None] = ["id"]

    @initialize()
    def start(self) -> None:
        self.model: dict[int, tuple[Any, ...]] = {}

    def model_rows(self) -> Counter[tuple[Any, ...]]:
        return Counter(self.model.values())

    def set_model(self, rows: list[tuple[Any, ...]]) -> None:
        self.model = {r[0]: r for r in rows}

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def api_delete(self, data: st.DataObject) -> None:
        before = self.model_rows()
        key = data.draw(st.sampled_from(sorted(self.model)))
        self.db.delete_rows_where(f"id = {key}")
        del self.model[key]
        self.changed(before)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def duplicate_key_is_refused(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model)))
        size = self.fs.getattr(DATA_CSV_ID).size
        try:
            self.fs.write(DATA_CSV_ID, size, f"{key},dup,1\n".encode(), StableHow.FILE_SYNC, ROOT)
        except NfsError:
            pass
        else:
            raise AssertionError("a duplicate key was accepted")


class BagTable(_Machine):
    """A table without a key, modelled as a multiset of rows (duplicates allowed)."""

    @initialize()
    def start(self) -> None:
        self.bag: Counter[tuple[Any, ...]] = Counter()

    def model_rows(self) -> Counter[tuple[Any, ...]]:
        return +self.bag

    def set_model(self, rows: list[tuple[Any, ...]]) -> None:
        self.bag = Counter(rows)

    @precondition(lambda self: bool(self.bag))
    @rule(data=st.data())
    def duplicate_a_row_and_drop_one(self, data: st.DataObject) -> None:
        before = self.model_rows()
        rows = sorted(before.elements(), key=repr)
        twice = data.draw(st.sampled_from(rows))
        new = [*rows, twice]
        new.remove(data.draw(st.sampled_from(rows)))
        content = render_csv(self.table_of(new))
        self.fs.paths.write_file("/data/data.csv", content, truncate=True)
        self.set_model(new)
        self.changed(before)


_settings = settings(
    max_examples=15,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestKeyedTable = KeyedTable.TestCase
TestKeyedTable.settings = _settings
TestBagTable = BagTable.TestCase
TestBagTable.settings = _settings


_row = st.tuples(st.integers(0, 5), _names, _qty)


def _table(rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)


def _bag(t: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in t.to_pylist())


@given(old=st.lists(_row, max_size=8), new=st.lists(_row, max_size=8))
def test_apply_of_diff_is_the_new_multiset(
    old: list[tuple[Any, ...]], new: list[tuple[Any, ...]]
) -> None:
    a, b = _table(old), _table(new)
    assert _bag(apply_diff(a, diff_rows(a, b))) == _bag(b)


_keyed_rows = st.lists(_row, max_size=8, unique_by=lambda r: r[0])


@given(old=_keyed_rows, new=_keyed_rows)
def test_apply_of_keyed_diff_is_the_new_table(
    old: list[tuple[Any, ...]], new: list[tuple[Any, ...]]
) -> None:
    a, b = _table(old), _table(new)
    assert _bag(apply_diff(a, diff_rows(a, b, key=["id"]), key=["id"])) == _bag(b)
