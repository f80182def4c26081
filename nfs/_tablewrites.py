"""The write rules of :class:`~nfs.tableview.TableFs` for ``data.csv``: staging per writer,
the journal, when a staging applies, and recovery (the rules: docs/nfs-writes.md and
:mod:`nfs.tableview`; the diff and the commit: :mod:`nfs._apply`). See docs/design.md.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from nfs._apply import (
    Applied,
    apply_content,
    apply_lines,
    committed_write,
    header_of,
)
from nfs._journal import JournalFile, JournalHeader, JournalOp, KeptBase, KeptPage, Recovered
from nfs._staging import Base, BytesBase, Staging, read_all
from nfs._tablestate import (
    _DATA_PROCS,
    _NFS_PROGRAM,
    _PAGE_BYTES,
    _STALE_SEARCH,
    TableState,
    _err,
    _fits,
    _journal_error,
    _storage_error,
    nfs_error,
)
from nfs._writers import Writer, WriterKey
from nfs.nfs3 import (
    Nfsstat3,
)
from nfs.rpc import CallContext
from nfs.vfs import (
    NfsError,
)
from posixlake.errors import (
    PosixLakeError,
)

__all__ = ["WriteRules"]

logger = logging.getLogger("nfs.tableview")


class WriteRules(TableState):
    """Staging, journaling, applying and recovering writes to ``data.csv``."""

    # ------------------------------------------------------------ staging and applying

    def write_verifier(self) -> bytes:
        """Return the WRITE/COMMIT verifier: new per boot, and whenever staged data is lost."""
        return self._verifier

    def _writable(self) -> None:
        if self._read_only:
            raise _err(Nfsstat3.NFS3ERR_ROFS, "the user may not write this table")

    def _base_for(self, peer: str, first: tuple[int, bytes] | None) -> tuple[int, Base]:
        """Return the version (and its bytes) a new staging of ``peer`` is based on.

        The base is what that client was shown last (a GETATTR, LOOKUP or READ of
        data.csv), else the current version. When the first write ``(offset, data)``
        reads better as made from another recent version — an append at its end, or a
        page-widened append that resends its last page(s) and adds more — that version is
        the base, so
        a client with a stale page appends to what it saw and deleted rows stay deleted.
        Only a staging that starts with a WRITE is matched so: one that starts with a
        truncation is a new file, diffed against what the client was shown.
        """
        current = self._version()
        shown = self._shown.get(peer)
        order = [current] if shown is None or shown == current else [shown, current]
        candidates = [(v, self._presented_or_none(v)) for v in order]
        if first is not None:
            # The versions the write may extend: what the client was shown, the current
            # one and those at hand; and the last few too when the client's view is
            # unknown (the server restarted) or the write does not start at the current
            # version's end: several processes may share one client, or its page may be
            # its own later write, a version no longer at hand that an older fit only
            # prefixes. When several fit (an emptied table's header prefixes every
            # version; a deletion of the last rows leaves a prefix), the longest is what
            # the client resent: the fewest bytes are new. A stale page-widened write
            # covers a page, so each look reads about a page of a version.
            fits: list[tuple[int, int, Base]] = []
            tried: set[int] = set()

            def look(v: int, content: Base | None) -> None:
                # a version without rows (the table created empty, or emptied) prefixes
                # every write: it is the base only as what the client was shown (or when
                # that is not known: a restart), else a page of rows the server cannot
                # otherwise place (its own rewrite, whose bytes are kept no longer) would
                # read as all new rows
                if (
                    v not in tried
                    and content is not None
                    and _fits(content, *first)
                    and (shown in (None, v) or len(header_of(content)) < content.size)
                ):
                    fits.append((content.size, v, content))
                tried.add(v)

            for v, content in [*candidates, *self._seen_versions()]:
                look(v, content)
            page = self._pages.get(peer, self._presented_or_none)
            if page is not None and _fits(page[1], *first):  # its page after its append
                fits.append((page[1].size, page[0], page[1]))  # (a version of the same
                # bytes comes first: max keeps it, and a rewrite from it can be a shadow)
            at_end = any(v == current and size == first[0] for size, v, _ in fits)
            if shown is None or not at_end:
                for v in range(current - 1, max(-1, current - _STALE_SEARCH - 1), -1):
                    if v not in tried:
                        look(v, self._presented_or_none(v))
            if fits:
                _size, v, content = max(fits, key=lambda f: (f[0], f[1]))
                return v, content
        for v, content in candidates:
            if content is not None:
                return v, content
        return current, self._presented(current)

    def _presented_or_none(self, version: int) -> Base | None:
        try:
            return self._presented(version)
        except NfsError:
            return None

    def _writer(self, ctx: CallContext, first: tuple[int, bytes] | None = None) -> Writer:
        """Return the caller's writer, starting one (see :meth:`_base_for`) if it has none."""
        key = WriterKey.of(ctx)
        w = self._writers.get(key)
        if w is None:
            version, base = self._base_for(key.peer, first)
            w = self._writers[key] = Writer(key, self._new_staging(base, version))
        return w

    def _new_staging(self, base: Base, version: int) -> Staging:
        """A staging over ``base``; past SPILL_AT its written bytes go to the state dir."""
        spill = self._state_dir / "staging"
        spill.mkdir(mode=0o700, exist_ok=True)
        return Staging(
            base,
            base_version=version,
            touched=self._clock(),
            mtime=self._wallclock(),
            spill_dir=str(spill),
        )

    def _truncate(self, size: int, ctx: CallContext) -> None:
        """Stage a truncation for the caller, durably (SETATTR replies are synchronous)."""
        w = self._writer(ctx)
        w.settled = False
        self._stage(w, size=size)
        self._make_durable(w)

    def _stage(self, w: Writer, *, write: tuple[int, bytes] | None = None, size: int = 0) -> None:
        """Journal one operation of ``w``, then apply it to its staging.

        The journal first: a write it could not record is not staged either (the WRITE
        fails, and neither a crash nor its absence shows the bytes). A staging that then
        fails (its spill file) is dropped with its journal, and the write verifier
        changes, so the client resends what it had not committed.

        Raises:
            NfsError: NOSPC or IO.
        """
        self._record(w, write=write, size=size)
        try:
            if write is not None:
                w.staging.write(*write, touched=self._clock(), mtime=self._wallclock())
            else:
                w.staging.truncate(size, touched=self._clock(), mtime=self._wallclock())
        except OSError as err:
            logger.error("data.csv: the staging of %s failed and was dropped: %s", w.key, err)
            self._drop(w)
            self._verifier = secrets.token_bytes(8)
            raise _storage_error(err) from err

    def _started_ns(self) -> int:
        """A staging's start: the wall clock in ns, above every earlier start (journals)."""
        self._last_start = max(self._last_start + 1, int(self._wallclock() * 1e9))
        return self._last_start

    def _journal(self, w: Writer) -> JournalFile:
        if w.journal is None:
            header = JournalHeader(
                write_id=w.write_id,
                table_id=self._table_id,
                base_version=w.staging.base_version,
                # a staging over the client's own page cannot be recovered (-1: set aside)
                base_size=-1 if isinstance(w.staging.base, Staging) else w.staging.base.size,
                peer=w.key.peer,
                uid=w.key.uid,
                gid=w.key.gid,
                started=self._started_ns(),
            )
            try:
                w.journal = self._journals.create(
                    header, base=self._kept_base(w.staging), page=self._kept_page(w.staging)
                )
            except OSError as err:
                raise _journal_error(err) from err
        return w.journal

    def _kept_base(self, st: Staging) -> KeptBase | None:
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
        try:
            stamp: int | None = self._stamp_of(version)
        except NfsError:
            stamp = None

        def file() -> Path | None:
            return None if stamp is None else self._shadows.file(version, stamp)

        return KeptBase(shown.size, file, lambda: (read_all(shown),))

    @staticmethod
    def _kept_page(st: Staging) -> KeptPage | None:
        """The client's page a staging is based on, for its journal to keep; else None."""
        page = st.base
        if not isinstance(page, Staging):
            return None
        low, data = page.overlay()
        return KeptPage(page.base_version, page.base.size, low, data)

    def _recovered_base(self, rec: Recovered) -> Base | None:
        """The base a recovered journal's staging goes on (None: it cannot be shown as it
        was): the page or shadow bytes the journal kept, else the rendering of its base
        version (of its size, unless the staging began with a truncation: then only its
        rows count)."""
        head = rec.header
        kept, page = rec.kept_base(), rec.kept_page()
        if page is not None:  # a client's page: its version's bytes, the client's over them
            under = BytesBase(kept) if kept is not None else self._presented_or_none(page.version)
            if under is None or under.size != page.size:
                return None
            st = Staging(under, base_version=page.version, touched=0.0, mtime=0.0)
            st.write(page.low, page.data, touched=0.0, mtime=0.0)
            return st
        base = BytesBase(kept) if kept is not None else self._presented_or_none(head.base_version)
        independent = bool(rec.ops) and rec.ops[0] == JournalOp("T", 0)
        if base is None or (base.size != head.base_size and not independent):
            return None
        return base

    def _record(self, w: Writer, *, write: tuple[int, bytes] | None = None, size: int = 0) -> None:
        """Append the operation to ``w``'s journal (buffered)."""
        journal = self._journal(w)
        try:
            if write is not None:
                journal.write(*write)
            else:
                journal.truncate(size)
        except OSError as err:
            raise _journal_error(err) from err

    def _make_durable(self, w: Writer) -> None:
        """fsync ``w``'s journal: from now on a reply may promise its bytes.

        A failed fsync drops the staging with its journal and changes the write verifier:
        the kernel may have let the journal's unwritten pages go, so a later fsync that
        succeeds would promise bytes the file lacks. The reply is the error; the client
        resends what it had not committed.
        """
        try:
            self._journal(w).sync()
        except OSError as err:
            self._drop(w)
            self._verifier = secrets.token_bytes(8)
            raise _journal_error(err) from err

    def _raise_failure(self, key: WriterKey) -> None:
        """Raise (once) a failure found after this writer was told its write succeeded."""
        err = self._failures.pop(key)
        if err is not None:
            raise err

    def _drop(self, w: Writer) -> None:
        """Forget ``w``'s staging and delete its journal."""
        if self._writers.get(w.key) is w:
            del self._writers[w.key]
        if w.journal is not None:
            w.journal.discard()
            w.journal = None

    def _apply_writer(self, w: Writer) -> Applied:
        """Apply ``w``'s content as ONE commit; the staging is gone afterwards either way.

        Raises:
            NfsError: the write was refused (bad content: INVAL) or failed (IO).
        """
        st = w.staging
        try:
            start = st.appended_at() if st.on_line_boundary() else None
            if start is not None:  # the base plus whole lines: an INSERT, costs the lines
                at = start
                applied = self._commit(
                    lambda: apply_lines(
                        self._db,
                        st,
                        at,
                        header=header_of(st.base),
                        write_id=w.write_id,
                        keys=self._keys,
                    )
                )
                page = st.flattened()  # the client's page now
                if page.overlay_size <= _PAGE_BYTES:
                    produced = applied.version
                    version = self._version() if produced is None else produced
                    self._pages.put(w.key.peer, version, page)
                else:  # an older page of it must not be matched any more
                    self._pages.forget(w.key.peer)
                return applied
            if st.same_as_base():
                return Applied("unchanged", None)
            return self._apply(st, st.base_version, st.base, w.write_id)
        finally:
            self._drop(w)

    def _commit(self, fn: Callable[[], Applied]) -> Applied:
        """Run one apply; posixlake errors become NfsError (the one map: nfs_error)."""
        try:
            applied = fn()
        except PosixLakeError as err:
            logger.warning("data.csv: write refused: %s", err)
            raise nfs_error(err) from err
        except pa.ArrowException as err:  # a bug below us: fail this write, keep serving
            logger.exception("data.csv: write failed")
            raise _err(Nfsstat3.NFS3ERR_IO, str(err)) from err
        finally:
            self._checked_at = -float("inf")  # re-read the version on the next call
        logger.debug("data.csv: %s", applied)
        return applied

    def _apply(
        self,
        content: Base,
        base_version: int,
        base: Base,
        write_id: str | None = None,
    ) -> Applied:
        """Commit ``content`` as data.csv, diffed against ``base_version``. Raises NfsError."""
        try:
            before = self._db.version
        except PosixLakeError as err:
            raise nfs_error(err) from err
        applied = self._commit(
            lambda: apply_content(
                self._db,
                content,
                base_version=base_version,
                base=base,
                write_id=write_id,
                keys=self._keys,
            )
        )
        # Keep showing the writer's bytes while the table is exactly what it wrote (not
        # when its base was its own page after an append: no version was those bytes).
        exact = not isinstance(base, Staging)
        if applied.kind != "empty" and content.size and base_version == before and exact:
            produced = applied.version if applied.version is not None else before
            if applied.version is None or applied.version == before + 1:
                self._shadows.put(produced, self._stamp_of(produced), content)
        return applied

    @staticmethod
    def _is_append(st: Staging) -> bool:
        """Whether the staged content is its base plus whole new lines (an INSERT)."""
        return st.written and st.on_line_boundary() and st.appended_at() is not None

    def _idle_loop(self) -> None:
        while not self._stop.wait(max(0.05, min(self._idle, self._abandon) / 4)):
            self.poll()

    def poll(self) -> None:
        """Apply the stagings of writers that are done (idle), give up abandoned ones."""
        with self._lock:
            self._poll_locked()

    def _poll_locked(self, ctx: CallContext | None = None) -> None:
        """Apply idle and settled stagings; ``ctx``: the caller, whose settled rewrite is done
        once it sends anything but a WRITE or COMMIT (see :meth:`_settle`).
        """
        if ctx is not None:
            self._settle(ctx)
        now = self._clock()
        for w in list(self._writers.values()):
            idle = now - w.staging.touched
            if idle >= self._abandon:
                self._abandon_writer(w)
            elif idle >= self._idle and w.staging.written and w.staging.on_line_boundary():
                try:
                    self._apply_writer(w)
                except NfsError as err:
                    logger.warning("data.csv: idle write of %s refused: %s", w.key, err)
                    self._failures.set(w.key, err)

    def _settle(self, ctx: CallContext) -> None:
        """Apply the caller's settled rewrite: one its FILE_SYNC WRITE left complete.

        A client that writes a small file and closes it sends one FILE_SYNC WRITE and no
        COMMIT (the Linux client does when the content fits one WRITE); a ``-o sync``
        mount sends one per write(2). Such a rewrite is applied when its writer goes on to
        anything else (``cp x data.csv && cat data.csv``: the next open's GETATTR), or
        when it is idle. Calls made inside that writer's own WRITE or COMMIT (their
        attributes) do not count.
        """
        if ctx.prog == _NFS_PROGRAM and ctx.proc in _DATA_PROCS:
            return
        w = self._writers.get(WriterKey.of(ctx))
        if w is None or not w.settled:
            return
        try:
            self._apply_writer(w)
        except NfsError as err:
            logger.warning("data.csv: the rewrite of %s was refused: %s", w.key, err)
            self._failures.set(w.key, err)

    def _abandon_writer(self, w: Writer) -> None:
        what = "ends mid-line" if w.staging.written else "is a truncation alone"
        message = (
            f"data.csv: the staged write of {w.key} was abandoned after "
            f"{self._abandon:g} s without a write; its content {what} and was never applied"
        )
        logger.error("%s", message)
        self._drop(w)
        self._failures.set(w.key, _err(Nfsstat3.NFS3ERR_IO, message))
        # a client holding UNSTABLE writes of it must resend them at its next COMMIT
        self._verifier = secrets.token_bytes(8)

    def flush(self) -> None:
        """Make every staged write durable (fsync the journals); nothing is applied."""
        with self._lock:
            for w in self._writers.values():
                if w.journal is not None:
                    try:
                        w.journal.sync()
                    except OSError:
                        logger.exception("data.csv: journal of %s not synced", w.key)

    def close(self) -> None:
        """Stop the idle timer and close the journals (NfsServer calls this at shutdown).

        Staged writes are not applied: a writer that has not finished keeps its journal,
        which the next TableFs for the table recovers.
        """
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(5)
        self._segmenter.close()
        self._shadows.flush()
        with self._lock:
            for w in self._writers.values():
                if w.journal is not None:
                    try:
                        w.journal.close()
                    except OSError:
                        logger.exception("data.csv: journal of %s not closed", w.key)
            self._journals.release()
            self.unfinished_at_close = len(self._writers)
            if self._writers:
                logger.info(
                    "data.csv: %d unfinished staged write(s) kept for the next start",
                    len(self._writers),
                )
            self._writers.clear()
            self._scratch.close()

    def _recover(self) -> None:
        """Take over the journals an earlier server left (see :mod:`nfs._journal`)."""
        for rec in self._journals.recover(self._table_id):
            head = rec.header
            key = WriterKey(head.peer, head.uid, head.gid)
            try:
                done = committed_write(self._db, head.write_id, head.base_version)
            except PosixLakeError as err:
                raise nfs_error(err) from err
            if done is not None:
                logger.info("data.csv: staged write of %s was committed as v%d", key, done)
                rec.path.unlink(missing_ok=True)
                continue
            # a staging that starts with a truncation does not depend on its base's bytes
            # (a shadow lost at the restart may differ from the rendering), only on its
            # rows, which a 3-way apply needs
            base = self._recovered_base(rec)
            if base is None:
                why = f"its base version {head.base_version} cannot be shown as it was"
                self._journals.set_aside(rec, why)
                self._failures.set(key, _err(Nfsstat3.NFS3ERR_IO, f"staged write lost: {why}"))
                continue
            if key in self._writers:
                self._journals.set_aside(rec, "a newer staging of the same writer exists")
                continue
            st = self._new_staging(base, head.base_version)
            for op in rec.ops:
                if op.kind == "W":
                    st.write(op.number, op.data, touched=st.touched, mtime=st.mtime)
                else:
                    st.truncate(op.number, touched=st.touched, mtime=st.mtime)
            self._last_start = max(self._last_start, head.started)
            journal = self._journals.reopen(rec)
            self._writers[key] = Writer(key, st, head.write_id, journal)
            logger.warning(
                "data.csv: recovered the staged write of %s (%d bytes, base v%d)",
                key,
                st.size,
                head.base_version,
            )
