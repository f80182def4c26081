"""Recovery: the journals an earlier server for the table left, taken over at start.

Owns: for each journal, whether its edit was already committed (its write id in the
commit metadata), the base it goes on again (the bytes the journal kept, else the
rendering of its base version), setting aside what cannot be shown as it was (its writer
gets EIO), and restaging the rest for the same writer (see :mod:`nfs.table.journal`): the
journal is mapped, not read into memory, and a restaged staging reads its written bytes
from the journal's records, as before the restart. A journal whose ``B`` records (bytes
equal to the base's) do not match the base rebuilt, CRC for CRC, is set aside like one
whose base cannot be shown: it is never applied over other bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from isal import isal_zlib

from nfs.protocol.nfs3 import Nfsstat3
from nfs.table.apply import committed_write
from nfs.table.journal import JournalOp, Recovered
from nfs.table.reads import EditFace
from nfs.table.staging import Base, BytesBase, Staging, read_all
from nfs.table.stagings import Stagings
from nfs.table.state import TableState, nfs_error, status_error
from nfs.table.writers import Writer, WriterKey
from posixlake.errors import PosixLakeError

_CHECK: Final = 4 << 20

__all__ = ["Recovery"]

logger = logging.getLogger("nfs.table.tablefs")


class Recovery:
    """Take over the journals of an earlier server (at construction)."""

    def __init__(
        self, state: TableState, face: Callable[[str], EditFace], stagings: Stagings
    ) -> None:
        """``face``: the file a journal's ``part`` names (`WriteRules.face`)."""
        self._s = state
        self._face = face
        self._stagings = stagings

    def recover(self) -> None:
        """Take over the journals an earlier server left (see :mod:`nfs.table.journal`)."""
        for rec in self._s.journals.recover(self._s.table_id):
            head = rec.header
            key = WriterKey(head.peer, head.uid, head.gid, head.part)
            try:
                done = committed_write(self._s.db, head.write_id, head.base_version)
            except PosixLakeError as err:
                raise nfs_error(err) from err
            if done is not None:
                logger.info("data.csv: staged write of %s was committed as v%d", key, done)
                rec.path.unlink(missing_ok=True)
                continue
            # a staging that starts with a truncation does not depend on its base's bytes
            # (a shadow lost at the restart may differ from the rendering), only on its
            # rows, which a 3-way apply needs
            base = self.recovered_base(rec)
            if base is None or not _spans_hold(rec, base):
                why = f"its base version {head.base_version} cannot be shown as it was"
                self._s.journals.set_aside(rec, why)
                self._s.failures.set(
                    key, status_error(Nfsstat3.NFS3ERR_IO, f"staged write lost: {why}")
                )
                continue
            if key in self._s.writers:
                self._s.journals.set_aside(rec, "a newer staging of the same writer exists")
                continue
            st = self._stagings.new_staging(base, head.base_version)
            w = Writer(key, st, head.write_id)
            # its torn tail cut first; the staging reads its written bytes from the
            # journal's records (past SPILL_AT), as before the restart
            w.journal = self._s.journals.reopen(rec)
            fd = w.journal.fileno()
            for op in rec.ops:
                if op.kind == "B" and op.span is not None:
                    span = op.span
                    st.write_base(
                        op.number, span.offset, span.length, touched=st.touched, mtime=st.mtime
                    )
                    w.note_write(op.number, read_all(base, span.offset, span.offset + span.length))
                elif op.kind == "W":
                    source = (fd, op.at) if op.at >= 0 else None
                    st.write(op.number, op.data, touched=st.touched, mtime=st.mtime, source=source)
                    w.note_write(op.number, op.data)
                    rec.release(op)
                else:
                    st.truncate(op.number, touched=st.touched, mtime=st.mtime)
                    w.note_truncate(op.number)
            self._s.last_start = max(self._s.last_start, head.started)
            self._s.began.set(key, True)  # its resent WRITEs go on this staging
            self._s.writers[key] = w
            logger.warning(
                "data.csv: recovered the staged write of %s (%d bytes, base v%d)",
                key,
                st.size,
                head.base_version,
            )

    def recovered_base(self, rec: Recovered) -> Base | None:
        """The base a recovered journal's staging goes on (None: it cannot be shown as it
        was): the page or shadow bytes the journal kept, else the rendering of its base
        version (of its size, unless the staging began with a truncation: then only its
        rows count)."""
        head = rec.header
        face = self._face(head.part)  # data.csv, or the partition's file
        kept, page = rec.kept_base(), rec.kept_page()
        if page is not None:  # a client's page: its version's bytes, the client's over them
            under = BytesBase(kept) if kept is not None else face.presented_or_none(page.version)
            if under is None or under.size != page.size:
                return None
            st = Staging(under, base_version=page.version, touched=0.0, mtime=0.0)
            st.write(page.low, page.data, touched=0.0, mtime=0.0)
            return st
        base = BytesBase(kept) if kept is not None else face.presented_or_none(head.base_version)
        independent = bool(rec.ops) and rec.ops[0] == JournalOp("T", 0)
        if base is None or (base.size != head.base_size and not independent):
            return None
        return base


def _spans_hold(rec: Recovered, base: Base) -> bool:
    """Whether the base bytes each ``B`` record of ``rec`` names are there in ``base``,
    with the CRC the record holds (a base rendered again by other code, or other bytes
    kept, is not the one the writer's bytes were compared with: such a journal is set
    aside, never applied wrong)."""
    for op in rec.ops:
        if op.kind != "B" or op.span is None:
            continue
        span = op.span
        end = span.offset + span.length
        if end > base.size:
            return False
        crc = span.seed
        for pos in range(span.offset, end, _CHECK):
            crc = isal_zlib.crc32(read_all(base, pos, min(end, pos + _CHECK)), crc)
        if crc != span.crc:
            return False
    return True
