"""Three NFS writers, API writers, pauses and crashes against a model of a keyed table.

Each NFS writer edits data.csv with the traffic a real NFSv3 client sends: it reads the
file (its base; sometimes in two READs with another writer's commit in between: a torn
base, refused with EIO), opens it again later (a close-to-open GETATTR and ACCESS, which
must not move the base), stages a rewrite in chunks with writeback COMMITs in the middle
and pauses shorter than the idle period (none of which applies a prefix), closes it (a
COMMIT: durable only; the edit applies once the writer is quiet), or runs ``sed -i`` (a
temporary file renamed onto data.csv, LOOKUPs in between), or appends a line with one
FILE_SYNC WRITE, possibly from a stale page — while the others and the API write in
between. Names hold commas, quotes and line feeds; some rewrites quote the header line
(a whole parse, diffed against the writer's base). The view may crash (dropped without
close) and restart on the same state directory at any step, also with writers pending:
they resend their uncommitted chunks, and a writer whose edit the crashed server had
applied just before (the reply lost) resends that edit, which must change nothing. The
model applies each finished edit as a 3-way change (last commit wins per key). After
every step the table equals the model: no acknowledged change is lost, and no deleted
row comes back.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import NfsError
from nfs.table.tablefs import DATA_CSV_ID, DATA_DIR_ID, PathOps, TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import parse_csv, render_csv

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
WRITERS = [CallContext.local(peer=f"10.0.0.{i}:7{i}") for i in (1, 2, 3)]
OBSERVER = CallContext.local(peer="10.0.0.99:799")
Row = tuple[int, str | None]
_names = st.sampled_from(["a", "b b", "c,d", 'q"q', "", "x", "line\nfeed"])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _render(rows: dict[int, Row]) -> bytes:
    table = pa.Table.from_pylist(
        [{"id": r[0], "name": r[1]} for r in sorted(rows.values())], SCHEMA
    )
    return render_csv(table)


class Pending:
    """An edit staged by one writer and not yet applied (still writing, or closed and
    waiting for its writer to be quiet)."""

    def __init__(self, base: dict[int, Row], new: dict[int, Row], content: bytes) -> None:
        self.base, self.new, self.content = base, new, content
        self.version = -1  # the table version the writer read its base at
        self.chunks = [(off, content[off : off + 24]) for off in range(0, len(content), 24)]
        self.resend = False  # a resend of an edit already applied: changes nothing


class NfsWriters(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="nfs-writers-"))
        self.clock = Clock()
        self.db = DatabaseOps.create(
            self.dir / "t", {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
        )
        self.db.insert([{"id": i, "name": f"n{i}"} for i in range(1, 4)])
        self.model: dict[int, Row] = {i: (i, f"n{i}") for i in range(1, 4)}
        self.version_seen: dict[int, int] = {}
        self.fs = self._start()
        self.pending: OrderedDict[int, Pending] = OrderedDict()
        self.seen: dict[int, bytes] = {}
        self.torn: set[int] = set()  # writers whose last read came from two versions
        self.read_this_boot: set[int] = set()  # writers that read since the server started
        self.touched: dict[int, float] = {}
        self.applied: dict[int, Pending] = {}  # each writer's last edit applied at idle
        self.next_id = 100

    def _start(self) -> TableFs:
        return TableFs(
            self.db,
            clock=self.clock,
            idle_timer=False,
            idle_seconds=5,
            state_dir=self.dir / "state",
        )

    def teardown(self) -> None:
        self.fs.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def _cached_after_write(self, w: int, edit: Pending) -> None:
        """What the client's page cache holds after its rewrite was applied: its own bytes
        when the table became exactly them with no other commit since the client read its
        base (the server keeps showing the writer's bytes then); when others committed
        meanwhile, even changes the rewrite overrode, the server's attributes differ and
        the client reads again (modelled as no cached page: see docs/nfs-writes.md for the
        case where it does not)."""
        alone = self.db.version in (edit.version, edit.version + 1)
        if self.model == edit.new and alone:
            self.seen[w] = edit.content
        else:
            self.seen.pop(w, None)

    def _apply(self, edit: Pending) -> None:
        if edit.resend:
            return
        for k in set(edit.base) | set(edit.new):
            before, after = edit.base.get(k), edit.new.get(k)
            if before == after:
                continue
            if after is None:
                self.model.pop(k, None)
            else:
                self.model[k] = after

    # -- NFS writers ----------------------------------------------------------------

    @rule(w=st.integers(0, 2), data=st.data(), reread=st.booleans())
    def begin_rewrite(self, w: int, data: st.DataObject, reread: bool) -> None:
        """Open data.csv with O_TRUNC and write an edit of what the client holds: what it
        reads now, or (``reread`` False) what it read last, however long ago."""
        if w in self.pending:
            return
        ctx = WRITERS[w]
        # what a client read is known to the server until it restarts (not kept on disk):
        # after a restart the client reads again (docs/nfs-writes.md)
        if reread or w not in self.seen or w not in self.read_this_boot:
            self.seen[w] = PathOps(self.fs, ctx).read_file("/data/data.csv")
            self.torn.discard(w)
            self.read_this_boot.add(w)
            self.version_seen[w] = self.db.version
        shown = self.seen[w]
        self.fs.getattr(DATA_CSV_ID, ctx)  # close-to-open
        self.fs.access(DATA_CSV_ID, 0x1F, ctx)
        if w in self.torn:  # its bytes come from two versions: refused, nothing staged
            with pytest.raises(NfsError) as e:
                self.fs.setattr(DATA_CSV_ID, Sattr3(size=0), ctx)
            assert Nfsstat3(e.value.status) == Nfsstat3.NFS3ERR_IO
            return
        edit = self._edit(shown, data)
        edit.version = self.version_seen[w]
        self.fs.setattr(DATA_CSV_ID, Sattr3(size=0), ctx)
        flush_at = data.draw(st.integers(0, len(edit.chunks)))
        for i, (off, chunk) in enumerate(edit.chunks):
            self.fs.write(DATA_CSV_ID, off, chunk, StableHow.UNSTABLE, ctx)
            if i == flush_at:  # writeback: a COMMIT while the program still writes
                self.fs.commit(DATA_CSV_ID, 0, 0, ctx)
        self.pending[w] = edit
        self.touched[w] = self.clock.now

    @rule(w=st.integers(0, 2), split=st.integers(1, 40), data=st.data())
    def torn_read(self, w: int, split: int, data: st.DataObject) -> None:
        """Two READs of data.csv with another writer's commit in between."""
        if w in self.pending or not self.model:
            return
        ctx = WRITERS[w]
        first, eof = self.fs.read(DATA_CSV_ID, 0, split, ctx)
        if eof:
            return
        self.api_update(data)
        rest, _ = self.fs.read(DATA_CSV_ID, split, 1 << 20, ctx)
        self.seen[w] = bytes(first) + bytes(rest)
        self.version_seen[w] = self.db.version
        self.torn.add(w)
        self.read_this_boot.add(w)

    @rule(w=st.integers(0, 2), data=st.data())
    def sed_i(self, w: int, data: st.DataObject) -> None:
        """sed -i: a temporary file, read data.csv, write, RENAME onto data.csv."""
        if w in self.pending:
            return
        ctx = WRITERS[w]
        name = f"sed{w}tmp"
        tmp = self.fs.create_exclusive(DATA_DIR_ID, name, b"12345678", ctx)
        cached = w in self.seen and w in self.read_this_boot and w not in self.torn
        if cached and data.draw(st.booleans()):
            shown = self.seen[w]  # sed reads from the client's page cache: no READ is sent
        else:
            shown = PathOps(self.fs, ctx).read_file("/data/data.csv")
            self.read_this_boot.add(w)
        self.seen[w] = shown  # the client's page cache holds what it read last
        self.torn.discard(w)
        edit = self._edit(shown, data)
        if data.draw(st.booleans()):  # another writer commits before sed renames
            self.api_insert(data)
        self.fs.write(tmp, 0, edit.content, StableHow.FILE_SYNC, ctx)
        self.fs.lookup(DATA_DIR_ID, "data.csv", ctx)
        self.fs.getattr(DATA_CSV_ID, ctx)
        self.fs.rename(DATA_DIR_ID, name, DATA_DIR_ID, "data.csv", ctx)
        self._apply(edit)
        self.seen.pop(w, None)  # the client's cached data.csv is invalidated by the rename

    def _edit(self, shown: bytes, data: st.DataObject) -> Pending:
        base: dict[int, Row] = {
            r["id"]: (r["id"], r["name"]) for r in parse_csv(shown, SCHEMA).to_pylist()
        }
        new: dict[int, Row] = {}
        for k, row in sorted(base.items()):
            choice = data.draw(st.sampled_from(["keep", "edit", "drop"]))
            if choice == "keep":
                new[k] = row
            elif choice == "edit":
                new[k] = (k, data.draw(_names))
        for _ in range(data.draw(st.integers(0, 2))):
            k = self._fresh()
            new[k] = (k, data.draw(_names))
        content = _render(new)
        if data.draw(st.booleans()):  # a quoted header: parsed whole, diffed from the base
            content = b'"id","name"' + content[content.index(b"\n") :]
        return Pending(base, new, content)

    @precondition(lambda self: bool(self.pending))
    @rule(data=st.data())
    def close_rewrite(self, data: st.DataObject) -> None:
        """close(): a COMMIT. Durable only: the edit applies once its writer is quiet."""
        w = data.draw(st.sampled_from(sorted(self.pending)))
        self.fs.commit(DATA_CSV_ID, 0, 0, WRITERS[w])

    def _applied(self, w: int) -> None:
        edit = self.pending.pop(w)
        self._apply(edit)
        if not edit.resend:
            self._cached_after_write(w, edit)
            self.applied[w] = edit

    @rule(w=st.integers(0, 2), data=st.data(), stale=st.booleans())
    def echo_append(self, w: int, data: st.DataObject, stale: bool) -> None:
        if w in self.pending:
            return
        ctx = WRITERS[w]
        k = self._fresh()
        row = (k, data.draw(_names))
        line = _render({k: row}).split(b"\n", 1)[1]
        old = self.seen.get(w)
        if stale and old is not None and w not in self.torn:  # its last page, widened
            self.fs.write(DATA_CSV_ID, 0, old + line, StableHow.FILE_SYNC, ctx)
            # a page the server cannot place is a rewrite of what the client read, applied
            # once its writer is quiet: everyone pauses
            self.model[k] = row
            self.writers_go_idle()
            self.seen[w] = old + line
            return
        else:
            size = self.fs.getattr(DATA_CSV_ID, ctx).size
            self.fs.write(DATA_CSV_ID, size, line, StableHow.FILE_SYNC, ctx)
            self.seen.pop(w, None)
        self.model[k] = row

    @rule(w=st.integers(0, 2))
    def read(self, w: int) -> None:
        if w not in self.pending:
            self.seen[w] = PathOps(self.fs, WRITERS[w]).read_file("/data/data.csv")
            self.version_seen[w] = self.db.version
            self.torn.discard(w)
            self.read_this_boot.add(w)

    # -- API writers ------------------------------------------------------------------

    @rule(data=st.data())
    def api_insert(self, data: st.DataObject) -> None:
        k = self._fresh()
        name = data.draw(_names)
        self.db.insert({"id": k, "name": name})
        self.model[k] = (k, name)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def api_delete(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from(sorted(self.model)))
        self.db.delete_rows_where(f"id = {k}")
        del self.model[k]

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def api_update(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from(sorted(self.model)))
        self.db.update(f"id = {k}", {"name": "api"})
        self.model[k] = (k, "api")

    # -- time and faults ----------------------------------------------------------------

    @rule()
    def short_pause(self) -> None:
        self.clock.now += 1
        self.fs.poll()
        for w in list(self.pending):  # a writer idle for idle_seconds is done
            if self.clock.now - self.touched[w] >= 5:
                self._applied(w)

    @rule()
    def writers_go_idle(self) -> None:
        """Every writer is quiet for the idle period: their edits apply, oldest first."""
        self.clock.now += 6
        self.fs.poll()
        for w in list(self.pending):
            self._applied(w)

    def _restart(self) -> None:
        verf = self.fs.write_verifier()
        for writer in self.fs._writers.values():
            if writer.journal is not None:
                writer.journal.close()  # the process dies: no close(), nothing applied
        self.fs._journals.release()
        self.fs = self._start()
        assert self.fs.write_verifier() != verf
        # the new server knows nothing of what clients read: a rewrite reads again (see
        # begin_rewrite); a client's torn page stays torn in its cache all the same
        self.read_this_boot.clear()

    def _resend(self) -> None:
        for w, edit in self.pending.items():  # clients resend their UNSTABLE writes
            for off, chunk in edit.chunks:
                self.fs.write(DATA_CSV_ID, off, chunk, StableHow.UNSTABLE, WRITERS[w])
            self.touched[w] = self.clock.now

    @rule()
    def crash_and_restart(self) -> None:
        self._restart()
        self._resend()

    @precondition(lambda self: bool(self.pending))
    @rule()
    def crash_with_writers_pending(self) -> None:
        self._restart()
        self._resend()
        for w in self.pending:
            self.fs.commit(DATA_CSV_ID, 0, 0, WRITERS[w])

    @precondition(lambda self: any(w not in self.pending for w in self.applied))
    @rule(data=st.data())
    def crash_before_the_reply_and_resend(self, data: st.DataObject) -> None:
        """The server applied a writer's edit and died before the reply: the client
        resends its WRITEs and COMMIT after the restart; nothing changes a second time."""
        w = data.draw(st.sampled_from(sorted(x for x in self.applied if x not in self.pending)))
        self._restart()
        self._resend()
        edit = self.applied.pop(w)
        again = Pending(edit.base, edit.new, edit.content)
        again.resend = True
        for off, chunk in again.chunks:
            self.fs.write(DATA_CSV_ID, off, chunk, StableHow.UNSTABLE, WRITERS[w])
        self.fs.commit(DATA_CSV_ID, 0, 0, WRITERS[w])
        self.pending[w] = again
        self.touched[w] = self.clock.now

    # -- invariants ---------------------------------------------------------------

    @invariant()
    def table_is_the_model(self) -> None:
        got = {r["id"]: (r["id"], r["name"]) for r in self.db.to_arrow().to_pylist()}
        assert self.db.to_arrow().num_rows == len(got)  # no repeated key
        assert got == self.model

    @invariant()
    def each_writer_sees_its_staging_and_others_the_table(self) -> None:
        for w, edit in self.pending.items():
            if edit.resend:  # no SETATTR is resent: the base's tail shows until it applies
                continue
            assert PathOps(self.fs, WRITERS[w]).read_file("/data/data.csv") == edit.content
        shown = PathOps(self.fs, OBSERVER).read_file("/data/data.csv")
        rows: Any = parse_csv(shown, SCHEMA).to_pylist()
        assert {r["id"]: (r["id"], r["name"]) for r in rows} == self.model


TestNfsWriters = NfsWriters.TestCase
# Derandomized, so the suite's verdict is stable. Runs with random seeds (900 examples of
# 20 steps each, several seeds) found three bugs, each now a test of its own in
# test_nfs_writes.py: a page holding the client's own append whose version was no longer
# at hand, or that no version ever was (a deleted row came back), and idle stagings
# recovered after a crash applied in another order than without it. To hunt further,
# POSIXLAKE_MODEL_EXAMPLES=N (and POSIXLAKE_MODEL_STEPS) runs N random examples, seeded by
# pytest's --hypothesis-seed, without the example database: scripts/nfs_model_seeds.sh.
_HUNT = int(os.environ.get("POSIXLAKE_MODEL_EXAMPLES") or 0)
TestNfsWriters.settings = settings(
    max_examples=_HUNT or 20,
    stateful_step_count=int(os.environ.get("POSIXLAKE_MODEL_STEPS") or 15),
    deadline=None,
    derandomize=not _HUNT,
    print_blob=bool(_HUNT),
    suppress_health_check=[HealthCheck.too_slow],
)
if _HUNT:  # each seed on its own: no replay of an earlier seed's failure
    TestNfsWriters.settings = settings(TestNfsWriters.settings, database=None)
