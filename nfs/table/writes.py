"""The write rules of data.csv (docs/nfs-writes.md states them; this module implements them).

Owns: WRITE and COMMIT of data.csv, the base of a new staging (what that client READ,
its own last edit, or the recent version a stale page-widened append extends), when a
staging applies (an append at a FILE_SYNC WRITE, a RENAME onto data.csv, a writer idle for
``idle_seconds``, ``finish``; never a prefix, never at shutdown), the line checks at
WRITE/COMMIT, the one apply (:mod:`nfs.table.apply`: INSERT or a 3-way change, one
commit), resends after a restart (commit tags), and failures reported to the writer's
next call. Staging and journals: :mod:`nfs.table.stagings`.

A partition's data.csv (:mod:`nfs.table.partfiles`) follows the same rules: its writer is
the client with the partition's path (`WriterKey.part`), its bytes and rows are its
`~nfs.table.partfiles.PartitionFace`'s, and every row it writes must be the partition's.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from collections.abc import Callable
from typing import Final

import pyarrow as pa

from nfs.protocol.nfs3 import Ftype3, Nfsstat3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import (
    ACCESS3_DELETE,
    ACCESS3_MODIFY,
    BOUNDED_PEER_PREFIX,
    FileId,
    NfsError,
)
from nfs.table.apply import (
    Applied,
    apply_content,
    apply_lines,
    arrow_schema,
    header_of,
    same_bytes,
)
from nfs.table.partfiles import PartitionFiles, part_file
from nfs.table.partitions import is_partition_file
from nfs.table.reads import EditFace, Reads
from nfs.table.region import same_records
from nfs.table.staging import Base, BytesBase, OwnContent, Staging, read_all
from nfs.table.stagings import Stagings
from nfs.table.state import (
    DATA_CSV_ID,
    DATA_DIR_ID,
    PAGE_BYTES,
    ROOT_ID,
    SCHEMA_ID,
    STALE_SEARCH,
    VERSIONS_ID,
    TableState,
    is_changes,
    nfs_error,
    status_error,
    version_of,
)
from nfs.table.writers import Torn, Writer, WriterKey
from posixlake.csvcodec import CsvFormatError, parse_csv
from posixlake.errors import InvalidOperation, PosixLakeError
from posixlake.storage import fsync_dir

__all__ = ["CHECK_BYTES", "EDIT_TAG", "WriteRules"]

logger = logging.getLogger("nfs.table.tablefs")


EDIT_TAG: Final = "posixlake.nfs_edit"
"""Commit metadata naming an applied edit by its writer, boot, written range and checksum."""
_RESEND_SEARCH: Final = 1000
"""How many recent commits are searched for the edit a client resends after a restart."""
_UNCHANGED: Final = "edits-unchanged.jsonl"
"""Edits that applied without a commit (the last _RESEND_SEARCH), in the state dir."""
CHECK_BYTES: Final = 1 << 20
"""Lines up to this many bytes are checked at each WRITE and COMMIT (see `WriteRules.check_lines`)."""
_LF: Final = 0x0A


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


class WriteRules:
    """When and how a writer's staged data.csv becomes one Delta commit."""

    def __init__(
        self, state: TableState, reads: Reads, stagings: Stagings, parts: PartitionFiles
    ) -> None:
        self._s = state
        self._reads = reads
        self._stagings = stagings
        self._parts = parts

    def face(self, part: str) -> EditFace:
        """The file ``part`` names: data.csv (""), else a partition's data.csv."""
        return self._reads if not part else self._parts.face(part)

    def target(self, fid: FileId) -> str | None:
        """The ``part`` of an editable file (data.csv: "", a partition's data.csv: its
        path; STALE if that partition is gone), else None."""
        if fid == DATA_CSV_ID:
            return ""
        if is_partition_file(fid):
            try:
                return self._parts.part_of(fid)
            except NfsError:  # gone from the version shown: a writer may still stage it
                for key in self._s.writers:
                    if key.part and part_file(key.part) == fid:
                        return key.part
                raise
        return None

    def write_verifier(self) -> bytes:
        """Return the WRITE/COMMIT verifier: new per boot, and whenever staged data is lost."""
        return self._s.verifier

    def writable(self) -> None:
        if self._s.read_only:
            raise status_error(Nfsstat3.NFS3ERR_ROFS, "the user may not write this table")

    def base_for(
        self, key: WriterKey, first: tuple[int, bytes] | None
    ) -> tuple[int, Base, tuple[int, ...]]:
        """Return the version (and its bytes) a new staging of ``peer`` is based on, and
        the versions of its READs when they were several (a torn base: refused).

        The base is the version whose bytes that client's READs of data.csv returned
        (never what a GETATTR, LOOKUP or ACCESS showed: see
        :class:`~nfs.table.writers.ReadViews`), else the current version. When the first
        write ``(offset, data)``
        reads better as made from another recent version — an append at its end, or a
        page-widened append that resends its last page(s) and adds more — that version is
        the base, so
        a client with a stale page appends to what it saw and deleted rows stay deleted.
        Only a staging that starts with a WRITE is matched so: one that starts with a
        truncation is a new file, diffed against what the client was shown. The bytes
        are those of the writer's file (`WriteRules.face`).
        """
        face = self.face(key.part)
        peer = key.slot
        current = face.version()
        view = self._s.views.base(peer)
        torn = view.versions if isinstance(view, Torn) else ()
        shown = view.versions[-1] if isinstance(view, Torn) else view
        order = [current] if shown is None or shown == current else [shown, current]
        candidates: list[tuple[int, Base | None]] = [(v, face.presented_or_none(v)) for v in order]
        own = self._s.own.get(peer)  # its own last edit: its bytes (not always a version's)
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

            for v, content in [*candidates, *face.seen_versions()]:
                look(v, content)
            if own is not None and _fits(own[1], *first):
                fits.append((own[1].size, own[0], own[1]))
            page = self._s.pages.get(peer, face.presented_or_none)
            if page is not None and _fits(page[1], *first):  # its page after its append
                fits.append((page[1].size, page[0], page[1]))  # (a version of the same
                # bytes comes first: max keeps it, and a rewrite from it can be a shadow)
            at_end = any(v == current and size == first[0] for size, v, _ in fits)
            if shown is None or not at_end:
                # the longest fit wins, the newest of equal ones: with the current version
                # fitting as its rendering, a version that appends alone led to from there
                # shows no more bytes (its rendering: one with a writer's bytes, a shadow,
                # was looked at above), so it cannot win and is not read (each costs a
                # load of the version: 16 of them took 50 ms of a kernel `echo >>`). A
                # writer's bytes may be shorter than the rendering: then all are read.
                newest = current - 1
                if any(v == current for _, v, _ in fits) and (
                    key.part or self._reads.shadow(current) is None
                ):
                    newest -= self._appends_before(current)
                for v in range(newest, max(-1, current - STALE_SEARCH - 1), -1):
                    if v not in tried:
                        look(v, face.presented_or_none(v))
            if fits:  # an append: only its new lines are new, whatever the client read
                _size, v, content = max(fits, key=lambda f: (f[0], f[1]))
                return v, content, ()
        if own is not None:  # what it holds: newer than its READs (a READ forgets it)
            return own[0], own[1], ()
        for v, content in candidates:
            if content is not None:
                return v, content, torn
        return current, face.presented(current), torn

    def _appends_before(self, current: int) -> int:
        """How many of the newest commits up to ``current`` are appends (delta-rs' WRITE
        in mode Append: add actions only), in a row, up to `STALE_SEARCH`: each version
        before one of them shows no more bytes than the one after it (the files it shows,
        and one more). 0 when the history cannot be read."""
        try:
            history = self._s.db.history(STALE_SEARCH)
        except PosixLakeError:
            return 0
        count = 0
        for info in history:  # newest first
            if info.version != current - count:
                break
            if info.operation != "WRITE" or info.parameters.get("mode") != "Append":
                break
            count += 1
        return count

    def writer(
        self, ctx: CallContext, first: tuple[int, bytes] | None = None, part: str = ""
    ) -> Writer:
        """Return the caller's writer of the file ``part``, starting one (see
        :meth:`WriteRules.base_for`) if it has none."""
        key = WriterKey.of(ctx, part)
        w = self._s.writers.get(key)
        if w is None:
            version, base, torn = self.base_for(key, first)
            if torn:
                raise status_error(Nfsstat3.NFS3ERR_IO, _torn_message(torn))
            w = Writer(key, self._stagings.new_staging(base, version))
            w.resend_check = self._s.began.get(key) is None
            self._s.began.set(key, True)
            self._s.writers[key] = w
        return w

    def truncate(self, size: int, ctx: CallContext, part: str = "") -> None:
        """Stage a truncation of the file ``part`` for the caller, durably (SETATTR
        replies are synchronous)."""
        w = self.writer(ctx, part=part)
        w.flushed = False
        self._stagings.stage(w, size=size)
        self._stagings.make_durable(w)

    def raise_failure(self, key: WriterKey) -> None:
        """Raise (once) a failure found after this writer was told its write succeeded."""
        err = self._s.failures.pop(key)
        if err is not None:
            raise err

    def apply_writer(self, w: Writer) -> Applied:
        """Apply ``w``'s content as ONE commit; the staging is gone afterwards either way.

        Content that ends mid-line (the writer flushed it so) has its last line taken as
        a record. A resend of an edit an earlier boot of the server committed (see
        :meth:`WriteRules.resent`) changes nothing.

        Raises:
            NfsError: the write was refused (bad content: INVAL) or failed (IO).
        """
        st = w.staging
        face = self.face(w.key.part)
        peer = w.key.slot
        try:
            earlier = self.resent(w)
            if earlier is not None:
                logger.info(
                    "data.csv: %s resent the edit committed as v%d; nothing applied again",
                    w.key,
                    earlier,
                )
                return Applied("unchanged", None)
            content: Base = st if st.on_line_boundary() else _Terminated(st)
            tags = self.edit_tags(w)
            start = st.appended_at()
            if start is not None:  # the base plus whole lines: an INSERT, costs the lines
                at = start
                scope = face.scope
                with self._s.db.commit_tags(tags):
                    applied = self.run_apply(
                        lambda: apply_lines(
                            self._s.db,
                            content,
                            at,
                            header=header_of(st.base),
                            write_id=w.write_id,
                            keys=self._s.keys,
                            scope=scope,
                        )
                    )
                page = st.flattened()  # the client's page now (its cache serves reads)
                produced = applied.version
                version = self._reads.version() if produced is None else produced
                self._s.views.wrote(peer, version)
                if page.overlay_size <= PAGE_BYTES:
                    self._s.pages.put(peer, version, page)
                    self._s.own.set(peer, (version, page))
                else:  # an older page of it must not be matched any more
                    self._s.pages.forget(peer)
                    self._s.own.pop(peer)
            else:
                if st.same_as_base():
                    applied = Applied("unchanged", None)
                else:
                    with self._s.db.commit_tags(tags):
                        applied = self.apply(content, st.base_version, st.base, w.write_id, face)
                self.holds(peer, applied, content)
            if applied.version is None and tags:
                self.note_unchanged(tags[EDIT_TAG])
            return applied
        finally:
            self._s.drop(w)

    def note_unchanged(self, edit: str) -> None:
        """Keep (durably) an edit that applied without a commit: no commit tag names it,
        yet its writer may resend it after a restart (see `WriteRules.resent`)."""
        path = self._s.state_dir / _UNCHANGED
        try:
            lines = path.read_bytes().splitlines()[-_RESEND_SEARCH:] if path.exists() else []
            lines.append(json.dumps({"edit": edit, "version": self._reads.version()}).encode())
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                f.write(b"\n".join(lines) + b"\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except OSError:
            logger.warning("data.csv: could not keep an unchanged edit's record", exc_info=True)

    def holds(self, peer: str, applied: Applied, content: Base) -> None:
        """``peer``'s rewrite applied (a `WriterKey.slot`): what it holds now is its own
        content (the base of its next edit, until it reads that file again)."""
        produced = applied.version if applied.version is not None else self._reads.version()
        self._s.views.wrote(peer, produced)
        if content.size <= PAGE_BYTES:
            self._s.own.set(peer, (produced, OwnContent(bytes(read_all(content)))))
        else:  # the version it made (its own bytes, unless merged with others' changes)
            self._s.own.pop(peer)

    def edit_tags(self, w: Writer) -> dict[str, str]:
        """The commit metadata that names ``w``'s edit for a later boot (see `WriteRules.resent`)."""
        digest = w.digest.of(w.staging)
        if digest is None:
            return {}
        lo, hi, crc = digest
        edit = {"boot": self._s.boot.hex(), "writer": str(w.key), "lo": lo, "hi": hi, "crc": crc}
        return {EDIT_TAG: json.dumps(edit, separators=(",", ":"))}

    def earlier_edits(self) -> dict[str, list[tuple[int, int, int, int]]]:
        """The edits earlier boots of the server committed, per writer, newest first:
        ``(lo, hi, crc, version)`` (read from the last commits, once per boot)."""
        if self._s.edits_before is None:
            found: dict[str, list[tuple[int, int, int, int]]] = {}
            mine = self._s.boot.hex()
            try:
                history = self._s.db.history(_RESEND_SEARCH)
            except PosixLakeError as err:
                raise nfs_error(err) from err
            tagged: list[tuple[str, int]] = [
                (raw, info.version)
                for info in history
                if (raw := info.tags.get(EDIT_TAG)) is not None
            ]
            try:
                kept = (self._s.state_dir / _UNCHANGED).read_bytes().splitlines()
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
            self._s.edits_before = found
        return self._s.edits_before

    def resent(self, w: Writer) -> int | None:
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
        earlier = self.earlier_edits().get(str(w.key))
        if not earlier:
            return None
        digest = w.digest.of(w.staging)
        if digest is None:
            return None
        for lo, hi, crc, version in earlier:
            if (lo, hi, crc) == digest:
                return version
        return None

    def check_lines(self, w: Writer) -> None:
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
        schema = arrow_schema(self._s.db)
        scope = self.face(w.key.part).scope
        try:
            if start is not None:
                header = header_of(st.base)
                extra = part[:end]
                if header and bytes(extra[: len(header)]) == header:
                    extra = extra[len(header) :]
                rows = parse_csv(extra, schema, header="none")
            elif end:
                # the records the base has at the same offsets parse as the base's did
                # (a rendering's, or a shadow's that applied): an overwrite that changes
                # a row past the first MiB parses nothing here
                same = _same_base_records(st, end, schema)
                try:
                    rows = parse_csv(part[same:end], schema, header="none") if same else None
                except CsvFormatError:  # parsed whole below: the error names its line
                    rows = None
                if rows is None:
                    rows = parse_csv(part[:end], schema, header="require")
            else:
                rows = None
            if scope is not None and rows is not None:
                scope.check(rows)  # a row of another partition
        except (CsvFormatError, InvalidOperation) as err:
            logger.warning("data.csv: the write of %s was refused: %s", w.key, err)
            self._s.drop(w)
            raise status_error(Nfsstat3.NFS3ERR_INVAL, str(err)) from err
        w.checked = st.size

    def run_apply(self, fn: Callable[[], Applied]) -> Applied:
        """Run one apply; posixlake errors become NfsError (the one map: nfs_error)."""
        try:
            applied = fn()
        except PosixLakeError as err:
            logger.warning("data.csv: write refused: %s", err)
            raise nfs_error(err) from err
        except pa.ArrowException as err:  # a bug below us: fail this write, keep serving
            logger.exception("data.csv: write failed")
            raise status_error(Nfsstat3.NFS3ERR_IO, str(err)) from err
        finally:
            self._s.checked_at = -float("inf")  # re-read the version on the next call
        logger.debug("data.csv: %s", applied)
        return applied

    def apply(
        self,
        content: Base,
        base_version: int,
        base: Base,
        write_id: str | None = None,
        face: EditFace | None = None,
    ) -> Applied:
        """Commit ``content`` as the file of ``face`` (data.csv by default), diffed
        against ``base_version``. Raises NfsError."""
        face = self._reads if face is None else face
        scope = face.scope
        try:
            before = self._s.db.version
        except PosixLakeError as err:
            raise nfs_error(err) from err
        applied = self.run_apply(
            lambda: apply_content(
                self._s.db,
                content,
                base_version=base_version,
                base=base,
                write_id=write_id,
                keys=self._s.keys,
                scope=scope,
            )
        )
        # Keep showing the writer's bytes while the table is exactly what it wrote (not
        # when its base was its own page after an append: no version was those bytes;
        # never for a partition's file, which is always its partition's rendering).
        exact = not isinstance(base, Staging) and not face.part
        if applied.kind != "empty" and content.size and base_version == before and exact:
            produced = applied.version if applied.version is not None else before
            if applied.version is None or applied.version == before + 1:
                self._s.shadows.put(produced, self._reads.stamp_of(produced), content)
        return applied

    @staticmethod
    def is_append(st: Staging) -> bool:
        """Whether the staged content is its base plus whole new lines (an INSERT)."""
        return st.written and st.on_line_boundary() and st.appended_at() is not None

    def poll(self) -> None:
        """Apply the stagings of writers that are done (idle), give up abandoned ones."""
        with self._s.lock:
            self.poll_locked()

    def poll_locked(self) -> None:
        """Apply the stagings of writers that are done: quiet for ``idle_seconds``.

        Over NFSv3 nothing else tells that an edit is done: the Linux client COMMITs
        during writeback while the program still writes, and a shell redirection
        outlives the processes that close their copies of it. Content that ends
        mid-line waits for the writer to flush it (a COMMIT or a FILE_SYNC WRITE: its
        last line is then a record); content with a hole (a WRITE still on its way)
        waits for the WRITE; a truncation alone waits for a COMMIT.
        """
        now = self._s.clock()
        for w in list(self._s.writers.values()):
            idle = now - w.staging.touched
            bounded = w.key.peer.startswith(BOUNDED_PEER_PREFIX)  # NFSv4: applied at CLOSE
            if idle >= self._s.abandon and (bounded or not self.complete(w)):
                self.abandon_writer(w)
            elif idle >= self._s.idle and self.complete(w) and not bounded:
                try:
                    self.apply_writer(w)
                except NfsError as err:
                    logger.warning("data.csv: the edit of %s was refused: %s", w.key, err)
                    self._s.failures.set(w.key, err)

    def client_mounted(self, ctx: CallContext) -> None:
        """A client mounted on the connection ``ctx.connection`` (an NFSv3 NULL on it,
        see `nfs.protocol.vfs.MountAware`).

        What this table keeps for the client's address from another connection — what
        it read (the base of its next rewrite), its page, its own last edit, a failure
        for its next call — is another process's: libnfs tools bind a reserved port a
        later process can get again, and with the earlier process' base its rewrite
        would double rows inserted since, or fail. That process is gone (its address is
        this connection's now), so its staged edit is done: applied as at its idle
        period, or abandoned if it cannot apply; it never mixes with the new process'
        writes. A Linux client's reconnect sends no NULL and keeps all of it (its page
        cache survives the reconnect).
        """
        with self._s.lock:
            self._mounted_locked(ctx, nowait=False)

    def client_mounted_nowait(self, ctx: CallContext) -> bool:
        """`client_mounted` if that needs no waiting, for the event loop: True when done
        (or nothing to do: this connection's mount was settled), False with no effect
        when the table lock is held elsewhere, or when settling would apply a gone
        process' edit or remove its page files (a commit, IO: a worker's)."""
        if self._s.mounts.get(ctx.peer or "") == ctx.connection:
            # a dict read without the lock: it is set as the settling begins under the
            # lock, and every call that reads what the settling changes takes that lock
            return True
        lock = self._s.lock
        if not lock.acquire(blocking=False):
            return False
        try:
            return self._mounted_locked(ctx, nowait=True)
        finally:
            lock.release()

    def _mounted_locked(self, ctx: CallContext, *, nowait: bool) -> bool:
        """`client_mounted` under the table lock; with ``nowait``, nothing (False) when
        it would commit or remove a file."""
        peer = ctx.peer or ""
        known = self._s.mounts.get(peer)
        if known == ctx.connection:
            self._s.mounts.set(peer, known)  # the most recent
            return True
        gone = [w for k, w in self._s.writers.items() if k.peer == peer]
        if nowait and (gone or self._s.pages.has_files_of(peer)):
            return False
        self._s.mounts.set(peer, ctx.connection)
        for w in gone:
            if self.complete(w):
                try:
                    self.apply_writer(w)
                except NfsError as err:
                    logger.warning(
                        "data.csv: the edit of %s (a process now gone) was refused: %s",
                        w.key,
                        err,
                    )
            else:
                self.abandon_writer(w, "its client process is gone")
        for key in self._s.failures.keys_of(peer):
            self._s.failures.pop(key)
        for slot in self._s.views.slots_of(peer):
            self._s.views.forget(slot)
        for slot in self._s.own.keys_of(peer):
            self._s.own.pop(slot)
        self._s.pages.forget_client(peer)
        return True

    @staticmethod
    def complete(w: Writer) -> bool:
        """Whether ``w``'s content may apply once its writer is done (see `WriteRules.poll_locked`)."""
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
        with self._s.lock:
            part = self.target(fid)
            if part is None:
                return None  # other files are applied as they are written
            key = WriterKey.of(ctx, part)
            self.raise_failure(key)
            w = self._s.writers.get(key)
            if w is None:
                return None
            if not w.staging.written and not w.flushed:
                return None
            if w.coverage.holes():
                return None
            return self.apply_writer(w)

    def discard(self, fid: FileId, ctx: CallContext) -> bool:
        """Drop the caller's staged edit of ``fid`` unapplied, with its journal (an NFSv4
        client whose lease expired); whether there was one. Logged at WARNING."""
        with self._s.lock:
            try:
                part = self.target(fid)
            except NfsError:  # a partition gone: its writers' stagings are found by key
                part = None
            w = self._s.writers.get(WriterKey.of(ctx, part)) if part is not None else None
            if w is None:
                return False
            logger.warning("data.csv: the edit of %s was dropped unapplied: %s", w.key, "expired")
            self._s.drop(w)
            return True

    def abandon_writer(self, w: Writer, why: str | None = None) -> None:
        """Drop ``w`` unapplied, logged as an error (``why``: the reason, if not that
        its writer wrote nothing for the abandon period)."""
        if w.coverage.holes():
            what = "has a range no WRITE filled"
        elif w.key.peer.startswith(BOUNDED_PEER_PREFIX):
            what = "was never closed"
        elif w.staging.written:
            what = "ends mid-line"
        else:
            what = "is a truncation alone"
        reason = why or f"after {self._s.abandon:g} s without a write"
        message = (
            f"data.csv: the staged write of {w.key} was abandoned {reason}; its content "
            f"{what} and was never applied"
        )
        logger.error("%s", message)
        self._s.drop(w)
        self._s.failures.set(w.key, status_error(Nfsstat3.NFS3ERR_IO, message))
        # a client holding UNSTABLE writes of it must resend them at its next COMMIT
        self._s.verifier = secrets.token_bytes(8)

    def write(
        self, fid: FileId, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow]:
        """Write: data.csv writes are staged for the caller (see the module docstring).

        A FILE_SYNC / DATA_SYNC write is journaled and fsynced before the reply; one that
        makes the content its base plus whole new lines is applied at once as an INSERT
        (its error is the reply's; when it also began the staging, it is not journaled:
        the staging ends with the call). A failure found since this writer's last reply
        is raised instead of writing.
        """
        part = self.target(fid)
        if part is not None:
            self.writable()
            key = WriterKey.of(ctx, part)
            self.raise_failure(key)
            bounded = key.peer.startswith(BOUNDED_PEER_PREFIX)  # NFSv4: at CLOSE
            # A FILE_SYNC WRITE that starts a staging may apply in this call (``echo >>``):
            # its staging then ends with the call and nothing was promised before its
            # commit, so it is journaled only if it does not apply (before the reply).
            late = stable != StableHow.UNSTABLE and not bounded and key not in self._s.writers
            w = self.writer(ctx, (offset, data), part)
            self._stagings.stage(w, write=(offset, data), journal=not late)
            w.flushed = False
            if stable == StableHow.UNSTABLE:
                self.check_lines(w)
                return len(data), StableHow.UNSTABLE
            if self.is_append(w.staging) and not w.coverage.holes() and not bounded:
                self.apply_writer(w)  # whole new rows: an INSERT, nothing half-written
            else:  # a rewrite: applied once its writer is done (idle)
                if late:
                    self._stagings.record_late(w, (offset, data))
                self.check_lines(w)
                self._stagings.make_durable(w)
                w.flushed = True
            return len(data), StableHow.FILE_SYNC
        ver = version_of(fid)
        if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID) or (ver is not None and not ver[1]):
            raise status_error(Nfsstat3.NFS3ERR_ISDIR)
        if fid == SCHEMA_ID or ver is not None or is_changes(fid):
            raise status_error(Nfsstat3.NFS3ERR_ROFS, "read-only file")
        return self._s.scratch.write(fid, offset, data, stable, ctx)

    def commit(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> None:
        """COMMIT: make the caller's staged data.csv durable (journal fsync); apply nothing.

        The Linux client COMMITs at close() and also during writeback while the program
        still writes: a COMMIT does not end an edit (it applies once its writer is done,
        see :meth:`WriteRules.poll_locked`). Lines that are bad on their own are refused here
        (:meth:`WriteRules.check_lines`). A failure found since this writer's last reply is raised.
        """
        part = self.target(fid)
        if part is not None:
            key = WriterKey.of(ctx, part)
            self.raise_failure(key)
            w = self._s.writers.get(key)
            if w is None:
                return
            self.check_lines(w)
            self._stagings.make_durable(w)
            w.flushed = True
            return
        if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID, SCHEMA_ID) or is_changes(fid):
            return
        ver = version_of(fid)
        if ver is not None:
            self._reads.check_version(ver[0])
            return
        self._s.scratch.commit(fid, offset, count, ctx)

    def commit_idle_locked(self, fid: FileId, ctx: CallContext) -> bool:
        """Whether `commit` of data.csv by the caller has nothing to do (no staging of
        its own, no failure to report): true after an append written FILE_SYNC, where
        libnfs and the Linux client still COMMIT at fsync() and close()."""
        if fid != DATA_CSV_ID:
            return False
        key = WriterKey.of(ctx, "")
        return key not in self._s.writers and self._s.failures.get(key) is None

    def rename_onto_table(
        self, from_dir: FileId, from_name: str, ctx: CallContext, part: str = ""
    ) -> None:
        """A scratch file renamed onto data.csv (``part`` "") or a partition's data.csv:
        its content is an edit of that file, based on what the caller read of it."""
        self.writable()
        face = self.face(part)
        src = self._s.scratch.lookup(from_dir, from_name, ctx)
        attrs = self._s.scratch.getattr(src)
        if attrs.type == Ftype3.NF3DIR:
            raise status_error(Nfsstat3.NFS3ERR_ISDIR)
        # the caller must be allowed to remove the source from its directory
        if not self._s.scratch.access(from_dir, ACCESS3_DELETE | ACCESS3_MODIFY, ctx):
            raise status_error(Nfsstat3.NFS3ERR_ACCES)
        content = self._s.scratch.read_all(src)
        key = WriterKey.of(ctx, part)
        own = self._s.writers.get(key)
        peer = key.slot
        if own is not None:
            # the caller's own edit of data.csv is done (it moved on to a rename): it
            # applies first, and what the caller read of data.csv was that content
            self.apply_writer(own)
        held = self._s.own.get(peer)
        if held is not None:  # its own last edit's bytes (what it read since)
            base_version, base = held
        else:
            # the base: what this client's READs of data.csv returned (sed -i reads it
            # after creating its temporary file), else the version when the file was made
            view = self._s.views.base(peer)
            if isinstance(view, Torn):
                raise status_error(Nfsstat3.NFS3ERR_IO, _torn_message(view.versions))
            base_version = view if view is not None else self._s.scratch_base.get(src, -1)
            if base_version < 0:
                base_version = face.version()
            found = face.presented_or_none(base_version)
            if found is None:
                base_version = self._s.scratch_base.get(src, face.version())
                found = face.presented_or_none(base_version) or BytesBase(b"")
            base = found
        new = BytesBase(content)
        applied = self.apply(new, base_version, base, secrets.token_hex(12), face)
        self.holds(peer, applied, new)
        self._s.scratch.pop_file(from_dir, from_name)
        self._s.scratch_base.pop(src, None)


def _fits(content: Base, offset: int, data: bytes) -> bool:
    """Whether a write of ``data`` at ``offset`` reads as made from a view of ``content``:
    at its end (an append), or from a page at or before its end resending the rest of it
    and adding more (the Linux client widens a write to its cached page). Reads only the
    bytes the write covers.
    """
    size = content.size
    if offset >= size:
        return offset == size
    end = offset + len(data)
    return end > size and same_bytes(
        read_all(content, offset, size), memoryview(data)[: size - offset]
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
    a line feed inside a quoted field does not end one. 0 if none ends.

    A line feed ends a record when an even number of quotes precede it; the last such
    one is found walking back from the end (one count over the data, then a count per
    line walked back: a record still open at the end is at most a few lines long).
    """
    nl = data.rfind(b"\n")
    if nl < 0:
        return 0
    quotes = data.count(b'"', 0, nl)
    while quotes % 2:
        prev = data.rfind(b"\n", 0, nl)
        if prev < 0:
            return 0
        quotes -= data.count(b'"', prev, nl)
        nl = prev
    return nl + 1


def _same_base_records(st: Staging, end: int, schema: pa.Schema) -> int:
    """How many first bytes of the staging's first ``end`` bytes (a record start) are
    whole records of its base at the same offsets, the header line included, when the
    base's header is today's columns (else 0: the whole content is parsed, and reports
    what is wrong)."""
    same = same_records(st, st.base, end)
    if not same:
        return 0
    try:
        parse_csv(header_of(st.base), schema, header="require")
    except CsvFormatError:
        return 0
    return same
