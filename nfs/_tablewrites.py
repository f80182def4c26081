"""The write rules of :class:`~nfs.tableview.TableFs` for ``data.csv``: staging per writer,
the journal, when a staging applies, and recovery (the rules: docs/nfs-writes.md and
:mod:`nfs.tableview`; the diff and the commit: :mod:`nfs._apply`). See docs/design.md.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pyarrow as pa

from nfs._apply import (
    Applied,
    apply_content,
    apply_lines,
    arrow_schema,
    committed_write,
    header_of,
)
from nfs._journal import JournalFile, JournalHeader, JournalOp, KeptBase, KeptPage, Recovered
from nfs._staging import Base, BytesBase, Staging, read_all
from nfs._tablestate import (
    _PAGE_BYTES,
    _STALE_SEARCH,
    DATA_CSV_ID,
    TableState,
    _err,
    _fits,
    _journal_error,
    _storage_error,
    nfs_error,
)
from nfs._writers import Torn, Writer, WriterKey
from nfs.nfs3 import (
    Nfsstat3,
)
from nfs.rpc import CallContext
from nfs.vfs import (
    BOUNDED_PEER_PREFIX,
    FileId,
    NfsError,
)
from posixlake.csvcodec import CsvFormatError, parse_csv
from posixlake.errors import (
    PosixLakeError,
)
from posixlake.storage.local import fsync_dir

__all__ = ["EDIT_TAG", "WriteRules"]

logger = logging.getLogger("nfs.tableview")

EDIT_TAG: Final = "posixlake.nfs_edit"
"""Commit metadata naming an applied edit by its writer, boot, written range and checksum."""
_RESEND_SEARCH: Final = 1000
"""How many recent commits are searched for the edit a client resends after a restart."""
_UNCHANGED: Final = "edits-unchanged.jsonl"
"""Edits that applied without a commit (the last _RESEND_SEARCH), in the state dir."""
CHECK_BYTES: Final = 1 << 20
"""Lines up to this many bytes are checked at each WRITE and COMMIT (see `_check_lines`)."""
_LF: Final = 0x0A


class _OwnContent(BytesBase):
    """A client's own last edit, as it wrote it (the base of its next edit): not the bytes
    of any version, so a journal keeps them itself, never a shadow's file."""


class _Terminated:
    """A staging whose last line lacks its line feed, with it (the line is a record)."""

    def __init__(self, staging: Staging) -> None:
        self._st = staging

    @property
    def size(self) -> int:
        return self._st.size + 1

    def read(self, offset: int, count: int) -> tuple[memoryview | bytes, bool]:
        size = self._st.size
        end = min(offset + count, size + 1)
        if offset >= end:
            return b"", True
        if end <= size:
            data, _ = self._st.read(offset, end - offset)
            return data, False
        head = bytes(self._st.read(offset, size - offset)[0]) if offset < size else b""
        return head + b"\n", True


class WriteRules(TableState):
    """Staging, journaling, applying and recovering writes to ``data.csv``."""

    # ------------------------------------------------------------ staging and applying

    def write_verifier(self) -> bytes:
        """Return the WRITE/COMMIT verifier: new per boot, and whenever staged data is lost."""
        return self._verifier

    def _writable(self) -> None:
        if self._read_only:
            raise _err(Nfsstat3.NFS3ERR_ROFS, "the user may not write this table")

    def _base_for(
        self, peer: str, first: tuple[int, bytes] | None
    ) -> tuple[int, Base, tuple[int, ...]]:
        """Return the version (and its bytes) a new staging of ``peer`` is based on, and
        the versions of its READs when they were several (a torn base: refused).

        The base is the version whose bytes that client's READs of data.csv returned
        (never what a GETATTR, LOOKUP or ACCESS showed: see
        :class:`~nfs._writers.ReadViews`), else the current version. When the first
        write ``(offset, data)``
        reads better as made from another recent version — an append at its end, or a
        page-widened append that resends its last page(s) and adds more — that version is
        the base, so
        a client with a stale page appends to what it saw and deleted rows stay deleted.
        Only a staging that starts with a WRITE is matched so: one that starts with a
        truncation is a new file, diffed against what the client was shown.
        """
        current = self._version()
        view = self._views.base(peer)
        torn = view.versions if isinstance(view, Torn) else ()
        shown = view.versions[-1] if isinstance(view, Torn) else view
        order = [current] if shown is None or shown == current else [shown, current]
        candidates: list[tuple[int, Base | None]] = [(v, self._presented_or_none(v)) for v in order]
        own = self._own.get(peer)  # its own last edit: its bytes (not always a version's)
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
                # every write: it is the base only as what the client read (or when that
                # is not known: a restart), or for a write at its very end (the size a
                # GETATTR gave an O_APPEND), else a page of rows the server cannot
                # otherwise place (its own rewrite, whose bytes are kept no longer) would
                # read as all new rows
                if (
                    v not in tried
                    and content is not None
                    and _fits(content, *first)
                    and (
                        shown in (None, v)
                        or first[0] == content.size  # at its very end: an O_APPEND write
                        or len(header_of(content)) < content.size
                    )
                ):
                    fits.append((content.size, v, content))
                tried.add(v)

            for v, content in [*candidates, *self._seen_versions()]:
                look(v, content)
            if own is not None and _fits(own[1], *first):
                fits.append((own[1].size, own[0], own[1]))
            page = self._pages.get(peer, self._presented_or_none)
            if page is not None and _fits(page[1], *first):  # its page after its append
                fits.append((page[1].size, page[0], page[1]))  # (a version of the same
                # bytes comes first: max keeps it, and a rewrite from it can be a shadow)
            at_end = any(v == current and size == first[0] for size, v, _ in fits)
            if shown is None or not at_end:
                for v in range(current - 1, max(-1, current - _STALE_SEARCH - 1), -1):
                    if v not in tried:
                        look(v, self._presented_or_none(v))
            if fits:  # an append: only its new lines are new, whatever the client read
                _size, v, content = max(fits, key=lambda f: (f[0], f[1]))
                return v, content, ()
        if own is not None:  # what it holds: newer than its READs (a READ forgets it)
            return own[0], own[1], ()
        for v, content in candidates:
            if content is not None:
                return v, content, torn
        return current, self._presented(current), torn

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
            version, base, torn = self._base_for(key.peer, first)
            if torn:
                raise _err(Nfsstat3.NFS3ERR_IO, _torn_message(torn))
            w = Writer(key, self._new_staging(base, version))
            w.resend_check = self._began.get(key) is None
            self._began.set(key, True)
            self._writers[key] = w
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
        w.flushed = False
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
        w.checked = -1
        try:
            if write is not None:
                w.staging.write(*write, touched=self._clock(), mtime=self._wallclock())
                w.note_write(*write)
            else:
                w.staging.truncate(size, touched=self._clock(), mtime=self._wallclock())
                w.note_truncate(size)
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
        if isinstance(base, _OwnContent):  # not a version's shadow: its own bytes
            return KeptBase(shown.size, lambda: None, lambda: (read_all(shown),))
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

        Content that ends mid-line (the writer flushed it so) has its last line taken as
        a record. A resend of an edit an earlier boot of the server committed (see
        :meth:`_resent`) changes nothing.

        Raises:
            NfsError: the write was refused (bad content: INVAL) or failed (IO).
        """
        st = w.staging
        try:
            earlier = self._resent(w)
            if earlier is not None:
                logger.info(
                    "data.csv: %s resent the edit committed as v%d; nothing applied again",
                    w.key,
                    earlier,
                )
                return Applied("unchanged", None)
            content: Base = st if st.on_line_boundary() else _Terminated(st)
            tags = self._edit_tags(w)
            start = st.appended_at()
            if start is not None:  # the base plus whole lines: an INSERT, costs the lines
                at = start
                with self._db.commit_tags(tags):
                    applied = self._commit(
                        lambda: apply_lines(
                            self._db,
                            content,
                            at,
                            header=header_of(st.base),
                            write_id=w.write_id,
                            keys=self._keys,
                        )
                    )
                page = st.flattened()  # the client's page now (its cache serves reads)
                produced = applied.version
                version = self._version() if produced is None else produced
                self._views.wrote(w.key.peer, version)
                if page.overlay_size <= _PAGE_BYTES:
                    self._pages.put(w.key.peer, version, page)
                    self._own.set(w.key.peer, (version, page))
                else:  # an older page of it must not be matched any more
                    self._pages.forget(w.key.peer)
                    self._own.pop(w.key.peer)
            else:
                if st.same_as_base():
                    applied = Applied("unchanged", None)
                else:
                    with self._db.commit_tags(tags):
                        applied = self._apply(content, st.base_version, st.base, w.write_id)
                self._holds(w.key.peer, applied, content)
            if applied.version is None and tags:
                self._note_unchanged(tags[EDIT_TAG])
            return applied
        finally:
            self._drop(w)

    def _note_unchanged(self, edit: str) -> None:
        """Keep (durably) an edit that applied without a commit: no commit tag names it,
        yet its writer may resend it after a restart (see `_resent`)."""
        path = self._state_dir / _UNCHANGED
        try:
            lines = path.read_bytes().splitlines()[-_RESEND_SEARCH:] if path.exists() else []
            lines.append(json.dumps({"edit": edit, "version": self._version()}).encode())
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                f.write(b"\n".join(lines) + b"\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except OSError:
            logger.warning("data.csv: could not keep an unchanged edit's record", exc_info=True)

    def _holds(self, peer: str, applied: Applied, content: Base) -> None:
        """``peer``'s rewrite applied: what it holds now is its own content (the base of
        its next edit, until it reads data.csv again)."""
        produced = applied.version if applied.version is not None else self._version()
        self._views.wrote(peer, produced)
        if content.size <= _PAGE_BYTES:
            self._own.set(peer, (produced, _OwnContent(bytes(read_all(content)))))
        else:  # the version it made (its own bytes, unless merged with others' changes)
            self._own.pop(peer)

    def _edit_tags(self, w: Writer) -> dict[str, str]:
        """The commit metadata that names ``w``'s edit for a later boot (see `_resent`)."""
        digest = w.digest.of(w.staging)
        if digest is None:
            return {}
        lo, hi, crc = digest
        edit = {"boot": self._boot.hex(), "writer": str(w.key), "lo": lo, "hi": hi, "crc": crc}
        return {EDIT_TAG: json.dumps(edit, separators=(",", ":"))}

    def _earlier_edits(self) -> dict[str, list[tuple[int, int, int, int]]]:
        """The edits earlier boots of the server committed, per writer, newest first:
        ``(lo, hi, crc, version)`` (read from the last commits, once per boot)."""
        if self._edits_before is None:
            found: dict[str, list[tuple[int, int, int, int]]] = {}
            mine = self._boot.hex()
            try:
                history = self._db.history(_RESEND_SEARCH)
            except PosixLakeError as err:
                raise nfs_error(err) from err
            tagged: list[tuple[str, int]] = [
                (raw, info.version)
                for info in history
                if (raw := info.tags.get(EDIT_TAG)) is not None
            ]
            try:
                kept = (self._state_dir / _UNCHANGED).read_bytes().splitlines()
            except OSError:
                kept = []
            for line in reversed(kept):
                try:
                    rec = json.loads(line)
                    tagged.append((str(rec["edit"]), int(rec["version"])))
                except (ValueError, KeyError, TypeError):
                    continue
            for raw, version in tagged:
                try:
                    edit = json.loads(raw)
                    if edit["boot"] == mine:
                        continue
                    entry = (int(edit["lo"]), int(edit["hi"]), int(edit["crc"]), version)
                    found.setdefault(str(edit["writer"]), []).append(entry)
                except (ValueError, KeyError, TypeError):
                    continue
            self._edits_before = found
        return self._edits_before

    def _resent(self, w: Writer) -> int | None:
        """Return the version that already holds ``w``'s edit when ``w`` resends it.

        After a restart (a new write verifier) a client resends every WRITE it had not
        seen COMMITted, also when the crashed server had committed the edit and died
        before the reply. The writer's first staging of this boot is such a resend when
        an earlier boot committed an edit of the same writer with the same written range
        and bytes (commit metadata ``posixlake.nfs_edit``): it is not applied again.
        """
        if not w.resend_check:
            return None
        w.resend_check = False
        earlier = self._earlier_edits().get(str(w.key))
        if not earlier:
            return None
        digest = w.digest.of(w.staging)
        if digest is None:
            return None
        for lo, hi, crc, version in earlier:
            if (lo, hi, crc) == digest:
                return version
        return None

    def _check_lines(self, w: Writer) -> None:
        """Refuse a WRITE or COMMIT that completes lines bad on their own.

        Lines that show their error alone (a wrong column count, a value of the wrong
        type, a bad header line) are refused on the reply that completes them, so the
        writer's write() or close() fails (``cp`` and ``nfs-cp``, which ignores errors
        at close, exit non-zero); the staging is dropped and nothing is applied. Checked
        while the lines to parse (the whole content, or the lines appended to the base)
        came from WRITEs (no byte of the base that a WRITE may still cover, as in a
        resend), are at most CHECK_BYTES and have no hole; errors only the whole edit shows (a
        repeated key, a concurrent change), and those in larger content, reach the
        writer when the edit applies (its next call) and the log.

        Raises:
            NfsError: NFS3ERR_INVAL.
        """
        st = w.staging
        if st.size == w.checked or w.coverage.holes():
            return
        start = st.appended_at()
        if start is None and not w.coverage.all_written():
            return  # bytes of the base remain: WRITEs may still land there (a resend)
        lo = 0 if start is None else start
        if st.size - lo > CHECK_BYTES:
            return
        part = read_all(st, lo)
        end = _records_end(part.tobytes())  # a record still being written is not checked
        schema = arrow_schema(self._db)
        try:
            if start is not None:
                header = header_of(st.base)
                extra = part[:end]
                if header and bytes(extra[: len(header)]) == header:
                    extra = extra[len(header) :]
                parse_csv(extra, schema, header="none")
            elif end:
                parse_csv(part[:end], schema, header="require")
        except CsvFormatError as err:
            logger.warning("data.csv: the write of %s was refused: %s", w.key, err)
            self._drop(w)
            raise _err(Nfsstat3.NFS3ERR_INVAL, str(err)) from err
        w.checked = st.size

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

    def _poll_locked(self) -> None:
        """Apply the stagings of writers that are done: quiet for ``idle_seconds``.

        Over NFSv3 nothing else tells that an edit is done: the Linux client COMMITs
        during writeback while the program still writes, and a shell redirection
        outlives the processes that close their copies of it. Content that ends
        mid-line waits for the writer to flush it (a COMMIT or a FILE_SYNC WRITE: its
        last line is then a record); content with a hole (a WRITE still on its way)
        waits for the WRITE; a truncation alone waits for a COMMIT.
        """
        now = self._clock()
        for w in list(self._writers.values()):
            idle = now - w.staging.touched
            bounded = w.key.peer.startswith(BOUNDED_PEER_PREFIX)  # NFSv4: applied at CLOSE
            if idle >= self._abandon and (bounded or not self._complete(w)):
                self._abandon_writer(w)
            elif idle >= self._idle and self._complete(w) and not bounded:
                try:
                    self._apply_writer(w)
                except NfsError as err:
                    logger.warning("data.csv: the edit of %s was refused: %s", w.key, err)
                    self._failures.set(w.key, err)

    @staticmethod
    def _complete(w: Writer) -> bool:
        """Whether ``w``'s content may apply once its writer is done (see `_poll_locked`)."""
        st = w.staging
        if not (st.written or w.flushed) or w.coverage.holes():
            return False
        return st.on_line_boundary() or w.flushed

    def finish(self, fid: FileId, ctx: CallContext) -> Applied | None:
        """Apply the caller's staged edit of ``fid`` now: the caller says it is done.

        For in-process callers (``PathOps``) and protocols that tell when an edit ends
        (an NFSv4 CLOSE). Content with a hole, or that never was written nor flushed,
        is not applied (None). The error of the apply is raised.

        Raises:
            NfsError: the edit was refused (INVAL) or failed (IO).
        """
        if fid != DATA_CSV_ID:
            return None  # other files are applied as they are written
        with self._lock:
            key = WriterKey.of(ctx)
            self._raise_failure(key)
            w = self._writers.get(key)
            if w is None:
                return None
            if not w.staging.written and not w.flushed:
                return None
            if w.coverage.holes():
                return None
            return self._apply_writer(w)

    def discard(self, fid: FileId, ctx: CallContext) -> bool:
        """Drop the caller's staged edit of ``fid`` unapplied, with its journal (an NFSv4
        client whose lease expired); whether there was one. Logged at WARNING."""
        with self._lock:
            w = self._writers.get(WriterKey.of(ctx)) if fid == DATA_CSV_ID else None
            if w is None:
                return False
            logger.warning("data.csv: the edit of %s was dropped unapplied: %s", w.key, "expired")
            self._drop(w)
            return True

    def _abandon_writer(self, w: Writer) -> None:
        if w.coverage.holes():
            what = "has a range no WRITE filled"
        elif w.key.peer.startswith(BOUNDED_PEER_PREFIX):
            what = "was never closed"
        elif w.staging.written:
            what = "ends mid-line"
        else:
            what = "is a truncation alone"
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
            w = Writer(key, st, head.write_id)
            for op in rec.ops:
                if op.kind == "W":
                    st.write(op.number, op.data, touched=st.touched, mtime=st.mtime)
                    w.note_write(op.number, op.data)
                else:
                    st.truncate(op.number, touched=st.touched, mtime=st.mtime)
                    w.note_truncate(op.number)
            self._last_start = max(self._last_start, head.started)
            w.journal = self._journals.reopen(rec)
            self._began.set(key, True)  # its resent WRITEs go on this staging
            self._writers[key] = w
            logger.warning(
                "data.csv: recovered the staged write of %s (%d bytes, base v%d)",
                key,
                st.size,
                head.base_version,
            )


def _torn_message(versions: tuple[int, ...]) -> str:
    listed = ", ".join(f"v{v}" for v in versions)
    return (
        f"data.csv: this client's reads of it came from several versions ({listed}: it "
        "changed while being read), so an edit from them could revert others' changes; "
        "read it again, then write"
    )


def _records_end(data: bytes) -> int:
    """Return where the last whole record of CSV ``data`` ends (after its line feed):
    a line feed inside a quoted field does not end one. 0 if none ends."""
    end, quoted, pos = 0, False, 0
    while True:
        nl = data.find(b"\n", pos)
        if nl < 0:
            return end
        quoted ^= data.count(b'"', pos, nl) % 2 == 1
        if not quoted:
            end = nl + 1
        pos = nl + 1
