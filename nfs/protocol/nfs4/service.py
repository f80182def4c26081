"""NFSv4.0 over a `Vfs`: the COMPOUND procedure (RFC 7530 §15-16) as RPC program 100003
version 4, beside NFSv3 on the same port and the same Vfs.

The pseudo-root (PUTROOTFH) is the Vfs's root: NFSv4 shows what the NFSv3 export shows,
with the same file handles (`nfs.protocol.nfs3.handles.HandleCodec`) and the same AUTH_SYS
identity (the dispatcher's credential policy applies to every call).

**An edit is an open.** The writer of an edit is the open-owner (RFC 7530 §9.1.7) whose
stateid the calls carry: its calls run as ``nfs4:<client digest>:<owner digest>``
(`writer_peer`; `nfs.protocol.vfs.BOUNDED_PEER_PREFIX`) with the caller's uid and gid. The
digests are of the client's id string and of the owner's bytes, which both survive
reconnects and server restarts (a reclaim names the same owner). The Linux client keeps one
open-owner per mount (superblock) and user, so one user's two mounts are two writers, as two
users are. A Vfs that stages writes (TableFs) keeps an owner's WRITEs until the CLOSE of its
open that had write access, and the CLOSE applies them as one edit (`EditBounds.finish`);
its error is the CLOSE's status (NFS4ERR_INVAL, NFS4ERR_IO) and is logged. A client whose
lease expired loses its opens, and their staged edits are dropped unapplied
(`EditBounds.discard`).

Which owner a call is (`Nfs4Service.caller`):

- OPEN, OPEN_CONFIRM, OPEN_DOWNGRADE, CLOSE name their owner; READ, WRITE and SETATTR name
  it by their stateid (a lock stateid: the owner of the open its locks were taken under).
  The rest of that COMPOUND (the GETATTR after a WRITE or a CLOSE) runs as that owner too.
- An anonymous or bypass stateid, and calls that name no owner, run as the client
  ``nfs4:<client digest>`` with the caller's uid and gid, except:
- GETATTR, VERIFY, NVERIFY, ACCESS (and each entry of a READDIR) of a file that exactly
  one open-owner of the client with the caller's uid and gid has open: as that owner, so
  ``ls -l`` or a revalidation while a file is written shows the size written so far. Two
  such owners holding it (one user's two mounts): as the client, which has no staged
  content, so neither is shown the other's unfinished edit.
- COMMIT (no stateid; durability only): for every owner of the client holding the file
  open for writing, and for the client (on a connection not yet known as a client's: for
  every owner holding it open for writing).
- RENAME: as the owner that has the source open, else the owner that last opened it
  (``sed -i`` writes and closes its temporary file, then renames it onto data.csv: the
  base of that edit is what that owner READ of data.csv). REMOVE: as GETATTR.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

from nfs.protocol.nfs3.handles import HandleCodec
from nfs.protocol.nfs3.service import DEFAULT_LIMITS, Nfs3Limits
from nfs.protocol.nfs3.types import NFS_PROGRAM, Fattr3, Ftype3, NfsFh3, Nfsstat3, Sattr3, StableHow
from nfs.protocol.nfs4 import ops as o
from nfs.protocol.nfs4.attrs import AttrError, attr_values, change_of, sattr_of
from nfs.protocol.nfs4.ops import (
    Compound4Args,
    Compound4Res,
    Nfs4Op,
    Nfs4Res,
)
from nfs.protocol.nfs4.state import Conflict, Nfs4State, OpenOwner, OpenState, Replay, StateError
from nfs.protocol.nfs4.types import (
    NFS_V4,
    AttrNotSupp,
    ChangeInfo4,
    Fattr4,
    NfsFtype4,
    Nfsstat4,
    OpNum4,
    Stateid4,
    StateOwner4,
    bitmap_of,
    bits_of,
    decode_fattr,
    encode_fattr,
)
from nfs.protocol.rpc import CallContext, RpcProcedure, RpcProgram, Void
from nfs.protocol.vfs import (
    ACCESS3_EXECUTE,
    ACCESS3_MODIFY,
    ACCESS3_READ,
    BOUNDED_PEER_PREFIX,
    EditBounds,
    FileId,
    NfsError,
    Vfs,
    calling,
)
from nfs.protocol.xdr import XdrError

__all__ = ["Nfs4Service", "nfs4_program", "writer_peer"]

logger = logging.getLogger(__name__)

OK: Final = Nfsstat4.NFS4_OK
_SEQID_OPS: Final = frozenset(
    {OpNum4.OP_OPEN, OpNum4.OP_OPEN_CONFIRM, OpNum4.OP_OPEN_DOWNGRADE, OpNum4.OP_CLOSE}
)
_PER_FILE: Final = frozenset(
    {OpNum4.OP_GETATTR, OpNum4.OP_VERIFY, OpNum4.OP_NVERIFY, OpNum4.OP_ACCESS}
)
"""Operations without a stateid that run as the one open-owner holding their file open."""
_OPENERS_KEPT: Final = 4096
"""How many (client, file) pairs `Nfs4Service` remembers the last opener of (for RENAME)."""
_V3_TO_V4: Final = {
    Nfsstat3.NFS3ERR_NOT_SYNC: Nfsstat4.NFS4ERR_INVAL,
    Nfsstat3.NFS3ERR_JUKEBOX: Nfsstat4.NFS4ERR_DELAY,
    Nfsstat3.NFS3ERR_NODEV: Nfsstat4.NFS4ERR_NXIO,
    Nfsstat3.NFS3ERR_REMOTE: Nfsstat4.NFS4ERR_IO,
}


class Fail(Exception):
    """An operation fails with ``status`` (the COMPOUND stops there)."""

    def __init__(self, status: Nfsstat4, message: str = "") -> None:
        super().__init__(message or status.name)
        self.status = status


def v4_status(err: NfsError) -> Nfsstat4:
    """The NFSv4 status of a Vfs error (the v3 numbers are v4's, RFC 7530 §13.1)."""
    mapped = _V3_TO_V4.get(err.status)
    if mapped is not None:
        return mapped
    try:
        status = Nfsstat4(int(err.status))
    except ValueError:
        return Nfsstat4.NFS4ERR_SERVERFAULT
    return Nfsstat4.NFS4ERR_SERVERFAULT if status == OK else status


def writer_peer(client_id: bytes, *, owner: bytes | None = None, bounded: bool = True) -> str:
    """The `CallContext.peer` of a client's calls: its id string's digest, and for an
    open-owner's calls ``:`` and the digest of the owner's bytes; prefixed with
    `BOUNDED_PEER_PREFIX` when the Vfs applies edits at CLOSE (`EditBounds`); a Vfs that
    cannot is never told its writers are bounded (it would wait for a CLOSE forever)."""
    peer = (BOUNDED_PEER_PREFIX if bounded else "nfs4-client:") + (
        hashlib.sha256(client_id).hexdigest()[:24]
    )
    if owner is not None:
        peer += ":" + hashlib.sha256(owner).hexdigest()[:24]
    return peer


@dataclass
class _Compound:
    """One COMPOUND's current and saved filehandles and its caller.

    ``base`` is the call as its client (or its connection, until the client is known),
    ``owner`` the call as the open-owner an operation of it named, and ``ctx`` what the
    running operation uses (see `Nfs4Service.caller`)."""

    base: CallContext
    ctx: CallContext
    clientid: int | None = None
    owner: CallContext | None = None
    cur: FileId | None = None
    saved: FileId | None = None

    def fh(self) -> FileId:
        if self.cur is None:
            raise Fail(Nfsstat4.NFS4ERR_NOFILEHANDLE)
        return self.cur


class Nfs4Service:
    """NFSv4.0 bound to one `Vfs` (thread-safe; calls run concurrently).

    Args:
        vfs: the file system (the same as NFSv3's).
        handles: the handle codec (shared with NFSv3 and MOUNT).
        state: the client and open state; a new `Nfs4State` by default.
        write_verifier: the WRITE/COMMIT verifier when the Vfs has none of its own.
        limits: transfer sizes (maxread / maxwrite).
    """

    def __init__(
        self,
        vfs: Vfs,
        *,
        handles: HandleCodec | None = None,
        state: Nfs4State | None = None,
        write_verifier: bytes | None = None,
        limits: Nfs3Limits = DEFAULT_LIMITS,
    ) -> None:
        self.vfs = vfs
        self.handles = handles if handles is not None else HandleCodec(vfs)
        self.state = state if state is not None else Nfs4State()
        self._verifier = write_verifier if write_verifier is not None else secrets.token_bytes(8)
        self.limits = limits
        self._peers: dict[str, tuple[str, int]] = {}  # connection -> (client's peer, clientid)
        self._openers: dict[tuple[int, FileId], CallContext] = {}  # the last opener (RENAME)
        self._owner_locks: dict[tuple[int, bytes], threading.Lock] = {}
        self._lock = threading.Lock()
        self._ops: dict[OpNum4, Callable[[_Compound, Any], Nfs4Res]] = {
            OpNum4.OP_ACCESS: self.op_access,
            OpNum4.OP_CLOSE: self.op_close,
            OpNum4.OP_COMMIT: self.op_commit,
            OpNum4.OP_CREATE: self.op_create,
            OpNum4.OP_DELEGPURGE: _notsupp(OpNum4.OP_DELEGPURGE),
            OpNum4.OP_DELEGRETURN: _fails(OpNum4.OP_DELEGRETURN, Nfsstat4.NFS4ERR_BAD_STATEID),
            OpNum4.OP_GETATTR: self.op_getattr,
            OpNum4.OP_GETFH: self.op_getfh,
            OpNum4.OP_LINK: _notsupp(OpNum4.OP_LINK),
            OpNum4.OP_LOCK: self.op_lock,
            OpNum4.OP_LOCKT: self.op_lockt,
            OpNum4.OP_LOCKU: self.op_locku,
            OpNum4.OP_LOOKUP: self.op_lookup,
            OpNum4.OP_LOOKUPP: self.op_lookupp,
            OpNum4.OP_NVERIFY: self.op_nverify,
            OpNum4.OP_OPEN: self.op_open,
            OpNum4.OP_OPENATTR: _notsupp(OpNum4.OP_OPENATTR),
            OpNum4.OP_OPEN_CONFIRM: self.op_open_confirm,
            OpNum4.OP_OPEN_DOWNGRADE: self.op_open_downgrade,
            OpNum4.OP_PUTFH: self.op_putfh,
            OpNum4.OP_PUTPUBFH: self.op_putrootfh,
            OpNum4.OP_PUTROOTFH: self.op_putrootfh,
            OpNum4.OP_READ: self.op_read,
            OpNum4.OP_READDIR: self.op_readdir,
            OpNum4.OP_READLINK: _notsupp(OpNum4.OP_READLINK),
            OpNum4.OP_REMOVE: self.op_remove,
            OpNum4.OP_RENAME: self.op_rename,
            OpNum4.OP_RENEW: self.op_renew,
            OpNum4.OP_RESTOREFH: self.op_restorefh,
            OpNum4.OP_SAVEFH: self.op_savefh,
            OpNum4.OP_SECINFO: self.op_secinfo,
            OpNum4.OP_SETATTR: self.op_setattr,
            OpNum4.OP_SETCLIENTID: self.op_setclientid,
            OpNum4.OP_SETCLIENTID_CONFIRM: self.op_setclientid_confirm,
            OpNum4.OP_VERIFY: self.op_verify,
            OpNum4.OP_WRITE: self.op_write,
            OpNum4.OP_RELEASE_LOCKOWNER: self.op_release_lockowner,
            OpNum4.OP_ILLEGAL: _fails(OpNum4.OP_ILLEGAL, Nfsstat4.NFS4ERR_OP_ILLEGAL),
        }

    # ------------------------------------------------------------ COMPOUND

    def compound(self, args: Compound4Args, ctx: CallContext) -> Compound4Res:
        """Run the operations in order until one fails (RFC 7530 §15.2)."""
        if args.minorversion != 0:
            return Compound4Res(Nfsstat4.NFS4ERR_MINOR_VERS_MISMATCH, args.tag, ())
        self.expire()
        c = self._as_client(ctx)
        results: list[Nfs4Res] = []
        status = OK
        for op in args.ops:
            res = self._run(c, op)
            results.append(res)
            status = res.status
            if status != OK:
                break
        if status != OK:
            logger.debug(
                "COMPOUND %s from %s: %s %s",
                [op.op.name for op in args.ops],
                ctx.peer,
                results[-1].op.name,
                status.name,
            )
        return Compound4Res(status, args.tag, tuple(results))

    def _run(self, c: _Compound, op: Nfs4Op) -> Nfs4Res:
        c.ctx = c.owner or c.base
        if c.owner is None and op.op in _PER_FILE and c.cur is not None:
            c.ctx = self.caller(c, c.cur)
        try:
            with calling(c.ctx):
                return self._ops[op.op](c, op.args)
        except Fail as err:
            return _res(op.op, err.status)
        except StateError as err:
            return _res(op.op, err.status)
        except AttrError as err:
            return _res(op.op, err.status)
        except NfsError as err:
            return _res(op.op, v4_status(err))
        except AttrNotSupp:
            return _res(op.op, Nfsstat4.NFS4ERR_ATTRNOTSUPP)
        except XdrError:
            return _res(op.op, Nfsstat4.NFS4ERR_BADXDR)

    def expire(self) -> None:
        """Purge clients whose lease ran out; drop their opens' staged edits, unapplied."""
        for client, opens in self.state.expire():
            for st in opens:
                self._drop_edit(st, f"the lease of client {client.id!r} expired")
            with self._lock:  # forget the connections it used
                for conn in [k for k, v in self._peers.items() if v[1] == client.clientid]:
                    del self._peers[conn]
                for key in [k for k in self._owner_locks if k[0] == client.clientid]:
                    del self._owner_locks[key]
                for pair in [k for k in self._openers if k[0] == client.clientid]:
                    del self._openers[pair]

    def _drop_edit(self, st: OpenState, why: str) -> None:
        if isinstance(self.vfs, EditBounds) and st.access & o.OPEN4_SHARE_ACCESS_WRITE:
            ctx = st_ctx(st)
            if ctx is not None and self.vfs.discard(FileId(st.fid), ctx):
                logger.warning("NFSv4: an edit of file %d was dropped unapplied: %s", st.fid, why)

    def _as_client(self, ctx: CallContext) -> _Compound:
        """A COMPOUND of ``ctx`` as its client (see the module docstring); as the
        connection's own address until the client has named itself (SETCLIENTID_CONFIRM,
        RENEW, an owner, a stateid)."""
        known = self._peers.get(ctx.peer or "")
        if known is None:
            return _Compound(ctx, ctx)
        base = replace(ctx, peer=known[0])
        return _Compound(base, base, known[1])

    def _learn(self, c: _Compound, clientid: int) -> None:
        """The connection of ``c`` is client ``clientid``: its calls are that client's."""
        try:
            client = self.state.client(clientid)
        except StateError:
            return
        peer = writer_peer(client.id, bounded=isinstance(self.vfs, EditBounds))
        c.clientid = clientid
        if c.base.peer != peer:
            with self._lock:
                conn = c.base.peer
                if conn and not conn.startswith(("nfs4-client:", BOUNDED_PEER_PREFIX)):
                    self._peers[conn] = (peer, clientid)
            c.base = replace(c.base, peer=peer)
            if c.owner is None:
                c.ctx = c.base

    def _as_owner(self, c: _Compound, key: tuple[int, bytes]) -> CallContext:
        """The rest of ``c`` runs as the open-owner ``key`` (the caller's uid and gid)."""
        self._learn(c, key[0])
        client = self.state.client(key[0])
        peer = writer_peer(client.id, owner=key[1], bounded=isinstance(self.vfs, EditBounds))
        c.owner = c.ctx = replace(c.base, peer=peer)
        return c.ctx

    def caller(self, c: _Compound, fid: FileId, *, last_opener: bool = False) -> CallContext:
        """Who a call about ``fid`` that names no open-owner is (see the module docstring):
        the one owner of the caller's client with the caller's uid and gid that has
        ``fid`` open; with ``last_opener``, else the one that opened it last; else the
        client."""
        if c.owner is not None:
            return c.owner
        if c.clientid is None:
            return c.base
        who = (c.base.uid, c.base.gid)
        peers: set[str | None] = set()
        for st in self.state.opens_of(c.clientid, fid):
            opener = st_ctx(st)
            if opener is not None and (opener.uid, opener.gid) == who:
                peers.add(opener.peer)
        if len(peers) == 1:
            return replace(c.base, peer=peers.pop())
        if not peers and last_opener:
            with self._lock:
                opener = self._openers.get((c.clientid, fid))
            if opener is not None and (opener.uid, opener.gid) == who:
                return replace(c.base, peer=opener.peer)
        return c.base

    def _opened(self, c: _Compound, fid: FileId) -> None:
        """Remember that the owner of ``c`` opened ``fid`` (for a RENAME of it)."""
        if c.clientid is None or c.owner is None:
            return
        with self._lock:
            self._openers.pop((c.clientid, fid), None)
            self._openers[(c.clientid, fid)] = c.owner
            while len(self._openers) > _OPENERS_KEPT:
                del self._openers[next(iter(self._openers))]

    # ------------------------------------------------------------ filehandles

    def op_putrootfh(self, c: _Compound, _: Any) -> Nfs4Res:
        """PUTROOTFH / PUTPUBFH: the pseudo-root is the Vfs's root."""
        c.cur = self.vfs.root_dir()
        return _res(OpNum4.OP_PUTROOTFH, OK)

    def op_putfh(self, c: _Compound, a: o.PutfhArgs) -> Nfs4Res:
        """PUTFH."""
        try:
            c.cur = self.handles.decode(NfsFh3(a.object))
        except NfsError as err:
            raise Fail(
                Nfsstat4.NFS4ERR_BADHANDLE
                if err.status == Nfsstat3.NFS3ERR_BADHANDLE
                else Nfsstat4.NFS4ERR_STALE
            ) from err
        return _res(OpNum4.OP_PUTFH, OK)

    def op_getfh(self, c: _Compound, _: Any) -> Nfs4Res:
        """GETFH."""
        return _res(OpNum4.OP_GETFH, OK, o.FhRes(self.handles.encode(c.fh()).data))

    def op_savefh(self, c: _Compound, _: Any) -> Nfs4Res:
        """SAVEFH."""
        c.saved = c.fh()
        return _res(OpNum4.OP_SAVEFH, OK)

    def op_restorefh(self, c: _Compound, _: Any) -> Nfs4Res:
        """RESTOREFH."""
        if c.saved is None:
            raise Fail(Nfsstat4.NFS4ERR_RESTOREFH)
        c.cur = c.saved
        return _res(OpNum4.OP_RESTOREFH, OK)

    def _name(self, name: str) -> str:
        if not name:
            raise Fail(Nfsstat4.NFS4ERR_INVAL)
        if name in (".", "..") or "/" in name or "\0" in name:
            raise Fail(Nfsstat4.NFS4ERR_BADNAME)
        if len(name.encode("utf-8", "surrogateescape")) > self.vfs.capabilities().name_max:
            raise Fail(Nfsstat4.NFS4ERR_NAMETOOLONG)
        return name

    def _dir(self, fid: FileId) -> Fattr3:
        attrs = self.vfs.getattr(fid)
        if attrs.type != Ftype3.NF3DIR:
            raise Fail(
                Nfsstat4.NFS4ERR_SYMLINK if attrs.type == Ftype3.NF3LNK else Nfsstat4.NFS4ERR_NOTDIR
            )
        return attrs

    def op_lookup(self, c: _Compound, a: o.NameArgs) -> Nfs4Res:
        """LOOKUP."""
        fid = c.fh()
        self._dir(fid)
        c.cur = self.vfs.lookup(fid, self._name(a.name), c.ctx)
        return _res(OpNum4.OP_LOOKUP, OK)

    def op_lookupp(self, c: _Compound, _: Any) -> Nfs4Res:
        """LOOKUPP: the parent; the root has none (NOENT)."""
        fid = c.fh()
        self._dir(fid)
        if fid == self.vfs.root_dir():
            raise Fail(Nfsstat4.NFS4ERR_NOENT)
        c.cur = self.vfs.lookup(fid, "..", c.ctx)
        return _res(OpNum4.OP_LOOKUPP, OK)

    def op_secinfo(self, c: _Compound, a: o.NameArgs) -> Nfs4Res:
        """SECINFO: AUTH_SYS and AUTH_NONE; the current filehandle is consumed."""
        fid = c.fh()
        self._dir(fid)
        self.vfs.lookup(fid, self._name(a.name), c.ctx)
        c.cur = None
        return _res(OpNum4.OP_SECINFO, OK, o.SecinfoResOk((1, 0)))

    # ------------------------------------------------------------ attributes

    def fattr(self, fid: FileId, want: tuple[int, ...]) -> Fattr4:
        """The attributes of ``want`` (a bitmap4) of ``fid``."""
        attrs = self.vfs.getattr(fid)
        return self._fattr(fid, attrs, bits_of(want))

    def _fattr(self, fid: FileId, attrs: Fattr3, bits: list[int]) -> Fattr4:
        handle = self.handles.encode(fid).data if 19 in bits else b""
        values = attr_values(
            bits,
            attrs,
            handle=handle,
            caps=self.vfs.capabilities(),
            fsstat=lambda: self.vfs.fsstat(fid),
            lease_seconds=self.state.lease_seconds,
            maxread=self.limits.rtmax,
            maxwrite=self.limits.wtmax,
        )
        return encode_fattr(values)

    def op_getattr(self, c: _Compound, a: o.GetattrArgs) -> Nfs4Res:
        """GETATTR."""
        return _res(OpNum4.OP_GETATTR, OK, self.fattr(c.fh(), a.attr_request))

    def _verify(self, c: _Compound, a: o.FattrArgs) -> bool:
        want = decode_fattr(a.obj_attributes)  # ATTRNOTSUPP for unknown ones
        if 11 in want or any(b in (48, 54) for b in want):
            raise Fail(Nfsstat4.NFS4ERR_INVAL)
        have = self.fattr(c.fh(), a.obj_attributes.mask)
        return have.mask == a.obj_attributes.mask and have.vals == a.obj_attributes.vals

    def op_verify(self, c: _Compound, a: o.FattrArgs) -> Nfs4Res:
        """VERIFY: NOT_SAME unless the attributes are the file's."""
        return _res(OpNum4.OP_VERIFY, OK if self._verify(c, a) else Nfsstat4.NFS4ERR_NOT_SAME)

    def op_nverify(self, c: _Compound, a: o.FattrArgs) -> Nfs4Res:
        """NVERIFY: SAME if the attributes are the file's."""
        return _res(OpNum4.OP_NVERIFY, Nfsstat4.NFS4ERR_SAME if self._verify(c, a) else OK)

    def op_access(self, c: _Compound, a: o.AccessArgs) -> Nfs4Res:
        """ACCESS: the ACCESS4 bits are ACCESS3's."""
        fid = c.fh()
        mask = a.access & 0x3F
        granted = self.vfs.access(fid, mask, c.ctx)
        return _res(OpNum4.OP_ACCESS, OK, o.AccessResOk(mask, granted & mask))

    def _sattr(self, fattr: Fattr4) -> tuple[Sattr3, tuple[int, ...]]:
        values = decode_fattr(fattr)
        return sattr_of(values), bitmap_of(values)

    def op_setattr(self, c: _Compound, a: o.SetattrArgs) -> Nfs4Res:
        """SETATTR (a size change names an open with write access, or a special stateid)."""
        try:
            fid = c.fh()
            values = decode_fattr(a.obj_attributes)
            sattr = sattr_of(values)
            if self.vfs.capabilities().read_only:
                raise Fail(Nfsstat4.NFS4ERR_ROFS)
            if sattr.size is not None:
                st = self._io_ctx(c, a.stateid, fid, write=True)
                if st is not None:
                    st.wrote = True
            with calling(c.ctx):
                self.vfs.setattr(fid, sattr, c.ctx)
        except (Fail, StateError, AttrError) as err:
            return _res(OpNum4.OP_SETATTR, err.status, o.AttrSet(()))
        except AttrNotSupp:
            return _res(OpNum4.OP_SETATTR, Nfsstat4.NFS4ERR_ATTRNOTSUPP, o.AttrSet(()))
        except NfsError as err:
            return _res(OpNum4.OP_SETATTR, v4_status(err), o.AttrSet(()))
        return _res(OpNum4.OP_SETATTR, OK, o.AttrSet(a.obj_attributes.mask))

    # ------------------------------------------------------------ directories

    def op_readdir(self, c: _Compound, a: o.ReaddirArgs) -> Nfs4Res:
        """READDIR: entries after the cookie ("." and ".." left out), within maxcount."""
        fid = c.fh()
        self._dir(fid)
        if a.cookie in (1, 2):
            raise Fail(Nfsstat4.NFS4ERR_BAD_COOKIE)
        bits = bits_of(a.attr_request)
        budget = a.maxcount - 16  # verifier, eof, the list's end
        entries: list[o.Entry4] = []
        after = a.cookie
        eof = False
        while not eof:
            page = self.vfs.readdir(
                fid, after=after, max_entries=min(1024, self.limits.max_readdir_entries), ctx=c.ctx
            )
            stale = a.cookieverf not in (bytes(8), page.cookieverf)
            if a.cookie and after == a.cookie and stale:
                raise Fail(Nfsstat4.NFS4ERR_NOT_SAME)
            verf = page.cookieverf
            full = False
            for e in page.entries:
                if e.name in (".", ".."):
                    after = e.cookie
                    continue
                with calling(self.caller(c, e.fileid)):
                    entry = self._entry(e.fileid, e.name, e.cookie, bits)
                size = 8 + 4 + len(e.name.encode("utf-8", "surrogateescape")) + 3 + 8
                size += 4 * len(entry.attrs.mask) + 4 + len(entry.attrs.vals) + 4
                if size > budget:
                    full = True
                    break
                budget -= size
                entries.append(entry)
                after = e.cookie
            if full:
                break
            eof = page.eof
            if not page.entries:
                eof = True
        if not entries and not eof:
            raise Fail(Nfsstat4.NFS4ERR_TOOSMALL)
        return _res(OpNum4.OP_READDIR, OK, o.ReaddirResOk(verf, tuple(entries), eof))

    def _entry(self, fid: FileId, name: str, cookie: int, bits: list[int]) -> o.Entry4:
        try:
            attrs = self.vfs.getattr(fid)
            return o.Entry4(cookie, name, self._fattr(fid, attrs, bits))
        except NfsError as err:
            if 11 not in bits:
                raise
            return o.Entry4(cookie, name, encode_fattr({11: int(v4_status(err))}))

    def _cinfo(self, dir_id: FileId, before: Fattr3) -> ChangeInfo4:
        after = self.vfs.getattr(dir_id)
        return ChangeInfo4(False, change_of(before), change_of(after))

    def op_create(self, c: _Compound, a: o.CreateArgs) -> Nfs4Res:
        """CREATE: directories only (the Vfs has no symlinks or devices: NOTSUPP)."""
        dir_id = c.fh()
        before = self._dir(dir_id)
        name = self._name(a.objname)
        if a.objtype.type != NfsFtype4.NF4DIR:
            raise Fail(
                Nfsstat4.NFS4ERR_BADTYPE
                if a.objtype.type
                in (NfsFtype4.NF4REG, NfsFtype4.NF4ATTRDIR, NfsFtype4.NF4NAMEDATTR)
                else Nfsstat4.NFS4ERR_NOTSUPP
            )
        sattr, mask = self._sattr(a.createattrs)
        if self.vfs.capabilities().read_only:
            raise Fail(Nfsstat4.NFS4ERR_ROFS)
        c.cur = self.vfs.mkdir(dir_id, name, sattr, c.ctx)
        return _res(OpNum4.OP_CREATE, OK, o.CreateResOk(self._cinfo(dir_id, before), mask))

    def op_remove(self, c: _Compound, a: o.NameArgs) -> Nfs4Res:
        """REMOVE: a file or an empty directory."""
        dir_id = c.fh()
        before = self._dir(dir_id)
        name = self._name(a.name)
        if self.vfs.capabilities().read_only:
            raise Fail(Nfsstat4.NFS4ERR_ROFS)
        target_id = self.vfs.lookup(dir_id, name, c.ctx)
        target = self.vfs.getattr(target_id)
        if target.type == Ftype3.NF3DIR:
            self.vfs.rmdir(dir_id, name, c.ctx)
        else:
            self.vfs.remove(dir_id, name, self.caller(c, target_id))
        return _res(OpNum4.OP_REMOVE, OK, self._cinfo(dir_id, before))

    def op_rename(self, c: _Compound, a: o.RenameArgs) -> Nfs4Res:
        """RENAME from the saved directory to the current one (onto data.csv: the edit)."""
        to_dir = c.fh()
        if c.saved is None:
            raise Fail(Nfsstat4.NFS4ERR_NOFILEHANDLE)
        from_dir = c.saved
        src_before = self._dir(from_dir)
        dst_before = self._dir(to_dir)
        old, new = self._name(a.oldname), self._name(a.newname)
        if self.vfs.capabilities().read_only:
            raise Fail(Nfsstat4.NFS4ERR_ROFS)
        try:
            source: FileId | None = self.vfs.lookup(from_dir, old, c.ctx)
        except NfsError:
            source = None  # the Vfs's RENAME gives the error
        who = c.ctx if source is None else self.caller(c, source, last_opener=True)
        with calling(who):
            self.vfs.rename(from_dir, old, to_dir, new, who)
        return _res(
            OpNum4.OP_RENAME,
            OK,
            o.RenameResOk(self._cinfo(from_dir, src_before), self._cinfo(to_dir, dst_before)),
        )

    # ------------------------------------------------------------ clients

    def op_setclientid(self, c: _Compound, a: o.SetclientidArgs) -> Nfs4Res:
        """SETCLIENTID."""
        clientid, confirm = self.state.setclientid(a.id, a.verifier)
        return _res(OpNum4.OP_SETCLIENTID, OK, o.SetclientidResOk(clientid, confirm))

    def op_setclientid_confirm(self, c: _Compound, a: o.SetclientidConfirmArgs) -> Nfs4Res:
        """SETCLIENTID_CONFIRM: the opens of the client's earlier incarnation are dropped."""
        for st in self.state.confirm(a.clientid, a.verifier):
            self._drop_edit(st, "its client restarted (a new verifier)")
        self._learn(c, a.clientid)
        return _res(OpNum4.OP_SETCLIENTID_CONFIRM, OK)

    def op_renew(self, c: _Compound, a: o.ClientidArgs) -> Nfs4Res:
        """RENEW."""
        self.state.renew(a.clientid)
        self._learn(c, a.clientid)
        return _res(OpNum4.OP_RENEW, OK)

    # ------------------------------------------------------------ opens

    def _owner_lock(self, key: tuple[int, bytes]) -> threading.Lock:
        with self._lock:
            lock = self._owner_locks.get(key)
            if lock is None:
                lock = self._owner_locks[key] = threading.Lock()
            return lock

    def _seqid_op(
        self,
        c: _Compound,
        op: OpNum4,
        owner: OpenOwner,
        seqid: int,
        run: Callable[[], tuple[Nfs4Res, FileId | None]],
    ) -> Nfs4Res:
        """Run a seqid operation for ``owner`` once: a retransmission gets the cached reply."""
        with self._owner_lock(owner.key):
            replay = self.state.check_seqid(owner, seqid)
            if isinstance(replay, Replay):
                res, fid = replay.reply
                if fid is not None:
                    c.cur = fid
                return res  # type: ignore[no-any-return]
            try:
                res, fid = run()
            except (Fail, StateError, AttrError) as err:
                res, fid = _res(op, err.status), None
            except NfsError as err:
                res, fid = _res(op, v4_status(err)), None
            except AttrNotSupp:
                res, fid = _res(op, Nfsstat4.NFS4ERR_ATTRNOTSUPP), None
            self.state.done_seqid(owner, seqid, res.status, (res, fid))
            if fid is not None:
                c.cur = fid
            return res

    def op_open(self, c: _Compound, a: o.OpenArgs) -> Nfs4Res:
        """OPEN (claim NULL or PREVIOUS; create UNCHECKED, GUARDED or EXCLUSIVE)."""
        owner = self.state.owner(a.owner.clientid, a.owner.owner)
        ctx = self._as_owner(c, owner.key)
        with calling(ctx):
            return self._seqid_op(
                c, OpNum4.OP_OPEN, owner, a.seqid, lambda: self._open(c, a, owner)
            )

    def _open(self, c: _Compound, a: o.OpenArgs, owner: OpenOwner) -> tuple[Nfs4Res, FileId]:
        cur = c.fh()
        claim = a.claim
        created = False
        attrset: tuple[int, ...] = ()
        if claim.claim == o.CLAIM_PREVIOUS:
            fid, dir_id, before = cur, None, None
        elif claim.claim == o.CLAIM_NULL:
            dir_id = cur
            before = self._dir(dir_id)
            name = self._name(claim.file or "")
            fid, created, attrset = self._open_name(c, a, dir_id, name)
        else:
            raise Fail(Nfsstat4.NFS4ERR_NOTSUPP)  # no delegations are granted
        attrs = self.vfs.getattr(fid)
        if attrs.type == Ftype3.NF3DIR:
            raise Fail(Nfsstat4.NFS4ERR_ISDIR)
        if attrs.type == Ftype3.NF3LNK:
            raise Fail(Nfsstat4.NFS4ERR_SYMLINK)
        if attrs.type != Ftype3.NF3REG:
            raise Fail(Nfsstat4.NFS4ERR_INVAL)
        if not created:
            self._check_open_access(fid, a.share_access, c.ctx)
        if a.share_access & o.OPEN4_SHARE_ACCESS_WRITE and self.vfs.capabilities().read_only:
            raise Fail(Nfsstat4.NFS4ERR_ROFS)
        st, confirm = self.state.open(
            owner, fid, a.share_access, a.share_deny, reclaim=claim.claim == o.CLAIM_PREVIOUS
        )
        st.cred = c.ctx
        self._opened(c, fid)
        if created:
            st.wrote = True
        cinfo = (
            self._cinfo(dir_id, before)
            if dir_id is not None and before is not None
            else ChangeInfo4(False, 0, 0)
        )
        rflags = o.OPEN4_RESULT_LOCKTYPE_POSIX | (o.OPEN4_RESULT_CONFIRM if confirm else 0)
        res = o.OpenResOk(st.stateid(), cinfo, rflags, attrset)
        return _res(OpNum4.OP_OPEN, OK, res), fid

    def _open_name(
        self, c: _Compound, a: o.OpenArgs, dir_id: FileId, name: str
    ) -> tuple[FileId, bool, tuple[int, ...]]:
        how = a.openhow
        try:
            existing: FileId | None = self.vfs.lookup(dir_id, name, c.ctx)
        except NfsError as err:
            if err.status != Nfsstat3.NFS3ERR_NOENT:
                raise
            existing = None
        if how.mode is None:
            if existing is None:
                raise Fail(Nfsstat4.NFS4ERR_NOENT)
            return existing, False, ()
        if self.vfs.capabilities().read_only:
            raise Fail(Nfsstat4.NFS4ERR_ROFS)
        if how.mode == o.EXCLUSIVE4:
            verf = how.createverf or bytes(8)
            fid = self.vfs.create_exclusive(dir_id, name, verf, c.ctx)
            return fid, existing is None, ()
        sattr, mask = self._sattr(how.createattrs or Fattr4())
        if how.mode == o.GUARDED4 and existing is not None:
            raise Fail(Nfsstat4.NFS4ERR_EXIST)
        if existing is not None:
            if sattr.size is None:
                return existing, False, ()
            self._check_open_access(existing, o.OPEN4_SHARE_ACCESS_WRITE, c.ctx)
            sattr = Sattr3(size=sattr.size)
            mask = bitmap_of([4])
        fid = self.vfs.create(dir_id, name, sattr, c.ctx, guarded=how.mode == o.GUARDED4)
        return fid, existing is None, mask

    def _check_open_access(self, fid: FileId, share_access: int, ctx: CallContext) -> None:
        want = 0
        if share_access & o.OPEN4_SHARE_ACCESS_READ:
            want |= ACCESS3_READ
        if share_access & o.OPEN4_SHARE_ACCESS_WRITE:
            want |= ACCESS3_MODIFY
        granted = self.vfs.access(fid, want | ACCESS3_EXECUTE, ctx)
        # a file open for reading may be executable-only (RFC 7530 §16.16.5)
        if want & ACCESS3_READ and not granted & (ACCESS3_READ | ACCESS3_EXECUTE):
            raise Fail(Nfsstat4.NFS4ERR_ACCESS)
        if want & ACCESS3_MODIFY and not granted & ACCESS3_MODIFY:
            raise Fail(Nfsstat4.NFS4ERR_ACCESS)

    def op_open_confirm(self, c: _Compound, a: o.OpenConfirmArgs) -> Nfs4Res:
        """OPEN_CONFIRM."""
        fid = c.fh()
        owner = self.state.owner_of(a.open_stateid)
        self._as_owner(c, owner.key)

        def run() -> tuple[Nfs4Res, FileId | None]:
            st = self.state.open_confirm(a.open_stateid, fid)
            return _res(OpNum4.OP_OPEN_CONFIRM, OK, st.stateid()), None

        return self._seqid_op(c, OpNum4.OP_OPEN_CONFIRM, owner, a.seqid, run)

    def op_open_downgrade(self, c: _Compound, a: o.OpenDowngradeArgs) -> Nfs4Res:
        """OPEN_DOWNGRADE (dropping write access ends the edit, as a CLOSE does)."""
        fid = c.fh()
        owner = self.state.owner_of(a.open_stateid)
        self._as_owner(c, owner.key)

        def run() -> tuple[Nfs4Res, FileId | None]:
            had_write = self._had_write(a.open_stateid)
            st = self.state.downgrade(a.open_stateid, fid, a.share_access, a.share_deny)
            status = OK
            if had_write and not st.access & o.OPEN4_SHARE_ACCESS_WRITE:
                status = self._finish(fid, c.ctx)
            body = st.stateid() if status == OK else None
            return _res(OpNum4.OP_OPEN_DOWNGRADE, status, body), None

        return self._seqid_op(c, OpNum4.OP_OPEN_DOWNGRADE, owner, a.seqid, run)

    def _had_write(self, sid: Stateid4) -> bool:
        for st in self.state.opens():
            if st.other == sid.other:
                return bool(st.access & o.OPEN4_SHARE_ACCESS_WRITE)
        return False

    def op_close(self, c: _Compound, a: o.CloseArgs) -> Nfs4Res:
        """CLOSE: the open ends; if it could write, its edit applies now (its status)."""
        fid = c.fh()
        owner = self.state.owner_of(a.open_stateid)
        self._as_owner(c, owner.key)

        def run() -> tuple[Nfs4Res, FileId | None]:
            had_write = self._had_write(a.open_stateid)
            st = self.state.close(a.open_stateid, fid)
            status = self._finish(fid, c.ctx) if had_write else OK
            body = st.stateid() if status == OK else None
            return _res(OpNum4.OP_CLOSE, status, body), None

        return self._seqid_op(c, OpNum4.OP_CLOSE, owner, a.seqid, run)

    def _finish(self, fid: FileId, ctx: CallContext) -> Nfsstat4:
        """Apply the caller's staged edit of ``fid`` (a Vfs with `EditBounds`)."""
        if not isinstance(self.vfs, EditBounds):
            return OK
        try:
            self.vfs.finish(fid, ctx)
        except NfsError as err:
            logger.warning("NFSv4 CLOSE: the edit of %s was refused: %s", ctx.peer, err)
            return v4_status(err)
        return OK

    # ------------------------------------------------------------ byte-range locks

    @staticmethod
    def _denied(found: Conflict) -> o.Lock4Denied:
        return o.Lock4Denied(
            found.offset, found.length, 2 if found.write else 1, StateOwner4(*found.owner)
        )

    def _lock_type(self, locktype: int) -> bool:
        if locktype not in (1, 2, 3, 4):  # READ_LT WRITE_LT READW_LT WRITEW_LT
            raise Fail(Nfsstat4.NFS4ERR_INVAL)
        return locktype in (2, 4)

    def op_lock(self, c: _Compound, a: o.LockArgs) -> Nfs4Res:
        """LOCK (RFC 7530 §16.10): POSIX byte-range locks, advisory, per lock-owner."""
        fid = c.fh()
        write = self._lock_type(a.locktype)
        if a.reclaim and not self.state.in_grace():
            raise Fail(Nfsstat4.NFS4ERR_NO_GRACE)
        if not a.reclaim and self.state.in_grace():
            raise Fail(Nfsstat4.NFS4ERR_GRACE)
        owner_of_seqid: OpenOwner
        locker = a.locker.owner
        if isinstance(locker, o.OpenToLockOwner4):
            owner_of_seqid = self.state.owner_of(locker.open_stateid)
            seqid = locker.open_seqid
        else:
            ls0 = self.state.locks_of(locker.lock_stateid)
            owner_of_seqid = self.state.lock_owner(*ls0.owner)
            seqid = locker.lock_seqid
        self._learn(c, owner_of_seqid.key[0])

        def run() -> tuple[Nfs4Res, FileId | None]:
            if isinstance(locker, o.OpenToLockOwner4):
                lock_owner = self.state.lock_owner(
                    locker.lock_owner.clientid, locker.lock_owner.owner
                )
                ls = self.state.lock_state_for(locker.open_stateid, fid, lock_owner)
                self.state.done_seqid(lock_owner, locker.lock_seqid, OK, None)
            else:
                ls = self.state.locks_of(locker.lock_stateid)
                if ls.fid != fid:
                    raise Fail(Nfsstat4.NFS4ERR_BAD_STATEID)
            found = self.state.lock(ls, a.offset, a.length, write=write)
            if found is not None:
                return _res(OpNum4.OP_LOCK, Nfsstat4.NFS4ERR_DENIED, self._denied(found)), None
            return _res(OpNum4.OP_LOCK, OK, ls.stateid()), None

        return self._seqid_op(c, OpNum4.OP_LOCK, owner_of_seqid, seqid, run)

    def op_lockt(self, c: _Compound, a: o.LocktArgs) -> Nfs4Res:
        """LOCKT: whether a lock would be granted (DENIED with the lock in the way)."""
        fid = c.fh()
        write = self._lock_type(a.locktype)
        self.state.client(a.owner.clientid)
        found = self.state.test_lock(
            fid, (a.owner.clientid, a.owner.owner), a.offset, a.length, write=write
        )
        if found is not None:
            return _res(OpNum4.OP_LOCKT, Nfsstat4.NFS4ERR_DENIED, self._denied(found))
        return _res(OpNum4.OP_LOCKT, OK)

    def op_locku(self, c: _Compound, a: o.LockuArgs) -> Nfs4Res:
        """LOCKU."""
        fid = c.fh()
        self._lock_type(a.locktype)
        ls = self.state.locks_of(a.lock_stateid)
        owner = self.state.lock_owner(*ls.owner)

        def run() -> tuple[Nfs4Res, FileId | None]:
            current = self.state.locks_of(a.lock_stateid)
            if current.fid != fid:
                raise Fail(Nfsstat4.NFS4ERR_BAD_STATEID)
            self.state.unlock(current, a.offset, a.length)
            return _res(OpNum4.OP_LOCKU, OK, current.stateid()), None

        return self._seqid_op(c, OpNum4.OP_LOCKU, owner, a.seqid, run)

    def op_release_lockowner(self, c: _Compound, a: o.OwnerArgs) -> Nfs4Res:
        """RELEASE_LOCKOWNER."""
        self.state.release_lock_owner(a.lock_owner.clientid, a.lock_owner.owner)
        return _res(OpNum4.OP_RELEASE_LOCKOWNER, OK)

    # ------------------------------------------------------------ I/O

    def _io_ctx(self, c: _Compound, sid: Stateid4, fid: FileId, *, write: bool) -> OpenState | None:
        """The open ``sid`` names (None: a special stateid); the call runs as its owner."""
        st = self.state.for_io(sid, fid, write=write)
        if st is not None:
            self._as_owner(c, st.owner)
        return st

    def op_read(self, c: _Compound, a: o.ReadArgs) -> Nfs4Res:
        """READ."""
        fid = c.fh()
        attrs = self.vfs.getattr(fid)
        if attrs.type == Ftype3.NF3DIR:
            raise Fail(Nfsstat4.NFS4ERR_ISDIR)
        if attrs.type != Ftype3.NF3REG:
            raise Fail(Nfsstat4.NFS4ERR_INVAL)
        self._io_ctx(c, a.stateid, fid, write=False)
        with calling(c.ctx):
            data, eof = self.vfs.read(fid, a.offset, min(a.count, self.limits.rtmax), c.ctx)
        return _res(OpNum4.OP_READ, OK, o.ReadResOk(eof, data))

    def _write_verifier(self) -> bytes:
        own = getattr(self.vfs, "write_verifier", None)
        if own is not None:
            verf: bytes = own()
            return verf
        return self._verifier

    def op_write(self, c: _Compound, a: o.WriteArgs) -> Nfs4Res:
        """WRITE: staged for the open's writer (applied at its CLOSE by a staging Vfs)."""
        fid = c.fh()
        if self.vfs.capabilities().read_only:
            raise Fail(Nfsstat4.NFS4ERR_ROFS)
        if a.stable not in (o.UNSTABLE4, o.DATA_SYNC4, o.FILE_SYNC4):
            raise Fail(Nfsstat4.NFS4ERR_INVAL)
        st = self._io_ctx(c, a.stateid, fid, write=True)
        if st is not None:
            st.wrote = True
        with calling(c.ctx):
            count, committed = self.vfs.write(fid, a.offset, a.data, StableHow(a.stable), c.ctx)
        return _res(
            OpNum4.OP_WRITE, OK, o.WriteResOk(count, int(committed), self._write_verifier())
        )

    def op_commit(self, c: _Compound, a: o.CommitArgs) -> Nfs4Res:
        """COMMIT: durability only, of the client's writes of the file (it names no
        owner): for each owner of the client holding it open for writing, and for the
        client (writes with a special stateid); on a connection whose client is not
        known yet (a reconnect), for every owner holding it open for writing, as the
        reply promises durability. The first error is the COMMIT's."""
        fid = c.fh()
        writers = [c.owner or c.base]
        if c.owner is None:
            for st in self.state.opens_of(c.clientid, fid):
                opener = st_ctx(st)
                if st.access & o.OPEN4_SHARE_ACCESS_WRITE and opener is not None:
                    writers.append(replace(c.base, cred=opener.cred, peer=opener.peer))
        failed: NfsError | None = None
        for ctx in {(w.peer, w.uid, w.gid): w for w in reversed(writers)}.values():
            try:
                with calling(ctx):
                    self.vfs.commit(fid, a.offset, a.count, ctx)
            except NfsError as err:
                failed = failed or err
        if failed is not None:
            raise failed
        return _res(OpNum4.OP_COMMIT, OK, o.VerfRes(self._write_verifier()))


def st_ctx(st: OpenState) -> CallContext | None:
    """The writer context an open was made with."""
    ctx = getattr(st, "cred", None)
    return ctx if isinstance(ctx, CallContext) else None


def _res(op: OpNum4, status: Nfsstat4, body: Any = None) -> Nfs4Res:
    if body is None and status == OK:
        want = o.body_type(op, status)
        if want is o.AttrSet:
            body = o.AttrSet(())
    return Nfs4Res(op, status, body)


def _fails(op: OpNum4, status: Nfsstat4) -> Callable[[_Compound, Any], Nfs4Res]:
    def run(c: _Compound, _: Any) -> Nfs4Res:
        return _res(op, status)

    return run


def _notsupp(op: OpNum4) -> Callable[[_Compound, Any], Nfs4Res]:
    return _fails(op, Nfsstat4.NFS4ERR_NOTSUPP)


def nfs4_program(service: Nfs4Service) -> RpcProgram:
    """Return the NFS program 100003 version 4: NULL and COMPOUND (RFC 7530 §16.1-2)."""

    def null(_: Any, ctx: CallContext) -> Void:
        return Void()

    def compound(args: Compound4Args, ctx: CallContext) -> Compound4Res:
        return service.compound(args, ctx)

    return RpcProgram(
        NFS_PROGRAM,
        NFS_V4,
        {
            0: RpcProcedure("NFSPROC4_NULL", Void.unpack, null),
            1: RpcProcedure("NFSPROC4_COMPOUND", Compound4Args.unpack, compound),
        },
    )
