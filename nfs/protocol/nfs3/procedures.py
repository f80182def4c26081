"""The 22 NFSv3 procedures (RFC 1813 §3.3): decode the handle, call the Vfs, build the result.

Each is a function ``nfsproc3_xxx(service, args, ctx) -> XXX3res``. `NfsError(status)`
from the Vfs becomes that status, with the wcc / post-op attributes the RFC defines for
the failure arm. `nfs.protocol.nfs3.program.NFS3_PROCEDURES` maps every `NfsProc3` to one.

Sans-IO: no sockets, no clock (times come from the Vfs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from nfs.protocol.nfs3.args import (
    Access3Args,
    Commit3Args,
    Create3Args,
    Fsinfo3Args,
    Fsstat3Args,
    Getattr3Args,
    Link3Args,
    Lookup3Args,
    Mkdir3Args,
    Mknod3Args,
    Pathconf3Args,
    Read3Args,
    Readdir3Args,
    Readdirplus3Args,
    Readlink3Args,
    Remove3Args,
    Rename3Args,
    Rmdir3Args,
    Setattr3Args,
    Symlink3Args,
    Write3Args,
)
from nfs.protocol.nfs3.handles import FH_SIZE
from nfs.protocol.nfs3.results import (
    Access3Res,
    Access3ResOk,
    Commit3Res,
    Commit3ResOk,
    Create3Res,
    Create3ResOk,
    Dirlist3,
    Dirlistplus3,
    Entry3,
    Entryplus3,
    Fsinfo3Res,
    Fsinfo3ResOk,
    Fsstat3Res,
    Fsstat3ResOk,
    Getattr3Res,
    Getattr3ResOk,
    Link3Res,
    Lookup3Res,
    Lookup3ResOk,
    Pathconf3Res,
    Pathconf3ResOk,
    Read3Res,
    Read3ResOk,
    Readdir3Res,
    Readdir3ResOk,
    Readdirplus3Res,
    Readdirplus3ResOk,
    Readlink3Res,
    Remove3Res,
    Rename3Res,
    Setattr3Res,
    Write3Res,
    Write3ResOk,
)
from nfs.protocol.nfs3.service import OK, Nfs3Service, nfs3_status
from nfs.protocol.nfs3.types import (
    FATTR3_SIZE,
    FSF3_CANSETTIME,
    FSF3_HOMOGENEOUS,
    ZERO_VERF,
    Createmode3,
    DirOpArgs3,
    Fattr3,
    FileSlice,
    Nfsstat3,
    Nfstime3,
    Pieces,
    PostOpAttr,
    PostOpFh3,
    PreOpAttr,
    Sattr3,
    WccData,
)
from nfs.protocol.rpc import VOID, CallContext, Void
from nfs.protocol.vfs import (
    ACCESS3_DELETE,
    ACCESS3_EXTEND,
    ACCESS3_MODIFY,
    FileId,
    NfsError,
)

__all__ = [
    "nfsproc3_access",
    "nfsproc3_access_nowait",
    "nfsproc3_commit",
    "nfsproc3_commit_nowait",
    "nfsproc3_create",
    "nfsproc3_fsinfo",
    "nfsproc3_fsinfo_nowait",
    "nfsproc3_fsstat",
    "nfsproc3_getattr",
    "nfsproc3_getattr_nowait",
    "nfsproc3_link",
    "nfsproc3_lookup",
    "nfsproc3_lookup_nowait",
    "nfsproc3_mkdir",
    "nfsproc3_mknod",
    "nfsproc3_null",
    "nfsproc3_null_nowait",
    "nfsproc3_pathconf",
    "nfsproc3_pathconf_nowait",
    "nfsproc3_read",
    "nfsproc3_read_nowait",
    "nfsproc3_readdir",
    "nfsproc3_readdirplus",
    "nfsproc3_readlink",
    "nfsproc3_remove",
    "nfsproc3_rename",
    "nfsproc3_rmdir",
    "nfsproc3_setattr",
    "nfsproc3_symlink",
    "nfsproc3_write",
]


def _attrs_nowait(s: Nfs3Service, fid: FileId, ctx: CallContext) -> Fattr3 | None:
    """The attributes of `fid` if the Vfs gives them without waiting (``getattr_nowait``:
    `nfs.protocol.vfs.NowaitVfs`), or None."""
    getattr_nowait = getattr(s.vfs, "getattr_nowait", None)
    if getattr_nowait is None:
        return None
    attrs: Fattr3 | None = getattr_nowait(fid, ctx)
    return attrs


def nfsproc3_null(s: Nfs3Service, args: Void, ctx: CallContext) -> Void:
    """NULL (RFC 1813 §3.3.0): nothing, but a Vfs that keeps state per client address
    hears of it (`nfs.protocol.vfs.MountAware`: a client pings when it mounts)."""
    if ctx.connection and s.mount_aware is not None:
        s.mount_aware.client_mounted(ctx)
    return VOID


def nfsproc3_null_nowait(s: Nfs3Service, args: Void, ctx: CallContext) -> Void | None:
    """NULL on the event loop: None (the full path runs it) when the Vfs would wait to
    hear of the mount (a MountAware Vfs settles what a gone process left under its
    lock; `nfs.protocol.vfs.NowaitVfs.client_mounted_nowait`)."""
    if ctx.connection and s.mount_aware is not None:
        nowait = s.mount_aware_nowait
        if nowait is None or not nowait(ctx):
            return None
    return VOID


def nfsproc3_getattr(s: Nfs3Service, args: Getattr3Args, ctx: CallContext) -> Getattr3Res:
    """GETATTR (RFC 1813 §3.3.1)."""
    try:
        return Getattr3Res(OK, Getattr3ResOk(s.vfs.getattr(s.fid(args.object))))
    except NfsError as err:
        return Getattr3Res(nfs3_status(err))


def nfsproc3_getattr_nowait(
    s: Nfs3Service, args: Getattr3Args, ctx: CallContext
) -> Getattr3Res | None:
    """GETATTR without waiting (`nfs.protocol.vfs.NowaitVfs`), or None: run `nfsproc3_getattr`."""
    fid = s.handles.decode_nowait(args.object)
    attrs = None if fid is None else _attrs_nowait(s, fid, ctx)
    return None if attrs is None else Getattr3Res(OK, Getattr3ResOk(attrs))


def nfsproc3_setattr(s: Nfs3Service, args: Setattr3Args, ctx: CallContext) -> Setattr3Res:
    """SETATTR (RFC 1813 §3.3.2): the guard compares ctime before calling the Vfs."""
    try:
        fid = s.fid(args.object)
    except NfsError as err:
        return Setattr3Res(nfs3_status(err))
    current = s.attrs(fid)
    before = PreOpAttr(current.wcc_attr() if current is not None else None)
    try:
        s.check_writable()
        guard = args.guard.obj_ctime
        if guard is not None and (current is None or current.ctime != guard):
            raise NfsError(Nfsstat3.NFS3ERR_NOT_SYNC)
        after = s.vfs.setattr(fid, args.new_attributes, ctx)
        return Setattr3Res(OK, WccData(before, PostOpAttr(after)))
    except NfsError as err:
        return Setattr3Res(nfs3_status(err), s.wcc(fid, before))


def nfsproc3_lookup(s: Nfs3Service, args: Lookup3Args, ctx: CallContext) -> Lookup3Res:
    """LOOKUP (RFC 1813 §3.3.3)."""
    try:
        dir_id = s.fid(args.what.dir)
    except NfsError as err:
        return Lookup3Res(nfs3_status(err))
    try:
        s.check_name(args.what.name)
        fid = s.vfs.lookup(dir_id, args.what.name, ctx)
        return Lookup3Res(
            OK, Lookup3ResOk(s.handles.encode(fid), s.post_op(fid), s.post_op(dir_id))
        )
    except NfsError as err:
        return Lookup3Res(nfs3_status(err), resfail=s.post_op(dir_id))


def nfsproc3_lookup_nowait(
    s: Nfs3Service, args: Lookup3Args, ctx: CallContext
) -> Lookup3Res | None:
    """LOOKUP of an existing name without waiting (`nfs.protocol.vfs.NowaitVfs`), or None."""
    lookup_nowait = getattr(s.vfs, "lookup_nowait", None)
    dir_id = s.handles.decode_nowait(args.what.dir)
    if lookup_nowait is None or dir_id is None:
        return None
    fid: FileId | None = lookup_nowait(dir_id, args.what.name, ctx)
    if fid is None:
        return None
    gen_nowait = getattr(s.vfs, "generation_nowait", None)
    gen: bytes | None = None if gen_nowait is None else gen_nowait(fid)
    attrs = _attrs_nowait(s, fid, ctx)
    dir_attrs = _attrs_nowait(s, dir_id, ctx)
    if gen is None or attrs is None or dir_attrs is None:
        return None
    fh = s.handles.encode_with(fid, gen)
    return Lookup3Res(OK, Lookup3ResOk(fh, PostOpAttr(attrs), PostOpAttr(dir_attrs)))


def nfsproc3_access(s: Nfs3Service, args: Access3Args, ctx: CallContext) -> Access3Res:
    """ACCESS (RFC 1813 §3.3.4): the Vfs grants; a read-only Vfs never grants changes."""
    try:
        fid = s.fid(args.object)
    except NfsError as err:
        return Access3Res(nfs3_status(err))
    try:
        granted = s.vfs.access(fid, args.access, ctx) & args.access
        if s.vfs.capabilities().read_only:
            granted &= ~(ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE)
        return Access3Res(OK, Access3ResOk(s.post_op(fid), granted))
    except NfsError as err:
        return Access3Res(nfs3_status(err), resfail=s.post_op(fid))


def nfsproc3_access_nowait(
    s: Nfs3Service, args: Access3Args, ctx: CallContext
) -> Access3Res | None:
    """ACCESS without waiting (`nfs.protocol.vfs.NowaitVfs`), or None: run `nfsproc3_access`."""
    access_nowait = getattr(s.vfs, "access_nowait", None)
    fid = s.handles.decode_nowait(args.object)
    if access_nowait is None or fid is None:
        return None
    granted: int | None = access_nowait(fid, args.access, ctx)
    attrs = _attrs_nowait(s, fid, ctx)
    if granted is None or attrs is None:
        return None
    granted &= args.access
    if s.vfs.capabilities().read_only:
        granted &= ~(ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE)
    return Access3Res(OK, Access3ResOk(PostOpAttr(attrs), granted))


def nfsproc3_readlink(s: Nfs3Service, args: Readlink3Args, ctx: CallContext) -> Readlink3Res:
    """READLINK (RFC 1813 §3.3.5): symbolic links are not supported (NFS3ERR_NOTSUPP)."""
    try:
        fid = s.fid(args.symlink)
    except NfsError as err:
        return Readlink3Res(nfs3_status(err))
    return Readlink3Res(Nfsstat3.NFS3ERR_NOTSUPP, resfail=s.post_op(fid))


def nfsproc3_read(s: Nfs3Service, args: Read3Args, ctx: CallContext) -> Read3Res:
    """READ (RFC 1813 §3.3.6): at most rtmax bytes; the data is sent without a copy."""
    try:
        fid = s.fid(args.file)
    except NfsError as err:
        return Read3Res(nfs3_status(err))
    try:
        data, eof = s.vfs.read(fid, args.offset, min(args.count, s.limits.rtmax), ctx)
        return Read3Res(OK, Read3ResOk(s.post_op(fid), len(data), eof, data))
    except NfsError as err:
        return Read3Res(nfs3_status(err), resfail=s.post_op(fid))


def nfsproc3_read_nowait(s: Nfs3Service, args: Read3Args, ctx: CallContext) -> Read3Res | None:
    """READ without waiting, if the Vfs can (its ``read_nowait``: bytes and attributes at
    hand, no lock to wait for); None means run `nfsproc3_read` instead."""
    read_nowait = getattr(s.vfs, "read_nowait", None)
    if read_nowait is None:
        return None
    if getattr(s.vfs, "generation_nowait", None) is not None:
        fid: FileId | None = s.handles.decode_nowait(args.file)  # never waits for a lock
        if fid is None:
            return None
    else:  # a Vfs whose generation() of a readable file does not wait (nfs.lake)
        try:
            fid = s.fid(args.file)
        except NfsError:
            return None
    got: tuple[bytes | memoryview | Pieces | FileSlice, bool, Fattr3] | None = read_nowait(
        fid, args.offset, min(args.count, s.limits.rtmax), ctx
    )
    if got is None:
        return None
    data, eof, attrs = got
    return Read3Res(OK, Read3ResOk(PostOpAttr(attrs), len(data), eof, data))


def nfsproc3_write(s: Nfs3Service, args: Write3Args, ctx: CallContext) -> Write3Res:
    """WRITE (RFC 1813 §3.3.7): writes `count` bytes of the data (INVAL if fewer were sent)."""
    try:
        fid = s.fid(args.file)
    except NfsError as err:
        return Write3Res(nfs3_status(err))
    before = s.pre_op(fid)
    try:
        s.check_writable()
        data = args.data
        if args.count > len(data):
            raise NfsError(Nfsstat3.NFS3ERR_INVAL, "WRITE count exceeds the data sent")
        if args.count < len(data):
            data = data[: args.count]
        count, committed = s.vfs.write(fid, args.offset, data, args.stable, ctx)
        return Write3Res(OK, Write3ResOk(s.wcc(fid, before), count, committed, s.verifier()))
    except NfsError as err:
        return Write3Res(nfs3_status(err), resfail=s.wcc(fid, before))


def _make(s: Nfs3Service, where: DirOpArgs3, make: Callable[[FileId], FileId]) -> Create3Res:
    """Create an entry in ``where.dir`` with ``make(dir_id)`` (CREATE, MKDIR)."""
    try:
        dir_id = s.fid(where.dir)
    except NfsError as err:
        return Create3Res(nfs3_status(err))
    before = s.pre_op(dir_id)
    try:
        s.check_writable()
        s.check_name(where.name)
        fid = make(dir_id)
        return Create3Res(
            OK,
            Create3ResOk(PostOpFh3(s.handles.encode(fid)), s.post_op(fid), s.wcc(dir_id, before)),
        )
    except NfsError as err:
        return Create3Res(nfs3_status(err), resfail=s.wcc(dir_id, before))


def nfsproc3_create(s: Nfs3Service, args: Create3Args, ctx: CallContext) -> Create3Res:
    """CREATE (RFC 1813 §3.3.8): UNCHECKED, GUARDED or EXCLUSIVE (with verifier)."""
    name, how = args.where.name, args.how

    def make(dir_id: FileId) -> FileId:
        if how.mode == Createmode3.EXCLUSIVE:
            return s.vfs.create_exclusive(dir_id, name, how.verf or ZERO_VERF, ctx)
        attrs = how.obj_attributes or Sattr3()
        return s.vfs.create(dir_id, name, attrs, ctx, guarded=how.mode == Createmode3.GUARDED)

    return _make(s, args.where, make)


def nfsproc3_mkdir(s: Nfs3Service, args: Mkdir3Args, ctx: CallContext) -> Create3Res:
    """MKDIR (RFC 1813 §3.3.9)."""
    return _make(s, args.where, lambda d: s.vfs.mkdir(d, args.where.name, args.attributes, ctx))


def _not_supported_in(s: Nfs3Service, where: DirOpArgs3) -> Create3Res:
    try:
        dir_id = s.fid(where.dir)
    except NfsError as err:
        return Create3Res(nfs3_status(err))
    return Create3Res(Nfsstat3.NFS3ERR_NOTSUPP, resfail=s.wcc(dir_id, s.pre_op(dir_id)))


def nfsproc3_symlink(s: Nfs3Service, args: Symlink3Args, ctx: CallContext) -> Create3Res:
    """SYMLINK (RFC 1813 §3.3.10): not supported (NFS3ERR_NOTSUPP)."""
    return _not_supported_in(s, args.where)


def nfsproc3_mknod(s: Nfs3Service, args: Mknod3Args, ctx: CallContext) -> Create3Res:
    """MKNOD (RFC 1813 §3.3.11): not supported (NFS3ERR_NOTSUPP)."""
    return _not_supported_in(s, args.where)


def _unlink(s: Nfs3Service, what: DirOpArgs3, unlink: Callable[[FileId, str], None]) -> Remove3Res:
    """Remove ``what`` with ``unlink(dir_id, name)`` (REMOVE, RMDIR)."""
    try:
        dir_id = s.fid(what.dir)
    except NfsError as err:
        return Remove3Res(nfs3_status(err))
    before = s.pre_op(dir_id)
    try:
        s.check_writable()
        unlink(dir_id, what.name)
        return Remove3Res(OK, s.wcc(dir_id, before))
    except NfsError as err:
        return Remove3Res(nfs3_status(err), s.wcc(dir_id, before))


def nfsproc3_remove(s: Nfs3Service, args: Remove3Args, ctx: CallContext) -> Remove3Res:
    """REMOVE (RFC 1813 §3.3.12)."""
    return _unlink(s, args.object, lambda d, name: s.vfs.remove(d, name, ctx))


def nfsproc3_rmdir(s: Nfs3Service, args: Rmdir3Args, ctx: CallContext) -> Remove3Res:
    """RMDIR (RFC 1813 §3.3.13)."""
    return _unlink(s, args.object, lambda d, name: s.vfs.rmdir(d, name, ctx))


def nfsproc3_rename(s: Nfs3Service, args: Rename3Args, ctx: CallContext) -> Rename3Res:
    """RENAME (RFC 1813 §3.3.14)."""
    try:
        from_dir = s.fid(args.from_.dir)
        to_dir = s.fid(args.to.dir)
    except NfsError as err:
        return Rename3Res(nfs3_status(err))
    from_before = s.pre_op(from_dir)
    to_before = s.pre_op(to_dir)
    try:
        s.check_writable()
        s.check_name(args.to.name)
        s.vfs.rename(from_dir, args.from_.name, to_dir, args.to.name, ctx)
        status = OK
    except NfsError as err:
        status = nfs3_status(err)
    return Rename3Res(status, s.wcc(from_dir, from_before), s.wcc(to_dir, to_before))


def nfsproc3_link(s: Nfs3Service, args: Link3Args, ctx: CallContext) -> Link3Res:
    """LINK (RFC 1813 §3.3.15): hard links are not supported (NFS3ERR_NOTSUPP)."""
    try:
        fid = s.fid(args.file)
        dir_id = s.fid(args.link.dir)
    except NfsError as err:
        return Link3Res(nfs3_status(err))
    return Link3Res(Nfsstat3.NFS3ERR_NOTSUPP, s.post_op(fid), s.wcc(dir_id, s.pre_op(dir_id)))


_MIN_ENTRY_SIZE: Final = 4 + 8 + 8 + 8
"""The smallest entry3 on the wire: flag, fileid, 1-4 byte name, cookie."""
_DIRLIST_FIXED: Final = 4 + 8 + 4 + 4
"""status + cookieverf + end-of-list flag + eof (post_op_attr added separately)."""


def _check_cookie(cookie: int, sent: bytes, current: bytes) -> None:
    # A zero verifier from the client is accepted (RFC 1813 §3.3.16 lets clients
    # that got none send zeros); otherwise it must be the listing's.
    if cookie != 0 and sent != ZERO_VERF and sent != current:
        raise NfsError(Nfsstat3.NFS3ERR_BAD_COOKIE)


def nfsproc3_readdir(s: Nfs3Service, args: Readdir3Args, ctx: CallContext) -> Readdir3Res:
    """READDIR (RFC 1813 §3.3.16).

    The whole READDIR3res (status included) stays within `count` bytes; entries
    are cut at the first that does not fit (eof is then FALSE). If not even one
    entry fits: NFS3ERR_TOOSMALL.
    """
    try:
        dir_id = s.fid(args.dir)
    except NfsError as err:
        return Readdir3Res(nfs3_status(err))
    try:
        dir_attr = s.post_op(dir_id)
        budget = args.count - _DIRLIST_FIXED - dir_attr.xdr_size()
        max_entries = max(1, min(budget // _MIN_ENTRY_SIZE + 1, s.limits.max_readdir_entries))
        page = s.vfs.readdir(dir_id, after=args.cookie, max_entries=max_entries, ctx=ctx)
        _check_cookie(args.cookie, args.cookieverf, page.cookieverf)
        entries: list[Entry3] = []
        used = 0
        for e in page.entries:
            entry = Entry3(e.fileid, e.name, e.cookie)
            size = entry.xdr_size()
            if used + size > budget:
                break
            entries.append(entry)
            used += size
        if page.entries and not entries:
            raise NfsError(Nfsstat3.NFS3ERR_TOOSMALL)
        eof = page.eof and len(entries) == len(page.entries)
        return Readdir3Res(
            OK, Readdir3ResOk(dir_attr, page.cookieverf, Dirlist3(tuple(entries), eof))
        )
    except NfsError as err:
        return Readdir3Res(nfs3_status(err), resfail=s.post_op(dir_id))


def nfsproc3_readdirplus(
    s: Nfs3Service, args: Readdirplus3Args, ctx: CallContext
) -> Readdirplus3Res:
    """READDIRPLUS (RFC 1813 §3.3.17).

    Entries stop at the first one that would make the fileid/name/cookie bytes
    (with list flags) exceed `dircount`, or the whole READDIRPLUS3res exceed
    `maxcount`. If not even one entry fits: NFS3ERR_TOOSMALL.
    """
    try:
        dir_id = s.fid(args.dir)
    except NfsError as err:
        return Readdirplus3Res(nfs3_status(err))
    try:
        dir_attr = s.post_op(dir_id)
        budget = args.maxcount - _DIRLIST_FIXED - dir_attr.xdr_size()
        plus_min = _MIN_ENTRY_SIZE + 4 + FATTR3_SIZE + 8 + FH_SIZE
        max_entries = max(
            1,
            min(
                args.dircount // _MIN_ENTRY_SIZE + 1,
                budget // plus_min + 1,
                s.limits.max_readdir_entries,
            ),
        )
        page = s.vfs.readdir(dir_id, after=args.cookie, max_entries=max_entries, ctx=ctx)
        _check_cookie(args.cookie, args.cookieverf, page.cookieverf)
        entries: list[Entryplus3] = []
        used = used_dir = 0
        for e in page.entries:
            try:
                handle = PostOpFh3(s.handles.encode(e.fileid))
            except NfsError:  # removed meanwhile: list it without handle and attributes
                handle = PostOpFh3()
            entry = Entryplus3(e.fileid, e.name, e.cookie, s.post_op(e.fileid), handle)
            dsize = entry.dir_size()
            size = entry.xdr_size()
            if used_dir + dsize > args.dircount or used + size > budget:
                break
            entries.append(entry)
            used += size
            used_dir += dsize
        if page.entries and not entries:
            raise NfsError(Nfsstat3.NFS3ERR_TOOSMALL)
        eof = page.eof and len(entries) == len(page.entries)
        return Readdirplus3Res(
            OK,
            Readdirplus3ResOk(dir_attr, page.cookieverf, Dirlistplus3(tuple(entries), eof)),
        )
    except NfsError as err:
        return Readdirplus3Res(nfs3_status(err), resfail=s.post_op(dir_id))


def nfsproc3_fsstat(s: Nfs3Service, args: Fsstat3Args, ctx: CallContext) -> Fsstat3Res:
    """FSSTAT (RFC 1813 §3.3.18)."""
    try:
        fid = s.fid(args.fsroot)
    except NfsError as err:
        return Fsstat3Res(nfs3_status(err))
    try:
        st = s.vfs.fsstat(fid)
        return Fsstat3Res(
            OK,
            Fsstat3ResOk(
                s.post_op(fid),
                st.tbytes,
                st.fbytes,
                st.abytes,
                st.tfiles,
                st.ffiles,
                st.afiles,
                st.invarsec,
            ),
        )
    except NfsError as err:
        return Fsstat3Res(nfs3_status(err), resfail=s.post_op(fid))


def nfsproc3_fsinfo(s: Nfs3Service, args: Fsinfo3Args, ctx: CallContext) -> Fsinfo3Res:
    """FSINFO (RFC 1813 §3.3.19): 1 MiB reads and writes; no links or symlinks."""
    try:
        fid = s.fid(args.fsroot)
    except NfsError as err:
        return Fsinfo3Res(nfs3_status(err))
    return _fsinfo(s, s.post_op(fid))


def nfsproc3_fsinfo_nowait(
    s: Nfs3Service, args: Fsinfo3Args, ctx: CallContext
) -> Fsinfo3Res | None:
    """FSINFO without waiting (`nfs.protocol.vfs.NowaitVfs`), or None: run `nfsproc3_fsinfo`."""
    fid = s.handles.decode_nowait(args.fsroot)
    attrs = None if fid is None else _attrs_nowait(s, fid, ctx)
    return None if attrs is None else _fsinfo(s, PostOpAttr(attrs))


def _fsinfo(s: Nfs3Service, attrs: PostOpAttr) -> Fsinfo3Res:
    caps = s.vfs.capabilities()
    lim = s.limits
    return Fsinfo3Res(
        OK,
        Fsinfo3ResOk(
            attrs,
            rtmax=lim.rtmax,
            rtpref=lim.rtpref,
            rtmult=lim.rtmult,
            wtmax=lim.wtmax,
            wtpref=lim.wtpref,
            wtmult=lim.wtmult,
            dtpref=lim.dtpref,
            maxfilesize=caps.max_file_size,
            time_delta=Nfstime3.from_ns(caps.time_delta_ns),
            properties=FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        ),
    )


def nfsproc3_pathconf(s: Nfs3Service, args: Pathconf3Args, ctx: CallContext) -> Pathconf3Res:
    """PATHCONF (RFC 1813 §3.3.20)."""
    try:
        fid = s.fid(args.object)
    except NfsError as err:
        return Pathconf3Res(nfs3_status(err))
    return _pathconf(s, s.post_op(fid))


def nfsproc3_pathconf_nowait(
    s: Nfs3Service, args: Pathconf3Args, ctx: CallContext
) -> Pathconf3Res | None:
    """PATHCONF without waiting (`nfs.protocol.vfs.NowaitVfs`), or None: run `nfsproc3_pathconf`."""
    fid = s.handles.decode_nowait(args.object)
    attrs = None if fid is None else _attrs_nowait(s, fid, ctx)
    return None if attrs is None else _pathconf(s, PostOpAttr(attrs))


def _pathconf(s: Nfs3Service, attrs: PostOpAttr) -> Pathconf3Res:
    caps = s.vfs.capabilities()
    return Pathconf3Res(
        OK,
        Pathconf3ResOk(
            attrs,
            linkmax=1,
            name_max=caps.name_max,
            no_trunc=True,
            chown_restricted=True,
            case_insensitive=caps.case_insensitive,
            case_preserving=True,
        ),
    )


def nfsproc3_commit_nowait(
    s: Nfs3Service, args: Commit3Args, ctx: CallContext
) -> Commit3Res | None:
    """COMMIT without waiting when the Vfs has nothing of the caller's to make durable
    (``commit_nowait``: `nfs.protocol.vfs.NowaitVfs`), or None: run `nfsproc3_commit`."""
    commit_nowait = getattr(s.vfs, "commit_nowait", None)
    fid = s.handles.decode_nowait(args.file)
    if commit_nowait is None or fid is None or s.vfs.capabilities().read_only:
        return None
    attrs = _attrs_nowait(s, fid, ctx)
    if attrs is None or not commit_nowait(fid, args.offset, args.count, ctx):
        return None
    wcc = WccData(PreOpAttr(attrs.wcc_attr()), PostOpAttr(attrs))  # nothing changed
    return Commit3Res(OK, Commit3ResOk(wcc, s.verifier()))


def nfsproc3_commit(s: Nfs3Service, args: Commit3Args, ctx: CallContext) -> Commit3Res:
    """COMMIT (RFC 1813 §3.3.21): the Vfs applies staged UNSTABLE writes."""
    try:
        fid = s.fid(args.file)
    except NfsError as err:
        return Commit3Res(nfs3_status(err))
    before = s.pre_op(fid)
    try:
        s.check_writable()
        s.vfs.commit(fid, args.offset, args.count, ctx)
        return Commit3Res(OK, Commit3ResOk(s.wcc(fid, before), s.verifier()))
    except NfsError as err:
        return Commit3Res(nfs3_status(err), resfail=s.wcc(fid, before))
