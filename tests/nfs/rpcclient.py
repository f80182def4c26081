"""A small blocking ONC RPC / NFSv3 client built from our own xdr, record and rpc layers.

Two transports, one API:

* ``RpcClient(host, port)`` speaks to a real server over TCP;
* ``RpcClient.over(dispatcher)`` feeds the bytes straight into a `Dispatcher`
  (sans-IO, no socket, no thread), the way h11's tests pair two peers.

Low level: `call` (one call, its reply header and an unpacker at the results),
`call_many` (pipelined: all calls sent before any reply is read), `send_raw` /
`recv_record` for garbage. Typed helpers return the RFC 1813 result objects
(`lookup`, `read`, `write`, `create`, `readdir`, ...) and leave the status to the
caller; the conveniences (`mount`, `walk`, `read_file`, `write_file`, `listdir`,
`attrs`) raise `NfsStatusError` unless the status is NFS3_OK.

Example:
    with NfsServer(MemoryFs(), 0) as server, RpcClient("127.0.0.1", server.port) as c:
        c.write_file("/a.txt", b"hello")
        assert c.read_file("/a.txt") == b"hello"
"""

from __future__ import annotations

import itertools
import random
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Protocol, Self, TypeVar

from nfs.protocol.mount import (
    MOUNT_PROGRAM,
    MOUNT_V3,
    DirPath,
    Exports,
    MountList,
    MountProc3,
    MountRes3,
    Mountstat3,
)
from nfs.protocol.nfs3 import (
    NFS_PROGRAM,
    NFS_V3,
    ZERO_VERF,
    Access3Args,
    Access3Res,
    Commit3Args,
    Commit3Res,
    Create3Args,
    Create3Res,
    CreateHow3,
    Createmode3,
    DirOpArgs3,
    Fattr3,
    Fsinfo3Args,
    Fsinfo3Res,
    Fsstat3Args,
    Fsstat3Res,
    Ftype3,
    Getattr3Args,
    Getattr3Res,
    Link3Args,
    Link3Res,
    Lookup3Args,
    Lookup3Res,
    Mkdir3Args,
    Mknod3Args,
    Mknoddata3,
    NfsFh3,
    NfsProc3,
    Nfsstat3,
    Pathconf3Args,
    Pathconf3Res,
    Read3Args,
    Read3Res,
    Readdir3Args,
    Readdir3Res,
    Readdirplus3Args,
    Readdirplus3Res,
    Readlink3Args,
    Readlink3Res,
    Remove3Args,
    Remove3Res,
    Rename3Args,
    Rename3Res,
    Rmdir3Args,
    Sattr3,
    Sattrguard3,
    Setattr3Args,
    Setattr3Res,
    StableHow,
    Symlink3Args,
    Symlinkdata3,
    Write3Args,
    Write3Res,
)
from nfs.protocol.record import RecordReader, encode_record
from nfs.protocol.rpc import (
    AUTH_NONE_BODY,
    AuthSysParms,
    CallHeader,
    ConnectionContext,
    Dispatcher,
    OpaqueAuth,
    Packable,
    ReplyHeader,
    Xid,
    decode_reply,
    encode_call,
)
from nfs.protocol.xdr import Unpacker

__all__ = [
    "NfsStatusError",
    "Reply",
    "RpcClient",
    "RpcReplyError",
]

T = TypeVar("T")

CHUNK: Final = 1 << 20
ALL_ACCESS: Final = 0x3F


class RpcReplyError(Exception):
    """The call was not accepted and executed (PROG_UNAVAIL, GARBAGE_ARGS, AUTH_ERROR...)."""

    def __init__(self, header: ReplyHeader) -> None:
        super().__init__(
            f"xid {header.xid:#x}: {header.reply_stat.name} "
            f"{(header.accept_stat or header.reject_stat or header.auth_stat)!r}"
        )
        self.header = header


class NfsStatusError(Exception):
    """An NFS or MOUNT procedure returned a status other than OK."""

    def __init__(self, status: Nfsstat3 | Mountstat3, what: str = "") -> None:
        super().__init__(f"{what}: {status.name}" if what else status.name)
        self.status = status


@dataclass(frozen=True)
class Reply:
    """A decoded reply: the header and an unpacker positioned at the results."""

    header: ReplyHeader
    body: Unpacker

    def result(self, unpack: Callable[[Unpacker], T]) -> T:
        """Decode the results (the call must have succeeded; no bytes may be left).

        Raises:
            RpcReplyError: if the call was not accepted with SUCCESS.
        """
        if not self.header.success:
            raise RpcReplyError(self.header)
        value = unpack(self.body)
        self.body.done()
        return value


class _Transport(Protocol):
    def sendall(self, data: bytes) -> None: ...

    def recv(self) -> bytes: ...

    def close(self) -> None: ...


class _SocketTransport:
    def __init__(self, host: str, port: int, timeout: float, source_port: int = 0) -> None:
        source = (host, source_port) if source_port else None
        self.sock = socket.create_connection((host, port), timeout=timeout, source_address=source)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> bytes:
        return self.sock.recv(1 << 20)

    def close(self) -> None:
        self.sock.close()


class _DispatcherTransport:
    """Bytes in, bytes out through a `Dispatcher`, no socket (sans-IO pairing)."""

    def __init__(self, dispatcher: Dispatcher, conn: ConnectionContext, nowait: bool) -> None:
        self._dispatcher = dispatcher
        self._conn = conn
        self._nowait = nowait
        self._reader = RecordReader()
        self._out = bytearray()

    def sendall(self, data: bytes) -> None:
        for record in self._reader.feed(data):
            if self._nowait:  # as the server's event loop answers a lone call
                parts = self._dispatcher.handle_parts_nowait(record, self._conn)
                if parts is not None:
                    self._out += encode_record(b"".join(parts))
                    continue
            reply = self._dispatcher.handle(record, self._conn)
            if reply is not None:
                self._out += encode_record(reply)

    def recv(self) -> bytes:
        if not self._out:
            raise TimeoutError("the dispatcher sent no reply")
        data = bytes(self._out)
        self._out.clear()
        return data

    def close(self) -> None:
        pass


class RpcClient:
    """A blocking RPC client; see the module docstring.

    Args:
        host: server address.
        port: server port (MOUNT and NFS on the same port).
        uid, gid, gids, machinename: the AUTH_SYS credential sent with each call.
        auth: a credential to send instead (e.g. ``AUTH_NONE_BODY``).
        timeout: socket timeout in seconds.
        source_port: connect from this local port (e.g. a privileged one, as root).

    Attributes:
        root: the handle from the last successful `mount`, used by path helpers.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 2049,
        *,
        uid: int = 0,
        gid: int = 0,
        gids: Sequence[int] = (),
        machinename: str = "rpcclient",
        auth: OpaqueAuth | None = None,
        timeout: float = 10.0,
        source_port: int = 0,
        _transport: _Transport | None = None,
    ) -> None:
        self._transport: _Transport = (
            _transport
            if _transport is not None
            else _SocketTransport(host, port, timeout, source_port)
        )
        self._reader = RecordReader(64 << 20)
        self._replies: dict[int, bytes] = {}
        self._xids = itertools.count(random.randrange(1, 1 << 30))
        self.cred = (
            auth
            if auth is not None
            else AuthSysParms(0, machinename, uid, gid, tuple(gids)).to_opaque()
        )
        self.root: NfsFh3 | None = None

    @property
    def local_address(self) -> str:
        """This client's "host:port" as the server sees it (a socket transport only)."""
        transport = self._transport
        if not isinstance(transport, _SocketTransport):
            raise TypeError("no socket")
        host, port = transport.sock.getsockname()[:2]
        return f"{host}:{port}"

    @classmethod
    def over(
        cls,
        dispatcher: Dispatcher,
        *,
        uid: int = 0,
        gid: int = 0,
        gids: Sequence[int] = (),
        auth: OpaqueAuth | None = None,
        peer: str = "127.0.0.1:700",
        nowait: bool = False,
    ) -> RpcClient:
        """Return a client wired straight into `dispatcher` (no socket, no thread); with
        ``nowait`` each call is answered as the server's event loop answers a lone call
        (`Dispatcher.handle_parts_nowait` first, the full path when that gives None)."""
        return cls(
            uid=uid,
            gid=gid,
            gids=gids,
            auth=auth,
            _transport=_DispatcherTransport(dispatcher, ConnectionContext(peer), nowait),
        )

    def close(self) -> None:
        """Close the connection."""
        self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def with_credentials(self, *, uid: int, gid: int, gids: Sequence[int] = ()) -> None:
        """Send later calls with another AUTH_SYS identity."""
        self.cred = AuthSysParms(0, "rpcclient", uid, gid, tuple(gids)).to_opaque()

    # ------------------------------------------------------------ raw RPC

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (no record marking)."""
        self._transport.sendall(data)

    def recv_record(self) -> bytes:
        """Return the next reply record, whatever its xid.

        Raises:
            EOFError: if the server closed the connection.
        """
        while True:
            if self._replies:
                xid = next(iter(self._replies))
                return self._replies.pop(xid)
            self._fill()

    def _fill(self) -> None:
        data = self._transport.recv()
        if not data:
            raise EOFError("connection closed by the server")
        for record in self._reader.feed(data):
            xid = int.from_bytes(record[:4], "big") if len(record) >= 4 else -1
            self._replies[xid] = record

    def send_call(
        self,
        prog: int,
        vers: int,
        proc: int,
        args: Packable | bytes = b"",
        *,
        cred: OpaqueAuth | None = None,
        rpcvers: int = 2,
    ) -> Xid:
        """Send one call without waiting for its reply; return its xid."""
        xid = Xid(next(self._xids) & 0xFFFFFFFF)
        header = CallHeader(
            xid, prog, vers, proc, cred or self.cred, AUTH_NONE_BODY, rpcvers=rpcvers
        )
        self._transport.sendall(encode_record(encode_call(header, args).get_buffer()))
        return xid

    def wait_reply(self, xid: Xid) -> Reply:
        """Return the reply to `xid`, keeping replies to other calls for later."""
        while xid not in self._replies:
            self._fill()
        header, body = decode_reply(self._replies.pop(xid))
        return Reply(header, body)

    def call(
        self,
        prog: int,
        vers: int,
        proc: int,
        args: Packable | bytes = b"",
        *,
        cred: OpaqueAuth | None = None,
        rpcvers: int = 2,
    ) -> Reply:
        """Make one call and return its reply (whatever its status)."""
        return self.wait_reply(self.send_call(prog, vers, proc, args, cred=cred, rpcvers=rpcvers))

    def call_many(self, calls: Iterable[tuple[int, int, int, Packable | bytes]]) -> list[Reply]:
        """Send every call first, then collect the replies (in call order)."""
        xids = [self.send_call(*c) for c in calls]
        return [self.wait_reply(x) for x in xids]

    def nfs3(self, proc: NfsProc3, args: Packable, unpack: Callable[[Unpacker], T]) -> T:
        """Call an NFSv3 procedure and decode its result with `unpack`."""
        return self.call(NFS_PROGRAM, NFS_V3, proc, args).result(unpack)

    # ------------------------------------------------------------ MOUNT v3

    def mount_null(self) -> None:
        """MOUNTPROC3_NULL."""
        self.call(MOUNT_PROGRAM, MOUNT_V3, MountProc3.MOUNTPROC3_NULL).result(lambda u: None)

    def mnt(self, path: str = "/") -> MountRes3:
        """MOUNTPROC3_MNT."""
        return self.call(MOUNT_PROGRAM, MOUNT_V3, MountProc3.MOUNTPROC3_MNT, DirPath(path)).result(
            MountRes3.unpack
        )

    def mount(self, path: str = "/") -> NfsFh3:
        """MNT `path`, remember the handle as `root` and return it.

        Raises:
            NfsStatusError: for a MOUNT error.
        """
        res = self.mnt(path)
        if res.mountinfo is None:
            raise NfsStatusError(res.fhs_status, f"MNT {path}")
        self.root = NfsFh3(res.mountinfo.fhandle)
        return self.root

    def umnt(self, path: str = "/") -> None:
        """MOUNTPROC3_UMNT."""
        self.call(MOUNT_PROGRAM, MOUNT_V3, MountProc3.MOUNTPROC3_UMNT, DirPath(path)).result(
            lambda u: None
        )

    def umntall(self) -> None:
        """MOUNTPROC3_UMNTALL."""
        self.call(MOUNT_PROGRAM, MOUNT_V3, MountProc3.MOUNTPROC3_UMNTALL).result(lambda u: None)

    def dump(self) -> MountList:
        """MOUNTPROC3_DUMP."""
        return self.call(MOUNT_PROGRAM, MOUNT_V3, MountProc3.MOUNTPROC3_DUMP).result(
            MountList.unpack
        )

    def exports(self) -> Exports:
        """MOUNTPROC3_EXPORT."""
        return self.call(MOUNT_PROGRAM, MOUNT_V3, MountProc3.MOUNTPROC3_EXPORT).result(
            Exports.unpack
        )

    # ------------------------------------------------------------ NFSv3 procedures

    def null(self) -> None:
        """NFSPROC3_NULL."""
        self.call(NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_NULL).result(lambda u: None)

    def getattr(self, fh: NfsFh3) -> Getattr3Res:
        """NFSPROC3_GETATTR."""
        return self.nfs3(NfsProc3.NFSPROC3_GETATTR, Getattr3Args(fh), Getattr3Res.unpack)

    def setattr(
        self, fh: NfsFh3, attrs: Sattr3, *, guard_ctime: Sattrguard3 | None = None
    ) -> Setattr3Res:
        """NFSPROC3_SETATTR."""
        return self.nfs3(
            NfsProc3.NFSPROC3_SETATTR,
            Setattr3Args(fh, attrs, guard_ctime or Sattrguard3()),
            Setattr3Res.unpack,
        )

    def lookup(self, dir_fh: NfsFh3, name: str) -> Lookup3Res:
        """NFSPROC3_LOOKUP."""
        return self.nfs3(
            NfsProc3.NFSPROC3_LOOKUP, Lookup3Args(DirOpArgs3(dir_fh, name)), Lookup3Res.unpack
        )

    def access(self, fh: NfsFh3, mask: int = ALL_ACCESS) -> Access3Res:
        """NFSPROC3_ACCESS."""
        return self.nfs3(NfsProc3.NFSPROC3_ACCESS, Access3Args(fh, mask), Access3Res.unpack)

    def readlink(self, fh: NfsFh3) -> Readlink3Res:
        """NFSPROC3_READLINK."""
        return self.nfs3(NfsProc3.NFSPROC3_READLINK, Readlink3Args(fh), Readlink3Res.unpack)

    def read(self, fh: NfsFh3, offset: int = 0, count: int = CHUNK) -> Read3Res:
        """NFSPROC3_READ."""
        return self.nfs3(NfsProc3.NFSPROC3_READ, Read3Args(fh, offset, count), Read3Res.unpack)

    def write(
        self,
        fh: NfsFh3,
        offset: int,
        data: bytes,
        stable: StableHow = StableHow.FILE_SYNC,
        *,
        count: int | None = None,
    ) -> Write3Res:
        """NFSPROC3_WRITE (`count` defaults to the length of `data`)."""
        return self.nfs3(
            NfsProc3.NFSPROC3_WRITE,
            Write3Args(fh, offset, len(data) if count is None else count, stable, data),
            Write3Res.unpack,
        )

    def create(
        self,
        dir_fh: NfsFh3,
        name: str,
        *,
        mode: int | None = 0o644,
        how: Createmode3 = Createmode3.UNCHECKED,
        verf: bytes = b"\x01" * 8,
        attrs: Sattr3 | None = None,
    ) -> Create3Res:
        """NFSPROC3_CREATE (UNCHECKED by default; EXCLUSIVE sends `verf`)."""
        if how == Createmode3.EXCLUSIVE:
            createhow = CreateHow3(how, verf=verf)
        else:
            createhow = CreateHow3(how, obj_attributes=attrs or Sattr3(mode=mode))
        return self.nfs3(
            NfsProc3.NFSPROC3_CREATE,
            Create3Args(DirOpArgs3(dir_fh, name), createhow),
            Create3Res.unpack,
        )

    def mkdir(self, dir_fh: NfsFh3, name: str, *, mode: int | None = 0o755) -> Create3Res:
        """NFSPROC3_MKDIR."""
        return self.nfs3(
            NfsProc3.NFSPROC3_MKDIR,
            Mkdir3Args(DirOpArgs3(dir_fh, name), Sattr3(mode=mode)),
            Create3Res.unpack,
        )

    def symlink(self, dir_fh: NfsFh3, name: str, target: str) -> Create3Res:
        """NFSPROC3_SYMLINK."""
        return self.nfs3(
            NfsProc3.NFSPROC3_SYMLINK,
            Symlink3Args(DirOpArgs3(dir_fh, name), Symlinkdata3(Sattr3(), target)),
            Create3Res.unpack,
        )

    def mknod(self, dir_fh: NfsFh3, name: str, ftype: Ftype3 = Ftype3.NF3FIFO) -> Create3Res:
        """NFSPROC3_MKNOD."""
        return self.nfs3(
            NfsProc3.NFSPROC3_MKNOD,
            Mknod3Args(DirOpArgs3(dir_fh, name), Mknoddata3(ftype, Sattr3())),
            Create3Res.unpack,
        )

    def remove(self, dir_fh: NfsFh3, name: str) -> Remove3Res:
        """NFSPROC3_REMOVE."""
        return self.nfs3(
            NfsProc3.NFSPROC3_REMOVE, Remove3Args(DirOpArgs3(dir_fh, name)), Remove3Res.unpack
        )

    def rmdir(self, dir_fh: NfsFh3, name: str) -> Remove3Res:
        """NFSPROC3_RMDIR."""
        return self.nfs3(
            NfsProc3.NFSPROC3_RMDIR, Rmdir3Args(DirOpArgs3(dir_fh, name)), Remove3Res.unpack
        )

    def rename(self, from_dir: NfsFh3, from_name: str, to_dir: NfsFh3, to_name: str) -> Rename3Res:
        """NFSPROC3_RENAME."""
        return self.nfs3(
            NfsProc3.NFSPROC3_RENAME,
            Rename3Args(DirOpArgs3(from_dir, from_name), DirOpArgs3(to_dir, to_name)),
            Rename3Res.unpack,
        )

    def link(self, fh: NfsFh3, dir_fh: NfsFh3, name: str) -> Link3Res:
        """NFSPROC3_LINK."""
        return self.nfs3(
            NfsProc3.NFSPROC3_LINK, Link3Args(fh, DirOpArgs3(dir_fh, name)), Link3Res.unpack
        )

    def readdir(
        self, dir_fh: NfsFh3, cookie: int = 0, cookieverf: bytes = ZERO_VERF, count: int = 4096
    ) -> Readdir3Res:
        """NFSPROC3_READDIR."""
        return self.nfs3(
            NfsProc3.NFSPROC3_READDIR,
            Readdir3Args(dir_fh, cookie, cookieverf, count),
            Readdir3Res.unpack,
        )

    def readdirplus(
        self,
        dir_fh: NfsFh3,
        cookie: int = 0,
        cookieverf: bytes = ZERO_VERF,
        dircount: int = 4096,
        maxcount: int = 32768,
    ) -> Readdirplus3Res:
        """NFSPROC3_READDIRPLUS."""
        return self.nfs3(
            NfsProc3.NFSPROC3_READDIRPLUS,
            Readdirplus3Args(dir_fh, cookie, cookieverf, dircount, maxcount),
            Readdirplus3Res.unpack,
        )

    def fsstat(self, fh: NfsFh3) -> Fsstat3Res:
        """NFSPROC3_FSSTAT."""
        return self.nfs3(NfsProc3.NFSPROC3_FSSTAT, Fsstat3Args(fh), Fsstat3Res.unpack)

    def fsinfo(self, fh: NfsFh3) -> Fsinfo3Res:
        """NFSPROC3_FSINFO."""
        return self.nfs3(NfsProc3.NFSPROC3_FSINFO, Fsinfo3Args(fh), Fsinfo3Res.unpack)

    def pathconf(self, fh: NfsFh3) -> Pathconf3Res:
        """NFSPROC3_PATHCONF."""
        return self.nfs3(NfsProc3.NFSPROC3_PATHCONF, Pathconf3Args(fh), Pathconf3Res.unpack)

    def commit(self, fh: NfsFh3, offset: int = 0, count: int = 0) -> Commit3Res:
        """NFSPROC3_COMMIT."""
        return self.nfs3(
            NfsProc3.NFSPROC3_COMMIT, Commit3Args(fh, offset, count), Commit3Res.unpack
        )

    # ------------------------------------------------------------ conveniences (raise on error)

    def _root(self) -> NfsFh3:
        return self.root if self.root is not None else self.mount("/")

    def walk(self, path: str) -> NfsFh3:
        """Return the handle of `path` (relative to the mounted root), by LOOKUPs.

        Raises:
            NfsStatusError: if a component cannot be looked up.
        """
        fh = self._root()
        for part in (p for p in path.split("/") if p):
            res = self.lookup(fh, part)
            if res.resok is None:
                raise NfsStatusError(res.status, f"LOOKUP {part!r} in {path!r}")
            fh = res.resok.object
        return fh

    def _fh(self, target: str | NfsFh3) -> NfsFh3:
        return self.walk(target) if isinstance(target, str) else target

    def attrs(self, target: str | NfsFh3) -> Fattr3:
        """Return the attributes of a path or handle (GETATTR)."""
        res = self.getattr(self._fh(target))
        if res.resok is None:
            raise NfsStatusError(res.status, "GETATTR")
        return res.resok.obj_attributes

    def read_file(self, target: str | NfsFh3, *, chunk: int = CHUNK) -> bytes:
        """Read a whole file with sequential READs until eof."""
        fh = self._fh(target)
        out = bytearray()
        while True:
            res = self.read(fh, len(out), chunk)
            if res.resok is None:
                raise NfsStatusError(res.status, "READ")
            out += bytes(res.resok.data)  # a decoded reply: bytes (Pieces only go out)
            if res.resok.eof:
                return bytes(out)
            if not res.resok.data:
                raise NfsStatusError(Nfsstat3.NFS3ERR_IO, "READ made no progress before eof")

    def create_path(self, path: str, *, mode: int = 0o644) -> NfsFh3:
        """CREATE (UNCHECKED, size 0: truncates an existing file) and return the handle."""
        parent, _, name = path.rstrip("/").rpartition("/")
        res = self.create(self.walk(parent), name, attrs=Sattr3(mode=mode, size=0))
        if res.resok is None or res.resok.obj.handle is None:
            raise NfsStatusError(res.status, f"CREATE {path!r}")
        return res.resok.obj.handle

    def write_file(
        self,
        path: str,
        data: bytes,
        *,
        chunk: int = CHUNK,
        stable: StableHow = StableHow.FILE_SYNC,
        mode: int = 0o644,
    ) -> NfsFh3:
        """Create or truncate `path`, write `data` in chunks, then COMMIT (as a close())."""
        fh = self.create_path(path, mode=mode)
        for offset in range(0, len(data), chunk):
            res = self.write(fh, offset, data[offset : offset + chunk], stable)
            if res.resok is None:
                raise NfsStatusError(res.status, f"WRITE {path!r} at {offset}")
        cres = self.commit(fh)
        if cres.resok is None:
            raise NfsStatusError(cres.status, f"COMMIT {path!r}")
        return fh

    def listdir(
        self, target: str | NfsFh3 = "/", *, plus: bool = False, count: int = 4096
    ) -> list[str]:
        """Return the names in a directory (all pages; "." and ".." left out)."""
        fh = self._fh(target)
        names: list[str] = []
        cookie, verf = 0, ZERO_VERF
        while True:
            if plus:
                pres = self.readdirplus(fh, cookie, verf, dircount=count, maxcount=count * 4)
                if pres.resok is None:
                    raise NfsStatusError(pres.status, "READDIRPLUS")
                entries: Sequence[tuple[str, int]] = [
                    (e.name, e.cookie) for e in pres.resok.reply.entries
                ]
                eof, verf = pres.resok.reply.eof, pres.resok.cookieverf
            else:
                res = self.readdir(fh, cookie, verf, count)
                if res.resok is None:
                    raise NfsStatusError(res.status, "READDIR")
                entries = [(e.name, e.cookie) for e in res.resok.reply.entries]
                eof, verf = res.resok.reply.eof, res.resok.cookieverf
            names.extend(name for name, _ in entries if name not in (".", ".."))
            if eof:
                return names
            if not entries:
                raise NfsStatusError(Nfsstat3.NFS3ERR_IO, "READDIR made no progress before eof")
            cookie = entries[-1][1]
