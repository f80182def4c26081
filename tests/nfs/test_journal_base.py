"""Journal records of bytes equal to the base's (``B``): a rewrite that equals its base but
for a row journals that row, and what a COMMIT promised is still true after a restart."""

from __future__ import annotations

import itertools
import json
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import FileId, NfsError
from nfs.table.journal import JournalFile, JournalHeader, read_journal
from nfs.table.region import (
    PIECE_MIN,
    changed_regions,
    common_prefix,
    common_suffix,
    matching_pieces,
)
from nfs.table.segstore import Segment, SegmentedRendering
from nfs.table.staging import BytesBase, Staging
from nfs.table.tablefs import DATA_CSV_ID, TableFs
from posixlake import DatabaseOps
from tests.nfs.test_nfs_writes import Clock, crash

A = CallContext.local(peer="10.0.0.1:700")
_WRITE = 32 << 10


def _header() -> JournalHeader:
    return JournalHeader(
        write_id="w1", table_id="t", base_version=0, base_size=0, peer="p", uid=0, gid=0
    )


def _replayed(path: Path, base: BytesBase, *, spill_at: int, spill_dir: str) -> Staging:
    """A staging rebuilt from the journal at ``path`` over ``base``, as recovery does."""
    rec = read_journal(path)
    assert rec is not None
    out = Staging(base, base_version=0, touched=0.0, mtime=0.0, spill_at=spill_at)
    for op in rec.ops:
        if op.kind == "B":
            assert op.span is not None
            out.write_base(op.number, op.span.offset, op.span.length, touched=0.0, mtime=0.0)
        elif op.kind == "W":
            out.write(op.number, bytes(op.data), touched=0.0, mtime=0.0)
        else:
            out.truncate(op.number, touched=0.0, mtime=0.0)
    return out


class BaseRecordsModel(RuleBasedStateMachine):
    """A staging written with base bytes (``B`` records), bytes of its own (``W``) and
    truncations, journaled, against a bytearray; the journal replayed over the same base
    gives the same bytes, in memory or spilled."""

    BASE = bytes(range(256)) * 3

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory(prefix="base-records-")
        self.base = BytesBase(self.BASE)
        self.model = bytearray(self.BASE)
        self.spill_at = 1 << 20
        self.staging = Staging(self.base, base_version=0, touched=0.0, mtime=0.0)
        self.journal = JournalFile(Path(self.dir.name) / "w1.wal", _header())

    @initialize(spill_at=st.sampled_from([0, 7, 100, 1 << 20]))
    def start(self, spill_at: int) -> None:
        self.spill_at = spill_at
        self.staging = Staging(
            self.base,
            base_version=0,
            touched=0.0,
            mtime=0.0,
            spill_at=spill_at,
            spill_dir=self.dir.name,
        )

    def _offset(self, data: st.DataObject) -> int:
        return data.draw(st.integers(0, len(self.model) + 8))

    @rule(data=st.data(), chunk=st.binary(min_size=1, max_size=40))
    def write(self, data: st.DataObject, chunk: bytes) -> None:
        offset = self._offset(data)
        (source,), _crc = self.journal.write_pieces(offset, chunk, [(0, len(chunk), -1)])
        assert source is not None
        self.staging.write(offset, chunk, touched=1.0, mtime=1.0, source=source)
        self._model_write(offset, chunk)

    @rule(data=st.data())
    def write_base(self, data: st.DataObject) -> None:
        """A write whose bytes are pieces of the base (at any offsets) and of its own."""
        offset = self._offset(data)
        parts = data.draw(
            st.lists(
                st.one_of(
                    st.tuples(st.integers(0, len(self.BASE) - 1), st.integers(1, 60)),
                    st.binary(min_size=1, max_size=10),
                ),
                min_size=1,
                max_size=4,
            )
        )
        chunk = bytearray()
        pieces = []
        for part in parts:
            if isinstance(part, tuple):
                at, n = part[0], min(part[1], len(self.BASE) - part[0])
                pieces.append((len(chunk), len(chunk) + n, at))
                chunk += self.BASE[at : at + n]
            else:
                pieces.append((len(chunk), len(chunk) + len(part), -1))
                chunk += part
        seed = data.draw(st.integers(0, 2**32 - 1))
        sources, crc = self.journal.write_pieces(offset, bytes(chunk), pieces, seed=seed)
        assert crc == zlib.crc32(bytes(chunk), seed)
        view = memoryview(bytes(chunk))
        for (lo, hi, at), source in zip(pieces, sources, strict=True):
            if at >= 0:
                data_arg = view[lo:hi] if data.draw(st.booleans()) else None
                self.staging.write_base(
                    offset + lo, at, hi - lo, touched=1.0, mtime=1.0, data=data_arg
                )
            else:
                self.staging.write(offset + lo, view[lo:hi], touched=1.0, mtime=1.0, source=source)
        self._model_write(offset, bytes(chunk))

    def _model_write(self, offset: int, chunk: bytes) -> None:
        if offset > len(self.model):
            self.model += bytes(offset - len(self.model))
        self.model[offset : offset + len(chunk)] = chunk

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        size = data.draw(st.integers(0, len(self.model) + 8))
        self.journal.truncate(size)
        self.staging.truncate(size, touched=1.0, mtime=1.0)
        if size < len(self.model):
            del self.model[size:]
        else:
            self.model += bytes(size - len(self.model))

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(0, len(self.model) + 2))
        count = data.draw(st.integers(0, 80))
        got, _ = self.staging.read(start, count)
        assert bytes(got) == bytes(self.model[start : start + count])

    @rule()
    def recovered(self) -> None:
        """The journal replayed over the base (what recovery does) holds the same bytes."""
        self.journal.sync()
        again = _replayed(
            self.journal.path, self.base, spill_at=self.spill_at, spill_dir=self.dir.name
        )
        assert bytes(again.content()) == bytes(self.model)
        again.close()

    @invariant()
    def same_content(self) -> None:
        assert self.staging.size == len(self.model)
        assert bytes(self.staging.content()) == bytes(self.model)
        assert self.staging.same_as_base() == (bytes(self.model) == self.BASE)

    @invariant()
    def known_spans_are_the_bases(self) -> None:
        """What the staging says is the base's (not read again at apply) is."""
        for lo, hi, at in self.staging.same_spans():
            assert bytes(self.model[lo:hi]) == self.BASE[at : at + hi - lo]
        plain = BytesBase(bytes(self.model))
        same, quotes = common_prefix(self.staging, self.base)
        same_plain, quotes_plain = common_prefix(plain, self.base)
        assert same == same_plain and quotes % 2 == quotes_plain % 2
        limit = min(len(self.model), len(self.BASE))
        assert common_suffix(self.staging, self.base, limit) == common_suffix(
            plain, self.base, limit
        )

    def teardown(self) -> None:
        self.staging.close()
        self.journal.discard()
        self.dir.cleanup()


TestBaseRecordsModel = BaseRecordsModel.TestCase
TestBaseRecordsModel.settings = settings(max_examples=120, stateful_step_count=25)


@settings(max_examples=150)
@given(
    rows=st.integers(800, 3000),
    edits=st.lists(st.tuples(st.floats(0, 1), st.binary(max_size=40)), max_size=3),
    chunk=st.sampled_from([PIECE_MIN, 20_000, 65_536]),
)
def test_matching_pieces_cover_a_write_and_only_call_equal_bytes_equal(
    rows: int, edits: list[tuple[float, bytes]], chunk: int
) -> None:
    """Every piece called the base's is the base's bytes; the pieces cover each write in
    order; a rewrite that changes a few rows journals few bytes of its own."""
    base = b"id,name\n" + b"".join(b"%d,user-%d\n" % (i, i * 7) for i in range(rows))
    edited = bytearray(base)
    for where, text in sorted(edits, reverse=True):
        at = int(where * len(edited))
        edited[at:at] = text
    content = bytes(edited)
    shift = 0
    own = 0
    for offset in range(0, len(content), chunk):
        data = content[offset : offset + chunk]
        pieces, shift = matching_pieces(BytesBase(base), offset, data, shift)
        assert pieces[0][0] == 0 and pieces[-1][1] == len(data)
        for (lo, hi, at), nxt in zip(pieces, [*pieces[1:], None], strict=True):
            assert lo < hi
            if nxt is not None:
                assert hi == nxt[0]
            if at >= 0:
                assert hi - lo >= PIECE_MIN
                assert base[at : at + hi - lo] == data[lo:hi]
            else:
                own += hi - lo
    changed = sum(len(t) for _w, t in edits)
    # each edit costs at most the write around it, and a last write under PIECE_MIN is
    # its own bytes
    assert own <= len(edits) * (chunk + 2 * PIECE_MIN) + changed + PIECE_MIN
    if not edits:
        assert own < PIECE_MIN


_FIELD = st.one_of(
    st.from_regex(rb"[a-z0-9]{0,12}", fullmatch=True),
    st.from_regex(rb'"([a-z,\n]|""){0,12}"', fullmatch=True),  # quoted: commas, LFs, quotes
)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(_FIELD, _FIELD), min_size=1, max_size=8),
    copies=st.integers(4000, 8000),
    cuts=st.lists(st.floats(0, 1), max_size=3),
    where=st.floats(0, 1),
    new=st.tuples(_FIELD, _FIELD),
)
def test_a_staging_of_base_records_finds_the_regions_a_plain_copy_does(
    rows: list[tuple[bytes, bytes]],
    copies: int,
    cuts: list[float],
    where: float,
    new: tuple[bytes, bytes],
) -> None:
    """A rewrite staged as ``B`` records over a segmented rendering (quoted fields with
    line feeds and quotes) gives the regions the same bytes held plainly give: the
    prefix known without reading, and its quotes counted from a segment's start only."""
    records = [b"%d,%s,%s\n" % (i, *rows[i % len(rows)]) for i in range(copies)]
    header = b"id,a,b\n"
    bounds = sorted({0, len(records), *(int(c * len(records)) for c in cuts)})
    segments = [
        Segment(f"{i:064x}", memoryview(b"".join(records[lo:hi])).toreadonly(), hi - lo)
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds))
        if hi > lo
    ]
    base = SegmentedRendering(1, header, segments)
    old = header + b"".join(records)
    k = int(where * (len(records) - 1))
    edited = [*records[:k], b"%d,%s,%s\n" % (k, *new), *records[k + 1 :]]
    content = header + b"".join(edited)
    staged = Staging(base, base_version=1, touched=0.0, mtime=0.0, spill_at=1 << 14)
    staged.truncate(0, touched=0.0, mtime=0.0)
    shift = 0
    for offset in range(0, len(content), 20_000):
        data = content[offset : offset + 20_000]
        pieces, shift = matching_pieces(base, offset, data, shift)
        for lo, hi, at in pieces:
            if at >= 0:
                staged.write_base(offset + lo, at, hi - lo, touched=0.0, mtime=0.0)
            else:
                staged.write(offset + lo, data[lo:hi], touched=0.0, mtime=0.0)
    assert bytes(staged.content()) == content
    assert staged.same_spans()  # held as the base's, not read at apply
    plain, plain_base = BytesBase(content), BytesBase(old)
    same, quotes = common_prefix(staged, base)
    same_plain, quotes_plain = common_prefix(plain, plain_base)
    assert same == same_plain and quotes % 2 == quotes_plain % 2
    if same < len(content):
        assert changed_regions(staged, base, same, quotes) == changed_regions(
            plain, plain_base, same_plain, quotes_plain
        )
    staged.close()


# -- through TableFs: a COMMIT, a crash, the restart -----------------------------------------


def _table(tmp_path: Path) -> DatabaseOps:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "name": "String"}, engine="local")
    db.set_primary_key("id")
    db.insert([{"id": i, "name": f"user-{i * 7}"} for i in range(6000)])
    return db


def _fs(db: DatabaseOps, tmp_path: Path, clock: Clock) -> TableFs:
    return TableFs(
        db,
        clock=clock,
        idle_timer=False,
        state_dir=tmp_path / "state",
        segment_cache=tmp_path / "segments",
    )


def _read_all(fs: TableFs, fid: FileId = DATA_CSV_ID) -> bytes:
    """The file as the writer ``A`` reads it (what its edit is based on)."""
    size = fs.getattr(fid, A).size
    out = bytearray()
    while len(out) < size:
        data, _eof = fs.read(fid, len(out), 1 << 20, A)
        out += data
    return bytes(out)


def _overwrite(fs: TableFs, content: bytes) -> None:
    """``cat changed.csv > data.csv`` as the kernel sends it, up to the COMMIT (durable)."""
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    for pos in range(0, len(content), _WRITE):
        fs.write(DATA_CSV_ID, pos, content[pos : pos + _WRITE], StableHow.UNSTABLE, A)
    fs.commit(DATA_CSV_ID, 0, 0, A)


def _one_row_changed(shown: bytes) -> bytes:
    at = shown.index(b"\n3000,") + 1
    return shown[:at] + b"3000,renamed\n" + shown[shown.index(b"\n", at) + 1 :]


def test_a_one_row_rewrite_journals_the_row_and_recovers_byte_for_byte(tmp_path: Path) -> None:
    """The journal of a whole overwrite that changes one row holds that row's bytes, not
    the file's (the rest are ``B`` records); after a crash the restored staging is the
    content byte for byte, and it applies as that one change."""
    db = _table(tmp_path)
    clock = Clock()
    fs = _fs(db, tmp_path, clock)
    shown = _read_all(fs)
    content = _one_row_changed(shown)
    _overwrite(fs, content)
    ((path, journal_size),) = [(p, p.stat().st_size) for p in (tmp_path / "state").rglob("*.wal")]
    assert journal_size < len(content) // 4  # the bytes equal to the base are not in it
    rec = read_journal(path)
    assert rec is not None and {op.kind for op in rec.ops} == {"T", "B", "W"}
    assert path.read_bytes().startswith(b"PLNFSJ2\n")
    (w,) = fs._writers.values()  # the edit's digest, summed in the same pass as the records
    assert w.digest.of(w.staging) == (0, len(content), zlib.crc32(content))
    crash(fs)
    v = db.version
    fs2 = _fs(db, tmp_path, clock)
    try:
        (w,) = fs2._writers.values()
        assert bytes(w.staging.content()) == content
        assert w.digest.of(w.staging) == (0, len(content), zlib.crc32(content))
        assert db.version == v  # nothing applied at the restart
        fs2.commit(DATA_CSV_ID, 0, 0, A)
        fs2.finish(DATA_CSV_ID, A)
        assert db.version == v + 1
        names = dict(db.query("SELECT id, name FROM data").fetchall())
        assert names[3000] == "renamed" and names[2999] == f"user-{2999 * 7}"
        assert len(names) == 6000
    finally:
        fs2.close()


def test_a_journal_without_base_records_keeps_the_format_earlier_releases_read(
    tmp_path: Path,
) -> None:
    """Content unlike its base (no ``B`` record) is journaled as before: ``PLNFSJ1``."""
    db = _table(tmp_path)
    fs = _fs(db, tmp_path, Clock())
    try:
        content = b"id,name\n" + b"".join(b"%d,other-%d\n" % (i, i) for i in range(6000))
        _overwrite(fs, content)
        (path,) = (tmp_path / "state").rglob("*.wal")
        assert path.read_bytes().startswith(b"PLNFSJ1\n")
        rec = read_journal(path)
        assert rec is not None and {op.kind for op in rec.ops} == {"T", "W"}
    finally:
        fs.close()


def test_a_base_that_is_not_the_same_bytes_after_a_restart_is_refused(tmp_path: Path) -> None:
    """The base bytes ``B`` records name are checked (CRC) against the base rebuilt at the
    restart: a rendering that differs (here a cached segment changed on disk, same length)
    is not applied over: the journal is set aside (``*.failed``), the writer gets EIO, the
    table is unchanged. Renamed back once the base renders as it was (the damaged segment
    removed), it is recovered whole."""
    db = _table(tmp_path)
    clock = Clock()
    fs = _fs(db, tmp_path, clock)
    shown = _read_all(fs)
    content = _one_row_changed(shown)
    _overwrite(fs, content)
    crash(fs)
    (segment,) = [
        p for p in (tmp_path / "segments").rglob("*.seg") if b"\n100,user-700\n" in p.read_bytes()
    ]
    raw = bytearray(segment.read_bytes())
    at = raw.index(b"\n100,user-700\n") + 1
    raw[at : at + 3] = b"101"  # same length: the cache cannot tell
    segment.write_bytes(bytes(raw))
    v = db.version
    fs2 = _fs(db, tmp_path, clock)
    try:
        assert not fs2._writers
        with pytest.raises(NfsError) as e:
            fs2.commit(DATA_CSV_ID, 0, 0, A)
        assert Nfsstat3(e.value.status) == Nfsstat3.NFS3ERR_IO
        assert db.version == v
        journals = tmp_path / "state"
        (failed,) = journals.rglob("*.failed")
        assert not list(journals.rglob("*.wal"))
    finally:
        fs2.close()
    failed.rename(failed.with_suffix(".wal"))
    segment.unlink()  # rendered again from the table's file
    fs3 = _fs(db, tmp_path, clock)
    try:
        (w,) = fs3._writers.values()
        assert bytes(w.staging.content()) == content
    finally:
        fs3.close()


def test_a_torn_magic_reads_base_records_as_a_torn_tail(tmp_path: Path) -> None:
    """A crash before the fsync that follows the first ``B`` record may leave its record
    on disk and the old magic: no reply promised it, and it is read as the torn tail (a
    ``B`` record is never read in a ``PLNFSJ1`` journal)."""
    journal = JournalFile(tmp_path / "w1.wal", _header())
    journal.write(0, b"id\n")
    journal.write_pieces(3, b"x" * 20, [(0, 20, 5)])
    journal.sync()
    raw = bytearray((tmp_path / "w1.wal").read_bytes())
    assert raw.startswith(b"PLNFSJ2\n")
    raw[:8] = b"PLNFSJ1\n"
    (tmp_path / "w1.wal").write_bytes(bytes(raw))
    rec = read_journal(tmp_path / "w1.wal")
    assert rec is not None
    assert [(op.kind, op.number) for op in rec.ops] == [("W", 0)]
    journal.discard()


def test_base_records_appended_after_a_restart_recover_again(tmp_path: Path) -> None:
    """A journal of ``W`` records only (``PLNFSJ1``) recovered and appended to with ``B``
    records (its descriptor is O_APPEND: the magic is rewritten through another one), then
    a second crash: the content comes back byte for byte."""
    db = _table(tmp_path)
    clock = Clock()
    fs = _fs(db, tmp_path, clock)
    content = _one_row_changed(_read_all(fs))
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    fs.write(DATA_CSV_ID, 0, content[:1000], StableHow.UNSTABLE, A)  # under PIECE_MIN: W
    fs.commit(DATA_CSV_ID, 0, 0, A)
    (path,) = (tmp_path / "state").rglob("*.wal")
    assert path.read_bytes().startswith(b"PLNFSJ1\n")
    crash(fs)
    fs2 = _fs(db, tmp_path, clock)
    for pos in range(1000, len(content), _WRITE):
        fs2.write(DATA_CSV_ID, pos, content[pos : pos + _WRITE], StableHow.UNSTABLE, A)
    fs2.commit(DATA_CSV_ID, 0, 0, A)
    raw = path.read_bytes()
    assert raw.startswith(b"PLNFSJ2\n") and b"PLNFSJ2" not in raw[8:]
    assert len(raw) < len(content) // 4
    crash(fs2)
    fs3 = _fs(db, tmp_path, clock)
    try:
        (w,) = fs3._writers.values()
        assert bytes(w.staging.content()) == content
    finally:
        fs3.close()


def _raw_record(kind: bytes, number: int, data: bytes) -> bytes:
    head = kind + number.to_bytes(8, "big") + len(data).to_bytes(4, "big")
    return head + data + zlib.crc32(data, zlib.crc32(head)).to_bytes(4, "big")


def test_a_journal_of_an_earlier_release_recovers_as_before(tmp_path: Path) -> None:
    """A ``PLNFSJ1`` journal as releases before base records wrote it (built byte by byte
    here, not with this code): recovered for its writer, the same content."""
    db = _table(tmp_path)
    clock = Clock()
    fs = _fs(db, tmp_path, clock)
    shown = _read_all(fs)
    content = _one_row_changed(shown)
    journal_dir = Path(fs._journals.path)
    fs.close()
    head = {
        "write_id": "0123456789abcdef01234567",
        "table_id": db.table_id,
        "base_version": db.version,
        "base_size": len(shown),
        "peer": A.peer,
        "uid": A.uid,
        "gid": A.gid,
        "started": 1,
        "part": "",
    }
    raw = b"PLNFSJ1\n" + _raw_record(b"H", 0, json.dumps(head).encode())
    raw += _raw_record(b"T", 0, b"")
    for pos in range(0, len(content), _WRITE):
        raw += _raw_record(b"W", pos, content[pos : pos + _WRITE])
    (journal_dir / "0123456789abcdef01234567.wal").write_bytes(raw)
    fs2 = _fs(db, tmp_path, clock)
    try:
        (w,) = fs2._writers.values()
        assert bytes(w.staging.content()) == content
        fs2.commit(DATA_CSV_ID, 0, 0, A)
        fs2.finish(DATA_CSV_ID, A)
        names = dict(db.query("SELECT id, name FROM data").fetchall())
        assert names[3000] == "renamed" and len(names) == 6000
    finally:
        fs2.close()


def test_a_partition_rewrite_of_one_row_recovers_from_base_records(tmp_path: Path) -> None:
    """A partition's file is staged over that partition's rendering: its ``B`` records
    are checked against it at the restart, and the edit applies to that partition."""
    db = DatabaseOps.create(
        tmp_path / "t",
        {"id": "Int64", "region": "String", "name": "String"},
        partition_by=["region"],
        engine="local",
    )
    db.insert([{"id": i, "region": ["eu", "us"][i % 2], "name": f"n{i}"} for i in range(12000)])
    clock = Clock()
    fs = _fs(db, tmp_path, clock)
    path = "/partitions/region=eu/data.csv"
    fid = fs.paths.resolve(path)
    shown = _read_all(fs, fid)
    at = shown.index(b"\n3000,") + 1
    content = shown[:at] + b"3000,eu,renamed\n" + shown[shown.index(b"\n", at) + 1 :]
    fs.setattr(fid, Sattr3(size=0), A)
    for pos in range(0, len(content), _WRITE):
        fs.write(fid, pos, content[pos : pos + _WRITE], StableHow.UNSTABLE, A)
    fs.commit(fid, 0, 0, A)
    (journal,) = (tmp_path / "state").rglob("*.wal")
    rec = read_journal(journal)
    assert rec is not None and rec.header.part == "region=eu"
    assert "B" in {op.kind for op in rec.ops}
    crash(fs)
    fs2 = _fs(db, tmp_path, clock)
    try:
        (w,) = fs2._writers.values()
        assert bytes(w.staging.content()) == content
        fs2.finish(fs2.paths.resolve(path), A)
        names = dict(db.query("SELECT id, name FROM data").fetchall())
        assert names[3000] == "renamed" and names[3001] == "n3001" and len(names) == 12000
    finally:
        fs2.close()
