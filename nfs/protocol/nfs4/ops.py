"""NFSv4.0 COMPOUND (RFC 7530 §15, §16; XDR in RFC 7531): each operation's arguments
and results, and the COMPOUND4args / COMPOUND4res that carry them.

An argument is `Nfs4Op(op, args)` with ``args`` of the type `ARG_TYPES` gives for ``op``;
a result is `Nfs4Res(op, status, body)` where ``body`` is the arm the status selects
(`RES_OK` for NFS4_OK, `RES_ERR` for the few error arms with data, `RES_ALWAYS` for
SETATTR's bitmap, which follows every status). An operation number this server does not
know ends the argument array as OP_ILLEGAL (RFC 7530 §15.2: the rest cannot be decoded).

Sans-IO and pure: imports only `nfs.protocol.xdr`, `nfs.protocol.nfs3.codec` and `nfs.protocol.nfs4.types`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from nfs.protocol.nfs3.codec import (
    BOOL,
    UHYPER,
    UINT,
    Codec,
    XdrStruct,
    fopaque,
    list_of,
    opaque,
    string,
)
from nfs.protocol.nfs4.types import (
    BITMAP,
    MAX_NAME,
    NFS4_FHSIZE,
    NFS4_OPAQUE_LIMIT,
    ChangeInfo4,
    Fattr4,
    NfsFtype4,
    Nfsstat4,
    OpNum4,
    Specdata4,
    Stateid4,
    StateOwner4,
)
from nfs.protocol.xdr import Packer, Unpacker, XdrError

__all__ = [
    "ARG_TYPES",
    "RES_ALWAYS",
    "RES_ERR",
    "RES_OK",
    "Compound4Args",
    "Compound4Res",
    "Nfs4Op",
    "Nfs4Res",
]

COMPONENT: Final = string(MAX_NAME)
VERF: Final = fopaque(8)
FH: Final = opaque(NFS4_FHSIZE)

# share_access / share_deny (RFC 7530 §16.16)
OPEN4_SHARE_ACCESS_READ: Final = 1
OPEN4_SHARE_ACCESS_WRITE: Final = 2
OPEN4_SHARE_ACCESS_BOTH: Final = 3
OPEN4_SHARE_DENY_NONE: Final = 0
OPEN4_SHARE_DENY_BOTH: Final = 3
OPEN4_RESULT_CONFIRM: Final = 0x2
OPEN4_RESULT_LOCKTYPE_POSIX: Final = 0x4
# opentype4, createmode4, open_claim_type4
OPEN4_NOCREATE: Final = 0
OPEN4_CREATE: Final = 1
UNCHECKED4: Final = 0
GUARDED4: Final = 1
EXCLUSIVE4: Final = 2
CLAIM_NULL: Final = 0
CLAIM_PREVIOUS: Final = 1
CLAIM_DELEGATE_CUR: Final = 2
CLAIM_DELEGATE_PREV: Final = 3
# stable_how4 (RFC 7530 §16.36)
UNSTABLE4: Final = 0
DATA_SYNC4: Final = 1
FILE_SYNC4: Final = 2
# ACCESS4 bits (RFC 7530 §16.1): the same values as ACCESS3


@dataclass(frozen=True)
class Void(XdrStruct):
    """No arguments."""


# ---------------------------------------------------------------- unions


@dataclass(frozen=True)
class CreateType4:
    """createtype4 (RFC 7530 §16.4): the object type; a symlink's text, a device's numbers."""

    type: NfsFtype4
    linkdata: str | None = None
    devdata: Specdata4 | None = None

    def pack(self, p: Packer) -> None:
        """Append the discriminant and its arm."""
        p.pack_enum(self.type)
        if self.type == NfsFtype4.NF4LNK:
            if self.linkdata is None:
                raise XdrError("NF4LNK needs linkdata")
            p.pack_string(self.linkdata, MAX_NAME)
        elif self.type in (NfsFtype4.NF4BLK, NfsFtype4.NF4CHR):
            if self.devdata is None:
                raise XdrError("a device needs devdata")
            self.devdata.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> CreateType4:
        """Read a createtype4."""
        t = u.unpack_enum(NfsFtype4)
        if t == NfsFtype4.NF4LNK:
            return cls(t, linkdata=u.unpack_string(MAX_NAME))
        if t in (NfsFtype4.NF4BLK, NfsFtype4.NF4CHR):
            return cls(t, devdata=Specdata4.unpack(u))
        return cls(t)


@dataclass(frozen=True)
class OpenFlag4:
    """openflag4 + createhow4 (RFC 7530 §16.16): no create, or create with a mode.

    ``mode`` is None for OPEN4_NOCREATE; UNCHECKED4 / GUARDED4 carry ``createattrs``,
    EXCLUSIVE4 carries ``createverf``.
    """

    mode: int | None = None
    createattrs: Fattr4 | None = None
    createverf: bytes | None = None

    def pack(self, p: Packer) -> None:
        """Append opentype4 and, for a create, the createhow4."""
        if self.mode is None:
            p.pack_uint(OPEN4_NOCREATE)
            return
        p.pack_uint(OPEN4_CREATE)
        p.pack_uint(self.mode)
        if self.mode in (UNCHECKED4, GUARDED4):
            (self.createattrs or Fattr4()).pack(p)
        elif self.mode == EXCLUSIVE4:
            p.pack_fopaque(8, self.createverf if self.createverf is not None else bytes(8))
        else:
            raise XdrError(f"bad createmode4 {self.mode}")

    @classmethod
    def unpack(cls, u: Unpacker) -> OpenFlag4:
        """Read an openflag4."""
        kind = u.unpack_uint()
        if kind == OPEN4_NOCREATE:
            return cls()
        if kind != OPEN4_CREATE:
            raise XdrError(f"bad opentype4 {kind}")
        mode = u.unpack_uint()
        if mode in (UNCHECKED4, GUARDED4):
            return cls(mode, createattrs=Fattr4.unpack(u))
        if mode == EXCLUSIVE4:
            return cls(mode, createverf=u.unpack_fopaque(8))
        raise XdrError(f"bad createmode4 {mode}")


@dataclass(frozen=True)
class OpenClaim4:
    """open_claim4 (RFC 7530 §16.16): CLAIM_NULL (a name), CLAIM_PREVIOUS (a reclaim after
    a restart, of the current filehandle), or the delegation claims."""

    claim: int
    file: str | None = None
    delegate_type: int | None = None
    delegate_stateid: Stateid4 | None = None

    def pack(self, p: Packer) -> None:
        """Append the claim type and its arm."""
        p.pack_uint(self.claim)
        if self.claim == CLAIM_PREVIOUS:
            p.pack_uint(self.delegate_type or 0)
            return
        if self.claim == CLAIM_DELEGATE_CUR:
            if self.delegate_stateid is None:
                raise XdrError("CLAIM_DELEGATE_CUR needs a stateid")
            self.delegate_stateid.pack(p)
        elif self.claim not in (CLAIM_NULL, CLAIM_DELEGATE_PREV):
            raise XdrError(f"bad open_claim_type4 {self.claim}")
        if self.file is None:
            raise XdrError("the claim needs a file name")
        p.pack_string(self.file, MAX_NAME)

    @classmethod
    def unpack(cls, u: Unpacker) -> OpenClaim4:
        """Read an open_claim4."""
        claim = u.unpack_uint()
        if claim == CLAIM_PREVIOUS:
            return cls(claim, delegate_type=u.unpack_uint())
        if claim == CLAIM_DELEGATE_CUR:
            sid = Stateid4.unpack(u)
            return cls(claim, file=u.unpack_string(MAX_NAME), delegate_stateid=sid)
        if claim in (CLAIM_NULL, CLAIM_DELEGATE_PREV):
            return cls(claim, file=u.unpack_string(MAX_NAME))
        raise XdrError(f"bad open_claim_type4 {claim}")


@dataclass(frozen=True)
class OpenToLockOwner4(XdrStruct):
    """open_to_lock_owner4 (RFC 7530 §16.10)."""

    open_seqid: int
    open_stateid: Stateid4
    lock_seqid: int
    lock_owner: StateOwner4
    XDR = (UINT, Stateid4, UINT, StateOwner4)


@dataclass(frozen=True)
class ExistLockOwner4(XdrStruct):
    """exist_lock_owner4 (RFC 7530 §16.10)."""

    lock_stateid: Stateid4
    lock_seqid: int
    XDR = (Stateid4, UINT)


@dataclass(frozen=True)
class Locker4:
    """locker4 (RFC 7530 §16.10): a new lock-owner (from an open) or an existing one."""

    owner: OpenToLockOwner4 | ExistLockOwner4

    def pack(self, p: Packer) -> None:
        """Append new_lock_owner and its arm."""
        p.pack_bool(isinstance(self.owner, OpenToLockOwner4))
        self.owner.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Locker4:
        """Read a locker4."""
        if u.unpack_bool():
            return cls(OpenToLockOwner4.unpack(u))
        return cls(ExistLockOwner4.unpack(u))


# ---------------------------------------------------------------- arguments


@dataclass(frozen=True)
class AccessArgs(XdrStruct):
    """ACCESS4args."""

    access: int
    XDR = (UINT,)


@dataclass(frozen=True)
class CloseArgs(XdrStruct):
    """CLOSE4args."""

    seqid: int
    open_stateid: Stateid4
    XDR = (UINT, Stateid4)


@dataclass(frozen=True)
class CommitArgs(XdrStruct):
    """COMMIT4args."""

    offset: int
    count: int
    XDR = (UHYPER, UINT)


@dataclass(frozen=True)
class CreateArgs(XdrStruct):
    """CREATE4args."""

    objtype: CreateType4
    objname: str
    createattrs: Fattr4
    XDR = (CreateType4, COMPONENT, Fattr4)


@dataclass(frozen=True)
class ClientidArgs(XdrStruct):
    """DELEGPURGE4args / RENEW4args: a clientid4."""

    clientid: int
    XDR = (UHYPER,)


@dataclass(frozen=True)
class StateidArgs(XdrStruct):
    """DELEGRETURN4args: a stateid4."""

    stateid: Stateid4
    XDR = (Stateid4,)


@dataclass(frozen=True)
class GetattrArgs(XdrStruct):
    """GETATTR4args."""

    attr_request: tuple[int, ...]
    XDR = (BITMAP,)


@dataclass(frozen=True)
class NameArgs(XdrStruct):
    """LINK4args / LOOKUP4args / REMOVE4args / SECINFO4args: one component4."""

    name: str
    XDR = (COMPONENT,)


@dataclass(frozen=True)
class LockArgs(XdrStruct):
    """LOCK4args."""

    locktype: int
    reclaim: bool
    offset: int
    length: int
    locker: Locker4
    XDR = (UINT, BOOL, UHYPER, UHYPER, Locker4)


@dataclass(frozen=True)
class LocktArgs(XdrStruct):
    """LOCKT4args."""

    locktype: int
    offset: int
    length: int
    owner: StateOwner4
    XDR = (UINT, UHYPER, UHYPER, StateOwner4)


@dataclass(frozen=True)
class LockuArgs(XdrStruct):
    """LOCKU4args."""

    locktype: int
    seqid: int
    lock_stateid: Stateid4
    offset: int
    length: int
    XDR = (UINT, UINT, Stateid4, UHYPER, UHYPER)


@dataclass(frozen=True)
class FattrArgs(XdrStruct):
    """NVERIFY4args / VERIFY4args."""

    obj_attributes: Fattr4
    XDR = (Fattr4,)


@dataclass(frozen=True)
class OpenArgs(XdrStruct):
    """OPEN4args."""

    seqid: int
    share_access: int
    share_deny: int
    owner: StateOwner4
    openhow: OpenFlag4
    claim: OpenClaim4
    XDR = (UINT, UINT, UINT, StateOwner4, OpenFlag4, OpenClaim4)


@dataclass(frozen=True)
class OpenattrArgs(XdrStruct):
    """OPENATTR4args."""

    createdir: bool
    XDR = (BOOL,)


@dataclass(frozen=True)
class OpenConfirmArgs(XdrStruct):
    """OPEN_CONFIRM4args."""

    open_stateid: Stateid4
    seqid: int
    XDR = (Stateid4, UINT)


@dataclass(frozen=True)
class OpenDowngradeArgs(XdrStruct):
    """OPEN_DOWNGRADE4args."""

    open_stateid: Stateid4
    seqid: int
    share_access: int
    share_deny: int
    XDR = (Stateid4, UINT, UINT, UINT)


@dataclass(frozen=True)
class PutfhArgs(XdrStruct):
    """PUTFH4args."""

    object: bytes
    XDR = (FH,)


@dataclass(frozen=True)
class ReadArgs(XdrStruct):
    """READ4args."""

    stateid: Stateid4
    offset: int
    count: int
    XDR = (Stateid4, UHYPER, UINT)


@dataclass(frozen=True)
class ReaddirArgs(XdrStruct):
    """READDIR4args."""

    cookie: int
    cookieverf: bytes
    dircount: int
    maxcount: int
    attr_request: tuple[int, ...]
    XDR = (UHYPER, VERF, UINT, UINT, BITMAP)


@dataclass(frozen=True)
class RenameArgs(XdrStruct):
    """RENAME4args."""

    oldname: str
    newname: str
    XDR = (COMPONENT, COMPONENT)


@dataclass(frozen=True)
class SetattrArgs(XdrStruct):
    """SETATTR4args."""

    stateid: Stateid4
    obj_attributes: Fattr4
    XDR = (Stateid4, Fattr4)


@dataclass(frozen=True)
class SetclientidArgs(XdrStruct):
    """SETCLIENTID4args: nfs_client_id4, cb_client4 (program, netid, address), ident."""

    verifier: bytes
    id: bytes
    cb_program: int
    r_netid: str
    r_addr: str
    callback_ident: int
    XDR = (VERF, opaque(NFS4_OPAQUE_LIMIT), UINT, string(), string(), UINT)


@dataclass(frozen=True)
class SetclientidConfirmArgs(XdrStruct):
    """SETCLIENTID_CONFIRM4args."""

    clientid: int
    verifier: bytes
    XDR = (UHYPER, VERF)


@dataclass(frozen=True)
class WriteArgs(XdrStruct):
    """WRITE4args."""

    stateid: Stateid4
    offset: int
    stable: int
    data: bytes
    XDR = (Stateid4, UHYPER, UINT, opaque())


@dataclass(frozen=True)
class OwnerArgs(XdrStruct):
    """RELEASE_LOCKOWNER4args."""

    lock_owner: StateOwner4
    XDR = (StateOwner4,)


O = OpNum4  # noqa: E741
ARG_TYPES: Final[dict[OpNum4, type[Any]]] = {
    O.OP_ACCESS: AccessArgs,
    O.OP_CLOSE: CloseArgs,
    O.OP_COMMIT: CommitArgs,
    O.OP_CREATE: CreateArgs,
    O.OP_DELEGPURGE: ClientidArgs,
    O.OP_DELEGRETURN: StateidArgs,
    O.OP_GETATTR: GetattrArgs,
    O.OP_GETFH: Void,
    O.OP_LINK: NameArgs,
    O.OP_LOCK: LockArgs,
    O.OP_LOCKT: LocktArgs,
    O.OP_LOCKU: LockuArgs,
    O.OP_LOOKUP: NameArgs,
    O.OP_LOOKUPP: Void,
    O.OP_NVERIFY: FattrArgs,
    O.OP_OPEN: OpenArgs,
    O.OP_OPENATTR: OpenattrArgs,
    O.OP_OPEN_CONFIRM: OpenConfirmArgs,
    O.OP_OPEN_DOWNGRADE: OpenDowngradeArgs,
    O.OP_PUTFH: PutfhArgs,
    O.OP_PUTPUBFH: Void,
    O.OP_PUTROOTFH: Void,
    O.OP_READ: ReadArgs,
    O.OP_READDIR: ReaddirArgs,
    O.OP_READLINK: Void,
    O.OP_REMOVE: NameArgs,
    O.OP_RENAME: RenameArgs,
    O.OP_RENEW: ClientidArgs,
    O.OP_RESTOREFH: Void,
    O.OP_SAVEFH: Void,
    O.OP_SECINFO: NameArgs,
    O.OP_SETATTR: SetattrArgs,
    O.OP_SETCLIENTID: SetclientidArgs,
    O.OP_SETCLIENTID_CONFIRM: SetclientidConfirmArgs,
    O.OP_VERIFY: FattrArgs,
    O.OP_WRITE: WriteArgs,
    O.OP_RELEASE_LOCKOWNER: OwnerArgs,
    O.OP_ILLEGAL: Void,
}
"""The argument type of each operation (RFC 7531 nfs_argop4)."""


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class AccessResOk(XdrStruct):
    """ACCESS4resok."""

    supported: int
    access: int
    XDR = (UINT, UINT)


@dataclass(frozen=True)
class VerfRes(XdrStruct):
    """COMMIT4resok."""

    writeverf: bytes
    XDR = (VERF,)


@dataclass(frozen=True)
class CreateResOk(XdrStruct):
    """CREATE4resok."""

    cinfo: ChangeInfo4
    attrset: tuple[int, ...]
    XDR = (ChangeInfo4, BITMAP)


@dataclass(frozen=True)
class FhRes(XdrStruct):
    """GETFH4resok."""

    object: bytes
    XDR = (FH,)


@dataclass(frozen=True)
class Lock4Denied(XdrStruct):
    """LOCK4denied."""

    offset: int
    length: int
    locktype: int
    owner: StateOwner4
    XDR = (UHYPER, UHYPER, UINT, StateOwner4)


_DELEGATE_NONE: Final[Codec[int]] = Codec(
    lambda p, v: p.pack_uint(v) if v == 0 else _raise(XdrError("only OPEN_DELEGATE_NONE")),
    lambda u: _check_zero(u.unpack_uint()),
)


def _raise(err: Exception) -> None:
    raise err


def _check_zero(value: int) -> int:
    if value != 0:
        raise XdrError(f"open_delegation_type4 {value}: only OPEN_DELEGATE_NONE is supported")
    return value


@dataclass(frozen=True)
class OpenResOk(XdrStruct):
    """OPEN4resok (with open_delegation4 OPEN_DELEGATE_NONE: no delegations are granted)."""

    stateid: Stateid4
    cinfo: ChangeInfo4
    rflags: int
    attrset: tuple[int, ...]
    delegation: int = 0
    XDR = (Stateid4, ChangeInfo4, UINT, BITMAP, _DELEGATE_NONE)


@dataclass(frozen=True)
class ReadResOk(XdrStruct):
    """READ4resok (``data`` may be a view of the Vfs's bytes: it is sent without a copy)."""

    eof: bool
    data: bytes | memoryview
    XDR = (BOOL, opaque())


@dataclass(frozen=True)
class Entry4(XdrStruct):
    """entry4 (without its next pointer: the list codec chains them)."""

    cookie: int
    name: str
    attrs: Fattr4
    XDR = (UHYPER, COMPONENT, Fattr4)


@dataclass(frozen=True)
class ReaddirResOk(XdrStruct):
    """READDIR4resok."""

    cookieverf: bytes
    entries: tuple[Entry4, ...]
    eof: bool
    XDR = (VERF, list_of(Entry4), BOOL)


@dataclass(frozen=True)
class LinkText(XdrStruct):
    """READLINK4resok."""

    link: str
    XDR = (string(MAX_NAME),)


@dataclass(frozen=True)
class RenameResOk(XdrStruct):
    """RENAME4resok."""

    source_cinfo: ChangeInfo4
    target_cinfo: ChangeInfo4
    XDR = (ChangeInfo4, ChangeInfo4)


def _pack_flavor(p: Packer, flavor: int) -> None:
    if flavor == 6:
        raise XdrError("RPCSEC_GSS flavors are not offered")
    p.pack_uint(flavor)


def _unpack_flavor(u: Unpacker) -> int:
    flavor = u.unpack_uint()
    if flavor == 6:
        raise XdrError("RPCSEC_GSS flavors are not offered")
    return flavor


@dataclass(frozen=True)
class SecinfoResOk(XdrStruct):
    """SECINFO4resok: the flavors (AUTH_NONE, AUTH_SYS; no RPCSEC_GSS arms)."""

    flavors: tuple[int, ...]
    XDR = (
        Codec(
            lambda p, v: p.pack_array(v, lambda f: _pack_flavor(p, f)),
            lambda u: tuple(u.unpack_array(lambda: _unpack_flavor(u), 16)),
        ),
    )


@dataclass(frozen=True)
class AttrSet(XdrStruct):
    """SETATTR4res's attrsset (sent whatever the status)."""

    attrsset: tuple[int, ...]
    XDR = (BITMAP,)


@dataclass(frozen=True)
class SetclientidResOk(XdrStruct):
    """SETCLIENTID4resok."""

    clientid: int
    setclientid_confirm: bytes
    XDR = (UHYPER, VERF)


@dataclass(frozen=True)
class ClientAddr4(XdrStruct):
    """clientaddr4 (SETCLIENTID4res for NFS4ERR_CLID_INUSE)."""

    r_netid: str
    r_addr: str
    XDR = (string(), string())


@dataclass(frozen=True)
class WriteResOk(XdrStruct):
    """WRITE4resok."""

    count: int
    committed: int
    writeverf: bytes
    XDR = (UINT, UINT, VERF)


RES_OK: Final[dict[OpNum4, type[Any]]] = {
    O.OP_ACCESS: AccessResOk,
    O.OP_CLOSE: Stateid4,
    O.OP_COMMIT: VerfRes,
    O.OP_CREATE: CreateResOk,
    O.OP_GETATTR: Fattr4,
    O.OP_GETFH: FhRes,
    O.OP_LINK: ChangeInfo4,
    O.OP_LOCK: Stateid4,
    O.OP_LOCKU: Stateid4,
    O.OP_OPEN: OpenResOk,
    O.OP_OPEN_CONFIRM: Stateid4,
    O.OP_OPEN_DOWNGRADE: Stateid4,
    O.OP_READ: ReadResOk,
    O.OP_READDIR: ReaddirResOk,
    O.OP_READLINK: LinkText,
    O.OP_REMOVE: ChangeInfo4,
    O.OP_RENAME: RenameResOk,
    O.OP_SECINFO: SecinfoResOk,
    O.OP_SETCLIENTID: SetclientidResOk,
    O.OP_WRITE: WriteResOk,
}
"""The NFS4_OK body of each operation that has one (RFC 7531 nfs_resop4)."""

RES_ERR: Final[dict[tuple[OpNum4, Nfsstat4], type[Any]]] = {
    (O.OP_LOCK, Nfsstat4.NFS4ERR_DENIED): Lock4Denied,
    (O.OP_LOCKT, Nfsstat4.NFS4ERR_DENIED): Lock4Denied,
    (O.OP_SETCLIENTID, Nfsstat4.NFS4ERR_CLID_INUSE): ClientAddr4,
}
"""Error statuses whose result carries data."""

RES_ALWAYS: Final[dict[OpNum4, type[Any]]] = {O.OP_SETATTR: AttrSet}
"""Bodies sent whatever the status."""


def body_type(op: OpNum4, status: Nfsstat4) -> type[Any] | None:
    """Return the body type of ``op``'s result with ``status`` (None: status only)."""
    always = RES_ALWAYS.get(op)
    if always is not None:
        return always
    if status == Nfsstat4.NFS4_OK:
        return RES_OK.get(op)
    return RES_ERR.get((op, status))


# ---------------------------------------------------------------- COMPOUND


@dataclass(frozen=True)
class Nfs4Op:
    """nfs_argop4: an operation and its arguments (of type ``ARG_TYPES[op]``)."""

    op: OpNum4
    args: Any

    def pack(self, p: Packer) -> None:
        """Append the operation number and its arguments."""
        if not isinstance(self.args, ARG_TYPES[self.op]):
            raise XdrError(f"{self.op.name} needs {ARG_TYPES[self.op].__name__}")
        p.pack_uint(self.op)
        self.args.pack(p)


@dataclass(frozen=True)
class Nfs4Res:
    """nfs_resop4: an operation's status and the body that status selects (`body_type`)."""

    op: OpNum4
    status: Nfsstat4
    body: Any = None

    def pack(self, p: Packer) -> None:
        """Append the operation number, the status and the body.

        Raises:
            XdrError: a body that is not of the type the status selects.
        """
        want = body_type(self.op, self.status)
        if (want is None) != (self.body is None) or (
            want is not None and not isinstance(self.body, want)
        ):
            raise XdrError(f"{self.op.name} {self.status.name}: bad body {self.body!r}")
        p.pack_uint(self.op)
        p.pack_uint(self.status)
        if self.body is not None:
            self.body.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Nfs4Res:
        """Read one result."""
        op = u.unpack_enum(OpNum4)
        status = u.unpack_enum(Nfsstat4)
        want = body_type(op, status)
        return cls(op, status, want.unpack(u) if want is not None else None)


@dataclass(frozen=True)
class Compound4Args:
    """COMPOUND4args (RFC 7530 §16.2.1).

    An operation number this server does not know ends `ops` with an OP_ILLEGAL
    (its arguments cannot be skipped); the server answers NFS4ERR_OP_ILLEGAL there.
    """

    tag: str
    minorversion: int
    ops: tuple[Nfs4Op, ...]

    def pack(self, p: Packer) -> None:
        """Append the tag, the minor version and the operations."""
        p.pack_string(self.tag, NFS4_OPAQUE_LIMIT)
        p.pack_uint(self.minorversion)
        p.pack_array(self.ops, lambda op: op.pack(p))

    @classmethod
    def unpack(cls, u: Unpacker) -> Compound4Args:
        """Read a COMPOUND4args."""
        tag = u.unpack_string(NFS4_OPAQUE_LIMIT)
        minor = u.unpack_uint()
        n = u.unpack_uint()
        if n > u.remaining():
            raise XdrError(f"COMPOUND of {n} operations exceeds the data left")
        ops: list[Nfs4Op] = []
        for _ in range(n):
            raw = u.unpack_uint()
            try:
                op = OpNum4(raw)
            except ValueError:
                ops.append(Nfs4Op(OpNum4.OP_ILLEGAL, Void()))
                u.rest()  # the rest cannot be decoded
                break
            ops.append(Nfs4Op(op, ARG_TYPES[op].unpack(u)))
            if op == OpNum4.OP_ILLEGAL:
                u.rest()
                break
        return cls(tag, minor, tuple(ops))


@dataclass(frozen=True)
class Compound4Res:
    """COMPOUND4res (RFC 7530 §16.2.2): the status of the last operation run, the tag,
    and one result per operation run (up to the first that failed)."""

    status: Nfsstat4
    tag: str
    results: tuple[Nfs4Res, ...]

    def pack(self, p: Packer) -> None:
        """Append the status, the tag and the results."""
        p.pack_uint(self.status)
        p.pack_string(self.tag, NFS4_OPAQUE_LIMIT)
        p.pack_array(self.results, lambda r: r.pack(p))

    @classmethod
    def unpack(cls, u: Unpacker) -> Compound4Res:
        """Read a COMPOUND4res."""
        status = u.unpack_enum(Nfsstat4)
        tag = u.unpack_string(NFS4_OPAQUE_LIMIT)
        return cls(status, tag, tuple(u.unpack_array(lambda: Nfs4Res.unpack(u))))


__all__ += [
    "AccessArgs",
    "AccessResOk",
    "AttrSet",
    "ClientAddr4",
    "ClientidArgs",
    "CloseArgs",
    "CommitArgs",
    "CreateArgs",
    "CreateResOk",
    "CreateType4",
    "Entry4",
    "ExistLockOwner4",
    "FattrArgs",
    "FhRes",
    "GetattrArgs",
    "LinkText",
    "Lock4Denied",
    "LockArgs",
    "Locker4",
    "LocktArgs",
    "LockuArgs",
    "NameArgs",
    "OpenArgs",
    "OpenClaim4",
    "OpenConfirmArgs",
    "OpenDowngradeArgs",
    "OpenFlag4",
    "OpenResOk",
    "OpenToLockOwner4",
    "OpenattrArgs",
    "OwnerArgs",
    "PutfhArgs",
    "ReadArgs",
    "ReadResOk",
    "ReaddirArgs",
    "ReaddirResOk",
    "RenameArgs",
    "RenameResOk",
    "SecinfoResOk",
    "SetattrArgs",
    "SetclientidArgs",
    "SetclientidConfirmArgs",
    "SetclientidResOk",
    "StateidArgs",
    "VerfRes",
    "Void",
    "WriteArgs",
    "WriteResOk",
    "body_type",
]
