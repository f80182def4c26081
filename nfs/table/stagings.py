"""Staging and journal: each writer's staged content of data.csv and its durable journal.

Owns: a writer's staging (its bytes over its base; past ``SPILL_AT`` in the state dir),
journaling each operation before it is staged (a WRITE's parts equal to its base, compared
as it arrives, as base records: `nfs.table.region.matching_pieces`), fsync before a reply promises it
(FILE_SYNC, COMMIT, SETATTR), what a journal keeps of its base (a shadow's or a client's
page: recovery must not need a cache), and ``flush``. The rules of when a staging applies
are :mod:`nfs.table.writes`'s; recovering journals is :mod:`nfs.table.recovery`'s.
"""

from __future__ import annotations

import logging
import secrets
import weakref
from pathlib import Path
from typing import Final

from nfs.protocol.vfs import NfsError
from nfs.table.journal import JournalFile, JournalHeader, KeptBase, KeptPage
from nfs.table.reads import Reads
from nfs.table.region import PIECE_MIN, matching_pieces, release_compared
from nfs.table.staging import Base, BytesBase, OwnContent, Source, Staging, read_all
from nfs.table.state import TableState, journal_error, storage_error
from nfs.table.writers import Writer

__all__ = ["Stagings"]

logger = logging.getLogger("nfs.table.tablefs")


_GIVE_UP: Final = 8
"""Writes in a row with no bytes equal to the base's, after which only every 16th is
compared (a rewrite that changes every row pays little for the comparison)."""


_RELEASE: Final = 64 << 20
"""Base bytes compared (contiguous) before their mapped pages are let go, in one call."""


class _Shift:
    """What the last writes of a staging found (see `region.matching_pieces`), and the
    base range compared whose mapped pages are not let go yet (``lo``, ``hi``)."""

    __slots__ = ("hi", "lo", "misses", "shift")

    def __init__(self) -> None:
        self.shift = 0
        self.misses = 0
        self.lo = self.hi = 0

    def compared(self, base: Base, lo: int, hi: int) -> None:
        """Note that base bytes ``[lo, hi)`` were compared; past `_RELEASE` contiguous
        bytes (or at a jump), let the pages of those before go (RSS stays bounded; one
        madvise per 64 MiB, not per WRITE)."""
        if lo != self.hi or self.hi - self.lo >= _RELEASE:
            if self.hi > self.lo:
                release_compared(base, self.lo, self.hi - self.lo)
            self.lo = lo
        self.hi = hi


class Stagings:
    """Stage and journal the operations of each writer of data.csv."""

    def __init__(self, state: TableState, reads: Reads) -> None:
        self._s = state
        self._reads = reads
        self._shifts: weakref.WeakKeyDictionary[Staging, _Shift] = weakref.WeakKeyDictionary()

    def new_staging(self, base: Base, version: int) -> Staging:
        """A staging over ``base``; past SPILL_AT its written bytes go to the state dir."""
        spill = self._s.state_dir / "staging"
        spill.mkdir(mode=0o700, exist_ok=True)
        return Staging(
            base,
            base_version=version,
            touched=self._s.clock(),
            mtime=self._s.wallclock(),
            spill_dir=str(spill),
        )

    def stage(
        self,
        w: Writer,
        *,
        write: tuple[int, bytes] | None = None,
        size: int = 0,
        journal: bool = True,
    ) -> None:
        """Journal one operation of ``w``, then apply it to its staging.

        The journal first: a write it could not record is not staged either (the WRITE
        fails, and neither a crash nor its absence shows the bytes). A staging that then
        fails (its spill file) is dropped with its journal, and the write verifier
        changes, so the client resends what it had not committed. Without ``journal``
        (the first WRITE of a staging that may apply in the same call, see
        `WriteRules.write`) nothing is recorded: the caller records it with
        :meth:`record_late` before any reply if it does not apply.

        Raises:
            NfsError: NOSPC or IO.
        """
        pieces = self.pieces(w, *write) if journal and write is not None else None
        crc: int | None = None
        sources: list[Source | None] = []
        if pieces is not None and write is not None:
            sources, crc = self.record_pieces(w, write[0], write[1], pieces)
            source = None
        else:
            source = self.record(w, write=write, size=size) if journal else None
        w.checked = -1
        try:
            if write is not None and pieces is not None:
                self._stage_pieces(w.staging, write, pieces, sources)
                w.note_write(*write, crc=crc)
            elif write is not None:
                w.staging.write(
                    *write, touched=self._s.clock(), mtime=self._s.wallclock(), source=source
                )
                w.note_write(*write)
            else:
                w.staging.truncate(size, touched=self._s.clock(), mtime=self._s.wallclock())
                w.note_truncate(size)
        except OSError as err:
            logger.error("data.csv: the staging of %s failed and was dropped: %s", w.key, err)
            self._s.drop(w)
            self._s.verifier = secrets.token_bytes(8)
            raise storage_error(err) from err

    def started_ns(self) -> int:
        """A staging's start: the wall clock in ns, above every earlier start (journals)."""
        self._s.last_start = max(self._s.last_start + 1, int(self._s.wallclock() * 1e9))
        return self._s.last_start

    def journal(self, w: Writer) -> JournalFile:
        if w.journal is None:
            header = JournalHeader(
                write_id=w.write_id,
                table_id=self._s.table_id,
                base_version=w.staging.base_version,
                # a staging over the client's own page cannot be recovered (-1: set aside)
                base_size=-1 if isinstance(w.staging.base, Staging) else w.staging.base.size,
                peer=w.key.peer,
                uid=w.key.uid,
                gid=w.key.gid,
                started=self.started_ns(),
                part=w.key.part,
            )
            try:
                w.journal = self._s.journals.create(
                    header, base=self.kept_base(w.staging), page=self.kept_page(w.staging)
                )
            except OSError as err:
                raise journal_error(err) from err
        return w.journal

    def kept_base(self, st: Staging) -> KeptBase | None:
        """The base bytes a journal must keep (recovery must not need the shadows or the
        pages, caches): a shadow's (no rendering shows them again), or, for a staging
        based on a client's page, the shadow under that page; else None."""
        base: Base = st.base
        version = st.base_version
        if isinstance(base, Staging):  # a page: what lies under it
            version, base = base.base_version, base.base
        if not isinstance(base, BytesBase):  # a rendering: rendered again at recovery
            return None
        shown = base
        if isinstance(base, OwnContent):  # not a version's shadow: its own bytes
            return KeptBase(shown.size, lambda: None, lambda: (read_all(shown),))
        try:
            stamp: int | None = self._reads.stamp_of(version)
        except NfsError:
            stamp = None

        def file() -> Path | None:
            return None if stamp is None else self._s.shadows.file(version, stamp)

        return KeptBase(shown.size, file, lambda: (read_all(shown),))

    @staticmethod
    def kept_page(st: Staging) -> KeptPage | None:
        """The client's page a staging is based on, for its journal to keep; else None."""
        page = st.base
        if not isinstance(page, Staging):
            return None
        low, data = page.overlay()
        return KeptPage(page.base_version, page.base.size, low, data)

    def record(
        self, w: Writer, *, write: tuple[int, bytes] | None = None, size: int = 0
    ) -> Source | None:
        """Append the operation to ``w``'s journal (buffered); return where a write's bytes
        lie in it (its staging reads them there once spilled: not written twice)."""
        journal = self.journal(w)
        try:
            if write is not None:
                return journal.write(*write)
            journal.truncate(size)
            return None
        except OSError as err:
            raise journal_error(err) from err

    def pieces(
        self, w: Writer, offset: int, data: bytes | memoryview
    ) -> list[tuple[int, int, int]] | None:
        """The pieces of a write that equal its staging's base bytes (journaled as ``B``
        records: a rewrite equal to its base but for a row journals that row), or None
        when none does or the base is a client's page (`region.matching_pieces`)."""
        st = w.staging
        if len(data) < PIECE_MIN or isinstance(st.base, Staging) or st.base.size == 0:
            return None
        hint = self._shifts.get(st)
        if hint is None:
            hint = self._shifts[st] = _Shift()
        if hint.misses >= _GIVE_UP and hint.misses % 16:
            hint.misses += 1
            return None
        pieces, hint.shift = matching_pieces(st.base, offset, data, hint.shift)
        if all(base_at < 0 for _lo, _hi, base_at in pieces):
            hint.misses += 1
            return None
        hint.misses = 0
        for lo, hi, base_at in pieces:
            if base_at >= 0:
                hint.compared(st.base, base_at, base_at + hi - lo)
        return pieces

    def record_pieces(
        self,
        w: Writer,
        offset: int,
        data: bytes | memoryview,
        pieces: list[tuple[int, int, int]],
    ) -> tuple[list[Source | None], int | None]:
        """Append a write in pieces to ``w``'s journal (see `JournalFile.write_pieces`);
        return where its ``W`` pieces lie, and the CRC of its bytes continuing the edit's
        digest (`EditDigest.write`: one pass sums the records and the digest), None when
        the digest is not kept running."""
        journal = self.journal(w)
        seed = w.digest.seed(offset)
        try:
            sources, crc = journal.write_pieces(offset, data, pieces, seed=seed or 0)
        except OSError as err:
            raise journal_error(err) from err
        return sources, None if seed is None else crc

    def _stage_pieces(
        self,
        st: Staging,
        write: tuple[int, bytes],
        pieces: list[tuple[int, int, int]],
        sources: list[Source | None],
    ) -> None:
        """Stage a write journaled in pieces: base bytes as references to the base."""
        offset, data = write
        view = memoryview(data).cast("B")
        touched, mtime = self._s.clock(), self._s.wallclock()
        for (lo, hi, base_at), source in zip(pieces, sources, strict=True):
            if base_at >= 0:
                st.write_base(
                    offset + lo, base_at, hi - lo, data=view[lo:hi], touched=touched, mtime=mtime
                )
            else:
                st.write(offset + lo, view[lo:hi], touched=touched, mtime=mtime, source=source)

    def record_late(self, w: Writer, write: tuple[int, bytes]) -> None:
        """Journal the one write a new staging was staged with unjournaled (it did not apply
        in its call); if it cannot be recorded, the staging is dropped: as if the write had
        never been staged (see :meth:`stage`).

        Raises:
            NfsError: NOSPC or IO.
        """
        try:
            self.record(w, write=write)
        except NfsError:
            self._s.drop(w)
            raise

    def make_durable(self, w: Writer) -> None:
        """fsync ``w``'s journal: from now on a reply may promise its bytes.

        A failed fsync drops the staging with its journal and changes the write verifier:
        the kernel may have let the journal's unwritten pages go, so a later fsync that
        succeeds would promise bytes the file lacks. The reply is the error; the client
        resends what it had not committed.
        """
        try:
            self.journal(w).sync()
        except OSError as err:
            self._s.drop(w)
            self._s.verifier = secrets.token_bytes(8)
            raise journal_error(err) from err

    def flush(self) -> None:
        """Make every staged write durable (fsync the journals); nothing is applied."""
        with self._s.lock:
            for w in self._s.writers.values():
                if w.journal is not None:
                    try:
                        w.journal.sync()
                    except OSError:
                        logger.exception("data.csv: journal of %s not synced", w.key)
