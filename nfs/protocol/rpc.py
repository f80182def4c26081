"""ONC RPC version 2 (RFC 5531): call headers, credentials, replies, dispatch.

Sans-IO: `Dispatcher.handle(record, conn)` takes one RPC record (already
reassembled by `nfs.protocol.record.RecordReader`) and returns the reply record, or
``None`` when nothing should be sent. Programs (MOUNT, NFS, portmap) register an
`RpcProgram`: a table of `RpcProcedure` (decode args, run, result to pack).

Non-idempotent calls go through a duplicate-request cache when the dispatcher is given
one (`nfs.protocol.drc.DuplicateRequestCache`): a retransmission gets the first reply, or none
while the first call runs, and is not run again.

The dispatcher is one of the two places allowed to catch `Exception`: a bug in a
procedure is logged with `logger.exception` and answered with SYSTEM_ERR, so a
client never hangs and the server never dies on one bad call.
"""

from __future__ import annotations

import enum
import itertools
import logging
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, NamedTuple, NewType, Protocol, TypeVar, overload

from nfs.protocol.drc import DuplicateRequestCache, InProgress, RequestKey
from nfs.protocol.observe import CallObserver, CallOutcome
from nfs.protocol.rpcauth import (
    AUTH_NONE_BODY,
    MAX_AUTH_BYTES,
    NOBODY,
    AuthError,
    AuthFlavor,
    AuthStat,
    AuthSysParms,
    Credentials,
    OpaqueAuth,
)
from nfs.protocol.xdr import Buffer, FileSlice, Packer, Part, Unpacker, XdrError

__all__ = [
    "AUTH_NONE_BODY",
    "MAX_AUTH_BYTES",
    "NOBODY",
    "RPC_VERSION",
    "VOID",
    "AcceptStat",
    "AuthError",
    "AuthFlavor",
    "AuthStat",
    "AuthSysParms",
    "CallContext",
    "CallHeader",
    "ConnectionContext",
    "CredentialPolicy",
    "Credentials",
    "Dispatcher",
    "MsgType",
    "OpaqueAuth",
    "Packable",
    "RejectStat",
    "ReplyHeader",
    "ReplyStat",
    "RpcError",
    "RpcProcedure",
    "RpcProgram",
    "Void",
    "Xid",
    "decode_call",
    "decode_reply",
    "encode_call",
    "reply_accepted",
    "reply_auth_error",
    "reply_rpc_mismatch",
]

logger = logging.getLogger(__name__)

Xid = NewType("Xid", int)
"""The transaction id that matches a reply to its call."""

RPC_VERSION: Final = 2


class MsgType(enum.IntEnum):
    """msg_type (RFC 5531 §9)."""

    CALL = 0
    REPLY = 1


class ReplyStat(enum.IntEnum):
    """reply_stat (RFC 5531 §9)."""

    MSG_ACCEPTED = 0
    MSG_DENIED = 1


class AcceptStat(enum.IntEnum):
    """accept_stat (RFC 5531 §9)."""

    SUCCESS = 0
    PROG_UNAVAIL = 1
    PROG_MISMATCH = 2
    PROC_UNAVAIL = 3
    GARBAGE_ARGS = 4
    SYSTEM_ERR = 5


class RejectStat(enum.IntEnum):
    """reject_stat (RFC 5531 §9)."""

    RPC_MISMATCH = 0
    AUTH_ERROR = 1


class Packable(Protocol):
    """A value that can write itself as XDR (every wire type)."""

    def pack(self, p: Packer) -> None:
        """Append this value to `p`."""
        ...


@dataclass(frozen=True)
class Void:
    """The XDR ``void`` (an empty argument or result)."""

    def pack(self, p: Packer) -> None:
        """Append nothing."""

    @classmethod
    def unpack(cls, u: Unpacker) -> Void:
        """Read nothing."""
        return VOID


VOID: Final = Void()


class RpcError(Exception):
    """Raised by a procedure to answer with a non-SUCCESS accept_stat.

    Attributes:
        stat: PROG_UNAVAIL, PROC_UNAVAIL, GARBAGE_ARGS or SYSTEM_ERR.
    """

    def __init__(self, stat: AcceptStat, message: str = "") -> None:
        super().__init__(message or stat.name)
        self.stat = stat


_CONNECTIONS: Final = itertools.count(1)


@dataclass(frozen=True)
class ConnectionContext:
    """What the transport knows about a connection (passed to `Dispatcher.handle`)."""

    peer: str | None = None
    """The client address as "host:port", if known."""
    serial: int = field(default_factory=lambda: next(_CONNECTIONS))
    """Tells this connection from every other of this process, also a later one from the
    same address (`CallContext.connection`)."""

    @property
    def peer_port(self) -> int | None:
        """The client's source port (from `peer`), or None if unknown."""
        if not self.peer:
            return None
        port = self.peer.rpartition(":")[2]
        return int(port) if port.isdigit() else None


CredentialPolicy = Callable[[Credentials, ConnectionContext | None], Credentials]
"""Maps a call's decoded credentials to the ones the procedures see (root squash,
a privileged-port check: see `nfs.protocol.identity`); raises `AuthError` to refuse the call."""


@dataclass(frozen=True)
class CallContext:
    """One call as seen by a procedure (and by the VFS, for permission checks)."""

    cred: Credentials = field(default_factory=Credentials)
    xid: Xid = Xid(0)
    prog: int = 0
    vers: int = 0
    proc: int = 0
    peer: str | None = None
    connection: int = 0
    """The `ConnectionContext.serial` of the connection the call came on (0: a direct
    caller): a client process that reuses an earlier one's address is told apart by it."""

    @classmethod
    def of_call(
        cls,
        cred: Credentials,
        xid: Xid,
        prog: int,
        vers: int,
        proc: int,
        peer: str | None,
        connection: int,
    ) -> CallContext:
        """The context of a call the dispatcher decoded: the same as the constructor,
        without its field-by-field ``object.__setattr__`` (made for every call)."""
        ctx = object.__new__(cls)
        ctx.__dict__.update(
            cred=cred, xid=xid, prog=prog, vers=vers, proc=proc, peer=peer, connection=connection
        )
        return ctx

    @classmethod
    def local(
        cls, uid: int = 0, gid: int = 0, gids: Iterable[int] = (), *, peer: str | None = None
    ) -> CallContext:
        """Build a context for a direct (non-RPC) caller, root by default.

        ``peer`` stands for the client's address (``"host:port"``): two contexts with
        different peers are two clients (two writers of a staged file).
        """
        return cls(cred=Credentials.sys(uid, gid, gids, "localhost"), peer=peer)

    @property
    def uid(self) -> int:
        """The caller's uid."""
        return self.cred.uid

    @property
    def gid(self) -> int:
        """The caller's primary gid."""
        return self.cred.gid


# ---------------------------------------------------------------- calls


@dataclass(frozen=True)
class CallHeader:
    """call_body plus xid (RFC 5531 §9): everything of a call before its arguments."""

    xid: Xid
    prog: int
    vers: int
    proc: int
    cred: OpaqueAuth = AUTH_NONE_BODY
    verf: OpaqueAuth = AUTH_NONE_BODY
    rpcvers: int = RPC_VERSION

    def pack(self, p: Packer) -> None:
        """Append the header of a CALL message."""
        p.pack_uint(self.xid)
        p.pack_uint(MsgType.CALL)
        p.pack_uint(self.rpcvers)
        p.pack_uint(self.prog)
        p.pack_uint(self.vers)
        p.pack_uint(self.proc)
        self.cred.pack(p)
        self.verf.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> CallHeader:
        """Read the header of a CALL message.

        Raises:
            XdrError: if the data is short or is not a CALL.
        """
        xid = Xid(u.unpack_uint())
        mtype = u.unpack_uint()
        if mtype != MsgType.CALL:
            raise XdrError(f"not a CALL message (msg_type {mtype})")
        rpcvers = u.unpack_uint()
        prog = u.unpack_uint()
        vers = u.unpack_uint()
        proc = u.unpack_uint()
        cred = OpaqueAuth.unpack(u)
        verf = OpaqueAuth.unpack(u)
        return cls(xid, prog, vers, proc, cred, verf, rpcvers)


def decode_call(record: Buffer) -> tuple[CallHeader, Unpacker]:
    """Decode a call record into its header and an unpacker positioned at the args.

    Raises:
        XdrError: if the record is not a well-formed CALL header.
    """
    u = Unpacker(record)
    return CallHeader.unpack(u), u


def encode_call(header: CallHeader, args: Packable | Buffer = b"") -> Packer:
    """Encode a CALL message (header + arguments); the caller frames it as a record."""
    p = Packer()
    header.pack(p)
    if isinstance(args, bytes | bytearray | memoryview):
        p.pack_raw(args)
    else:
        args.pack(p)
    return p


# ---------------------------------------------------------------- replies


_XID_MTYPE: Final = struct.Struct(">II")
_CALL_BODY: Final = struct.Struct(">IIII")
_SUCCESS_HEAD: Final = struct.Struct(">IIIIII")
"""xid, REPLY, MSG_ACCEPTED, verifier AUTH_NONE (flavor, length 0), SUCCESS."""


def _reply_prefix(p: Packer, xid: int, stat: ReplyStat) -> None:
    p.pack_uint(xid)
    p.pack_uint(MsgType.REPLY)
    p.pack_uint(stat)


def reply_accepted(
    xid: int, stat: AcceptStat = AcceptStat.SUCCESS, *, low: int = 0, high: int = 0
) -> Packer:
    """Start an accepted reply (RFC 5531 §9, accepted_reply).

    For SUCCESS the caller appends the procedure's results to the returned packer;
    PROG_MISMATCH carries `low` and `high`, the other stats carry nothing.
    """
    if stat == AcceptStat.SUCCESS:
        return _success(xid)
    p = Packer()
    _reply_prefix(p, xid, ReplyStat.MSG_ACCEPTED)
    AUTH_NONE_BODY.pack(p)
    p.pack_uint(stat)
    if stat == AcceptStat.PROG_MISMATCH:
        p.pack_uint(low)
        p.pack_uint(high)
    return p


def _success(xid: int) -> Packer:
    """A SUCCESS reply's packer, its head in (every call that ran: one frame, one pack)."""
    return Packer(_SUCCESS_HEAD.pack(xid, MsgType.REPLY, 0, 0, 0, 0))


def reply_rpc_mismatch(xid: int, low: int = RPC_VERSION, high: int = RPC_VERSION) -> Packer:
    """Build MSG_DENIED / RPC_MISMATCH (the call's rpcvers is not 2)."""
    p = Packer()
    _reply_prefix(p, xid, ReplyStat.MSG_DENIED)
    p.pack_uint(RejectStat.RPC_MISMATCH)
    p.pack_uint(low)
    p.pack_uint(high)
    return p


def reply_auth_error(xid: int, stat: AuthStat) -> Packer:
    """Build MSG_DENIED / AUTH_ERROR with the given auth_stat."""
    p = Packer()
    _reply_prefix(p, xid, ReplyStat.MSG_DENIED)
    p.pack_uint(RejectStat.AUTH_ERROR)
    p.pack_uint(stat)
    return p


@dataclass(frozen=True)
class ReplyHeader:
    """A decoded reply header (RFC 5531 §9 reply_body), for clients and tests.

    Attributes:
        xid: the call's xid.
        reply_stat: MSG_ACCEPTED or MSG_DENIED.
        accept_stat: for MSG_ACCEPTED.
        reject_stat: for MSG_DENIED.
        auth_stat: for AUTH_ERROR.
        low, high: the supported range for PROG_MISMATCH and RPC_MISMATCH.
    """

    xid: Xid
    reply_stat: ReplyStat
    accept_stat: AcceptStat | None = None
    reject_stat: RejectStat | None = None
    auth_stat: AuthStat | None = None
    low: int = 0
    high: int = 0
    verf: OpaqueAuth = AUTH_NONE_BODY

    @property
    def success(self) -> bool:
        """Whether the call was accepted and executed (results follow)."""
        return self.accept_stat == AcceptStat.SUCCESS

    @classmethod
    def unpack(cls, u: Unpacker) -> ReplyHeader:
        """Read a reply header; for SUCCESS, `u` is left at the results.

        Raises:
            XdrError: if this is not a well-formed REPLY.
        """
        xid = Xid(u.unpack_uint())
        mtype = u.unpack_uint()
        if mtype != MsgType.REPLY:
            raise XdrError(f"not a REPLY message (msg_type {mtype})")
        rstat = u.unpack_enum(ReplyStat)
        if rstat == ReplyStat.MSG_ACCEPTED:
            verf = OpaqueAuth.unpack(u)
            astat = u.unpack_enum(AcceptStat)
            if astat == AcceptStat.PROG_MISMATCH:
                return cls(xid, rstat, astat, low=u.unpack_uint(), high=u.unpack_uint(), verf=verf)
            return cls(xid, rstat, astat, verf=verf)
        jstat = u.unpack_enum(RejectStat)
        if jstat == RejectStat.RPC_MISMATCH:
            return cls(xid, rstat, reject_stat=jstat, low=u.unpack_uint(), high=u.unpack_uint())
        return cls(xid, rstat, reject_stat=jstat, auth_stat=u.unpack_enum(AuthStat))


def decode_reply(record: Buffer) -> tuple[ReplyHeader, Unpacker]:
    """Decode a reply record into its header and an unpacker at the results.

    Raises:
        XdrError: if the record is not a well-formed REPLY.
    """
    u = Unpacker(record)
    return ReplyHeader.unpack(u), u


# ---------------------------------------------------------------- programs

A = TypeVar("A")


@dataclass(frozen=True)
class RpcProcedure(Generic[A]):
    """One procedure of a program: decode the arguments, then run.

    Attributes:
        name: the RFC name, for logs (e.g. "NFSPROC3_LOOKUP").
        decode: reads the arguments; raises `XdrError` on garbage (-> GARBAGE_ARGS).
        run: executes the call and returns the result to pack. It may raise
            `RpcError` for a non-SUCCESS accept_stat; anything else is a bug
            (-> SYSTEM_ERR, logged).
        run_nowait: optional; executes the call only if that needs no waiting (no
            lock held elsewhere, no IO), else returns None with no effect
            (`Dispatcher.handle_parts_nowait`).
    """

    name: str
    decode: Callable[[Unpacker], A]
    run: Callable[[A, CallContext], Packable]
    run_nowait: Callable[[A, CallContext], Packable | None] | None = None


@dataclass(frozen=True)
class RpcProgram:
    """A (program, version) pair and its procedures, keyed by procedure number."""

    prog: int
    vers: int
    procedures: Mapping[int, RpcProcedure[Any]]


class Dispatcher:
    """Route call records to registered programs and build the reply (sans-IO).

    Thread-safe once the programs are registered: `handle` keeps no state between
    calls but the reply cache (itself thread-safe), so a transport may run many calls
    at once.

    Args:
        programs: the programs to serve.
        credential_policy: applied to every call's credentials before its
            procedure runs (an `AuthError` it raises is answered AUTH_ERROR).
        reply_cache: the duplicate-request cache of the procedures it covers
            (None: every call runs, retransmissions too).
        observer: told of every call a procedure ran (`nfs.protocol.observe`); also
            settable later (``dispatcher.observer = CallStats()``).
    """

    def __init__(
        self,
        programs: Iterable[RpcProgram] = (),
        *,
        credential_policy: CredentialPolicy | None = None,
        reply_cache: DuplicateRequestCache | None = None,
        observer: CallObserver | None = None,
    ) -> None:
        self._credential_policy = credential_policy
        self.reply_cache = reply_cache
        self.observer = observer
        self._programs: dict[tuple[int, int], RpcProgram] = {}
        self._versions: dict[int, list[int]] = {}
        for program in programs:
            self.register(program)

    def register(self, program: RpcProgram) -> None:
        """Serve `program` (replacing one registered with the same prog and vers)."""
        self._programs[(program.prog, program.vers)] = program
        versions = self._versions.setdefault(program.prog, [])
        if program.vers not in versions:
            versions.append(program.vers)
            versions.sort()

    def programs(self) -> list[RpcProgram]:
        """Return the registered programs."""
        return list(self._programs.values())

    def handle(self, record: Buffer, conn: ConnectionContext | None = None) -> bytes | None:
        """Process one call record and return the reply record (unframed).

        Returns:
            The reply message, or ``None`` when nothing is to be sent: the record is
            not a call whose xid can be read, or it retransmits a cached call that is
            still running (see `nfs.protocol.drc`).
        """
        parts = self.handle_parts(record, conn)
        return None if parts is None else b"".join(parts)

    @overload
    def handle_parts(
        self, record: Buffer, conn: ConnectionContext | None = None, *, files: Literal[False] = ...
    ) -> list[bytes | memoryview] | None: ...

    @overload
    def handle_parts(
        self, record: Buffer, conn: ConnectionContext | None = None, *, files: bool
    ) -> list[Part] | None: ...

    def handle_parts(
        self, record: Buffer, conn: ConnectionContext | None = None, *, files: bool = False
    ) -> list[bytes | memoryview] | list[Part] | None:
        """Like `handle`, but return the reply as buffers (large READ data is not copied).

        With ``files``, READ data that is a range of a file may be a `FileSlice` (for a
        transport that sends it with ``os.sendfile``); without, it is its view.

        Never raises: garbage gets GARBAGE_ARGS (or no reply if even the xid or
        the message type is unreadable); rpcvers != 2 gets RPC_MISMATCH; a bad
        credential gets AUTH_ERROR; an unknown program PROG_UNAVAIL; an unknown
        version PROG_MISMATCH; an unknown procedure PROC_UNAVAIL; a failing
        procedure SYSTEM_ERR. A retransmission of a call the reply cache covers gets
        the first call's reply without running, or no reply (None) while that runs.
        """
        call = self._decode(record, conn)
        if not isinstance(call, _Call):
            return call
        cache, key = self.reply_cache, call.key
        if cache is None or key is None:
            got = self._run(call)
            return got if files else _plain(got)
        begun = cache.begin(key)
        if begun is InProgress.DROP:
            logger.debug(
                "xid %#x %s: retransmitted while running: dropped", call.xid, call.procedure.name
            )
            return None
        if begun is not None:
            logger.debug(
                "xid %#x %s: retransmitted: the cached reply", call.xid, call.procedure.name
            )
            cached: list[bytes | memoryview] = [begun]
            return cached
        parts: list[bytes | memoryview] | None = None
        try:
            parts = _plain(self._run(call))
        finally:
            if parts is None:
                cache.abandon(key)
            else:
                cache.finish(key, b"".join(parts))
        return parts

    def _run(self, call: _Call) -> list[Part]:
        """Run a decoded call and return its reply (never raises)."""
        observer = self.observer
        started = observer.clock() if observer is not None else 0.0
        outcome: CallOutcome = "ok"
        try:
            result = call.procedure.run(call.args, call.ctx)
            p = _success(call.xid)
            result.pack(p)
        except RpcError as err:
            outcome = "rpc_error"
            return reply_accepted(call.xid, err.stat).get_parts()
        except Exception:  # the RPC boundary: a bug must not kill the connection
            outcome = "system_err"
            logger.exception("xid %#x %s failed", call.xid, call.procedure.name)
            return reply_accepted(call.xid, AcceptStat.SYSTEM_ERR).get_parts()
        finally:
            if observer is not None:
                observer.call_done(call.procedure.name, observer.clock() - started, outcome)
        return p.get_parts()

    @overload
    def handle_parts_nowait(
        self, record: Buffer, conn: ConnectionContext | None = None, *, files: Literal[False] = ...
    ) -> list[bytes | memoryview] | None: ...

    @overload
    def handle_parts_nowait(
        self, record: Buffer, conn: ConnectionContext | None = None, *, files: bool
    ) -> list[Part] | None: ...

    def handle_parts_nowait(
        self, record: Buffer, conn: ConnectionContext | None = None, *, files: bool = False
    ) -> list[bytes | memoryview] | list[Part] | None:
        """Like `handle_parts` if the procedure can answer without waiting (its
        ``run_nowait``); None otherwise, with no effect: then call `handle_parts`.

        For a transport that wants to answer cheap calls on its event loop. Never raises
        and never waits (a procedure without ``run_nowait``, a call that does not decode
        or is refused, gives None: `handle_parts` makes its reply).
        """
        call = self._decode(record, conn)
        if not isinstance(call, _Call) or call.procedure.run_nowait is None:
            return None
        cache, key = self.reply_cache, call.key
        if key is not None and (cache is None or not cache.begin_new(key)):
            return None  # a retransmission of a cached procedure: the full path answers it
        observer = self.observer
        started = observer.clock() if observer is not None else 0.0
        p: Packer | None = None
        try:
            result = call.procedure.run_nowait(call.args, call.ctx)
            if result is not None:
                p = _success(call.xid)
                result.pack(p)
                if observer is not None:
                    observer.call_done(call.procedure.name, observer.clock() - started, "ok")
        except RpcError:
            p = None
        except Exception:  # the RPC boundary, as in handle_parts
            logger.exception(
                "xid %#x %s failed (answered by the full path)", call.xid, call.procedure.name
            )
            p = None
        if key is not None and cache is not None:  # a cached procedure answered (or not)
            if p is None:
                cache.abandon(key)  # the full path begins it again
            else:
                cache.finish(key, b"".join(p.get_buffers()))
        if p is None:
            return None
        return p.get_parts() if files else p.get_buffers()

    def _decode(
        self, record: Buffer, conn: ConnectionContext | None
    ) -> _Call | list[bytes | memoryview] | None:
        """Decode a call up to its arguments: the call, or the reply that refuses it (or
        None: nothing to answer). Never raises."""
        head = _fast_head(record)
        if head is not None:  # the common case: one struct for the header, no copies
            xid_raw, prog, vers, proc, cred_flavor, cred_body, args_at = head
            xid = Xid(xid_raw)
        else:
            u = Unpacker(record)
            try:
                xid_raw, mtype = u.unpack_struct(_XID_MTYPE)
            except XdrError:
                return None
            xid = Xid(xid_raw)
            if mtype != MsgType.CALL:
                return None
            try:
                rpcvers = u.unpack_uint()
                if rpcvers != RPC_VERSION:
                    return reply_rpc_mismatch(xid).get_buffers()
                prog, vers, proc, cred_flavor = u.unpack_struct(_CALL_BODY)
                cred_body = u.unpack_opaque(MAX_AUTH_BYTES)
                u.unpack_uint()  # verifier: AUTH_NONE for AUTH_SYS; not checked
                u.unpack_opaque(MAX_AUTH_BYTES)
            except XdrError:
                return reply_accepted(xid, AcceptStat.GARBAGE_ARGS).get_buffers()
            args_at = u.position
        try:
            credentials = Credentials.of(cred_flavor, cred_body)
            if self._credential_policy is not None:
                credentials = self._credential_policy(credentials, conn)
        except AuthError as err:
            return reply_auth_error(xid, err.stat).get_buffers()

        program = self._programs.get((prog, vers))
        if program is None:
            versions = self._versions.get(prog)
            if not versions:
                return reply_accepted(xid, AcceptStat.PROG_UNAVAIL).get_buffers()
            return reply_accepted(
                xid, AcceptStat.PROG_MISMATCH, low=versions[0], high=versions[-1]
            ).get_buffers()
        procedure = program.procedures.get(proc)
        if procedure is None:
            return reply_accepted(xid, AcceptStat.PROC_UNAVAIL).get_buffers()

        try:
            args = procedure.decode(Unpacker(record, args_at))
        except XdrError as err:
            logger.debug("xid %#x %s: garbage args: %s", xid, procedure.name, err)
            return reply_accepted(xid, AcceptStat.GARBAGE_ARGS).get_buffers()
        peer = conn.peer if conn else None
        ctx = CallContext.of_call(
            credentials, xid, prog, vers, proc, peer, conn.serial if conn else 0
        )
        key = None
        cache = self.reply_cache
        if cache is not None and (prog, vers, proc) in cache.procedures:
            key = RequestKey.of(peer, xid, prog, vers, proc, memoryview(record)[args_at:])
        return _Call(xid, procedure, args, ctx, key)


_CALL_HEAD: Final = struct.Struct(">IIIIIIII")
"""xid, CALL, rpcvers, prog, vers, proc, credential flavor, credential length."""


def _fast_head(record: Buffer) -> tuple[int, int, int, int, int, bytes, int] | None:
    """Decode a well-formed RPC v2 call header in one go: (xid, prog, vers, proc,
    credential flavor and body, offset of the arguments); None for anything else (a
    short record, not a CALL, another RPC version, a bad length), which the step by step
    decoder then answers as it should."""
    size = len(record)
    if size < 40:
        return None
    xid, mtype, rpcvers, prog, vers, proc, flavor, cred_len = _CALL_HEAD.unpack_from(record, 0)
    if mtype != MsgType.CALL or rpcvers != RPC_VERSION or cred_len > MAX_AUTH_BYTES:
        return None
    at = 32 + ((cred_len + 3) & ~3)
    if at + 8 > size:
        return None
    verf_len = _U32_AT.unpack_from(record, at + 4)[0]
    args_at = at + 8 + ((verf_len + 3) & ~3)
    if verf_len > MAX_AUTH_BYTES or args_at > size:
        return None
    return xid, prog, vers, proc, flavor, bytes(record[32 : 32 + cred_len]), args_at


_U32_AT: Final = struct.Struct(">I")


class _Call(NamedTuple):
    """A decoded call, ready to run (a tuple: made on every call, it costs a third of a
    frozen dataclass)."""

    xid: Xid
    procedure: RpcProcedure[Any]
    args: Any
    ctx: CallContext
    key: RequestKey | None = None
    """Its name in the reply cache, if that covers the procedure."""


def _plain(parts: list[Part]) -> list[bytes | memoryview]:
    """``parts`` with each `FileSlice` as its view (the bytes in memory)."""
    return [p.view if isinstance(p, FileSlice) else p for p in parts]
