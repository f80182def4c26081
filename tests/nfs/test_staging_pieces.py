"""A staging's written bytes: in memory, then pieces of its journal's records (PieceBuffer)."""

from __future__ import annotations

import os
import tempfile
import zlib
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from nfs.protocol.nfs3 import Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.table.journal import JournalDir, JournalFile, JournalHeader, read_journal
from nfs.table.staging import SPILL_AT, BytesBase, PieceBuffer, Staging
from nfs.table.tablefs import DATA_CSV_ID, TableFs
from posixlake import DatabaseOps
from tests.nfs.test_nfs_writes import Clock, crash


def _header(write_id: str = "w1") -> JournalHeader:
    return JournalHeader(
        write_id=write_id, table_id="t", base_version=0, base_size=0, peer="p", uid=0, gid=0
    )


class PieceBufferModel(RuleBasedStateMachine):
    """PieceBuffer against a bytearray: writes (journaled or not), prepends, truncations,
    spilling at any point, the journal closed and unlinked under it."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory(prefix="pieces-")
        self.journal: JournalFile | None = None
        self.model = bytearray()
        self.buf = PieceBuffer()

    @initialize(spill_at=st.sampled_from([0, 5, 40, 1 << 20]))
    def start(self, spill_at: int) -> None:
        self.buf = PieceBuffer(spill_at=spill_at, directory=self.dir.name)
        self.journal = JournalFile(Path(self.dir.name) / "w1.wal", _header())

    @rule(data=st.data(), chunk=st.binary(max_size=24), journaled=st.booleans())
    def write(self, data: st.DataObject, chunk: bytes, journaled: bool) -> None:
        pos = data.draw(st.integers(0, len(self.model)))
        source = None
        if journaled and self.journal is not None:
            source = self.journal.write(pos, chunk)
        self.buf.write_at(pos, chunk, source=source)
        self.model[pos : pos + len(chunk)] = chunk

    @rule(chunk=st.binary(max_size=16))
    def prepend(self, chunk: bytes) -> None:
        self.buf.prepend(chunk)
        self.model[0:0] = chunk

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        size = data.draw(st.integers(0, len(self.model)))
        self.buf.truncate(size)
        del self.model[size:]

    @rule()
    def journal_discarded(self) -> None:
        """The writer's journal goes (committed): the staging still reads its bytes."""
        if self.journal is not None:
            self.journal.discard()
            self.journal = None

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(0, len(self.model) + 2))
        end = data.draw(st.integers(start, len(self.model) + 4))
        assert self.buf.read(start, end) == bytes(self.model[start:end])

    @invariant()
    def same_bytes(self) -> None:
        assert len(self.buf) == len(self.model)
        assert self.buf.read(0, len(self.model)) == bytes(self.model)

    def teardown(self) -> None:
        self.buf.close()
        if self.journal is not None:
            self.journal.discard()
        self.dir.cleanup()


TestPieceBufferModel = PieceBufferModel.TestCase
TestPieceBufferModel.settings = settings(max_examples=150, stateful_step_count=30)


def test_a_spilled_rewrite_reads_its_journal_and_writes_no_second_copy(tmp_path: Path) -> None:
    """A whole rewrite past spill_at, each write journaled: its bytes are the journal's
    records (one copy on disk), and they stay readable once the journal is discarded."""
    journals = JournalDir(tmp_path / "journal")
    journal = journals.create(_header())
    s = Staging(
        BytesBase(b"id\n1\n"),
        base_version=0,
        touched=0.0,
        mtime=0.0,
        spill_at=64,
        spill_dir=str(tmp_path),
    )
    s.truncate(0, touched=1.0, mtime=1.0)
    journal.truncate(0)
    content = b"id\n" + b"".join(b"%d\n" % i for i in range(2000))
    for pos in range(0, len(content), 100):
        chunk = content[pos : pos + 100]
        s.write(pos, chunk, touched=1.0, mtime=1.0, source=journal.write(pos, chunk))
    journal.sync()
    assert s.spill_bytes == 0  # nothing written a second time
    assert bytes(s.content()) == content
    rec = read_journal(journal.path)
    assert rec is not None and len(rec.ops) == 1 + (len(content) + 99) // 100
    journal.discard()  # committed: the journal goes, the staging may live on (a page)
    assert not journal.path.exists()
    assert bytes(s.content()) == content
    assert s.read(len(content) - 5, 10) == (content[-5:], True)
    s.close()


def test_unjournaled_bytes_spill_to_a_file(tmp_path: Path) -> None:
    """Bytes without a journal record (base bytes brought in, zeros, an unjournaled
    first write) go to the temporary file once spilled."""
    s = Staging(
        BytesBase(b"x" * 100),
        base_version=0,
        touched=0.0,
        mtime=0.0,
        spill_at=16,
        spill_dir=str(tmp_path),
    )
    s.write(150, b"tail\n", touched=1.0, mtime=1.0)  # base bytes 100.., zeros, then tail
    assert s.spill_bytes == 50 + 5  # the zeros and the tail (below 100: the base's, not buf)
    assert bytes(s.content()) == b"x" * 100 + bytes(50) + b"tail\n"
    s.close()


def test_journal_records_carry_zlib_crc32(tmp_path: Path) -> None:
    """The journal's CRC (ISA-L's) is zlib's CRC-32: journals of earlier releases and
    of this one read the same."""
    journal = JournalFile(tmp_path / "w1.wal", _header())
    data = bytes(range(256)) * 5000
    fd, at = journal.write(7, data)
    journal.sync()
    raw = (tmp_path / "w1.wal").read_bytes()
    head = raw[at - 13 : at]
    assert head == b"W" + (7).to_bytes(8, "big") + len(data).to_bytes(4, "big")
    assert raw[at : at + len(data)] == data
    crc = int.from_bytes(raw[at + len(data) : at + len(data) + 4], "big")
    assert crc == zlib.crc32(data, zlib.crc32(head))
    assert os.pread(fd, 10, at) == data[:10]
    journal.discard()


def test_a_rewrite_past_spill_at_is_on_disk_once_and_recovered_from_its_journal(
    tmp_path: Path,
) -> None:
    """A whole rewrite larger than SPILL_AT, committed, then a crash: before and after the
    restart the staging's bytes are its journal's records (none written to a spill file),
    and the recovered staging holds the same content."""
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "name": "String"}, engine="local")
    db.insert([{"id": 1, "name": "a"}])
    state = tmp_path / "state"
    clock = Clock()
    ctx = CallContext.local(peer="10.0.0.1:700")
    fill = b"x" * 100
    content = b"id,name\n" + b"".join(b"%d,%s\n" % (i, fill) for i in range(SPILL_AT // 100))
    assert len(content) > SPILL_AT
    fs = TableFs(db, clock=clock, idle_timer=False, state_dir=state)
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), ctx)
    for pos in range(0, len(content), 1 << 20):
        fs.write(DATA_CSV_ID, pos, content[pos : pos + (1 << 20)], StableHow.UNSTABLE, ctx)
    fs.commit(DATA_CSV_ID, 0, 0, ctx)  # durable: the journal is fsynced
    (w,) = fs._writers.values()
    assert w.staging.size == len(content)
    assert w.staging.spill_bytes == 0
    crash(fs)
    fs2 = TableFs(db, clock=clock, idle_timer=False, state_dir=state)
    try:
        (r,) = fs2._writers.values()
        assert r.staging.spill_bytes == 0
        assert r.staging.size == len(content)
        for pos in range(0, len(content), 4 << 20):
            got, _ = r.staging.read(pos, 4 << 20)
            assert got == content[pos : pos + (4 << 20)]
        assert db.version == 1  # nothing applied yet
    finally:
        fs2.close()


def _open_files() -> list[str]:
    fds = Path("/proc/self/fd")
    out = []
    for fd in fds.iterdir():
        try:
            out.append(os.readlink(fd))
        except OSError:
            continue
    return out


def test_a_staging_in_memory_keeps_no_journal_open(tmp_path: Path) -> None:
    """Below spill_at a staging holds its bytes in memory and no descriptor of its
    journal: once the journal is discarded (committed), its file is gone for good, even
    while the staging lives on (as the client's page)."""
    journal = JournalFile(tmp_path / "w1.wal", _header())
    s = Staging(BytesBase(b"id\n"), base_version=0, touched=0.0, mtime=0.0)
    s.write(3, b"1\n", touched=1.0, mtime=1.0, source=journal.write(3, b"1\n"))
    journal.discard()
    assert not any("w1.wal" in name for name in _open_files())
    assert bytes(s.content()) == b"id\n1\n"
    s.close()
