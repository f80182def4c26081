"""A small NFSv4.0 client over `RpcClient` (COMPOUNDs built from nfs.protocol.nfs4.ops), for tests.

`compound` sends operations and returns the COMPOUND4res; the helpers (`setclientid`,
`open`, `write`, `close`, ...) do what the Linux client does for one call, and raise
`Nfs4StatusError` unless every operation is NFS4_OK.
"""

from __future__ import annotations

import itertools
from typing import Any

from nfs.protocol.nfs3.types import NFS_PROGRAM
from nfs.protocol.nfs4 import ops as o
from nfs.protocol.nfs4.types import (
    NFS_V4,
    Nfsstat4,
    OpNum4,
    Stateid4,
    StateOwner4,
    bitmap_of,
    decode_fattr,
    encode_fattr,
)
from tests.nfs.rpcclient import RpcClient

__all__ = ["Nfs4Client", "Nfs4StatusError", "op"]


class Nfs4StatusError(Exception):
    """A COMPOUND ended with a status other than NFS4_OK."""

    def __init__(self, res: o.Compound4Res) -> None:
        last = res.results[-1].op.name if res.results else "COMPOUND"
        super().__init__(f"{last}: {res.status.name}")
        self.status = res.status
        self.res = res


def op(num: OpNum4, args: Any = None) -> o.Nfs4Op:
    """One operation (Void arguments by default)."""
    return o.Nfs4Op(num, args if args is not None else o.Void())


class Nfs4Client:
    """One NFSv4.0 client (one client id and one open-owner) over an `RpcClient`."""

    def __init__(self, rpc: RpcClient, name: bytes = b"test client") -> None:
        self.rpc = rpc
        self.name = name
        self.clientid = 0
        self.seqid = itertools.count(1)
        self.owner = b"owner-1"
        self.confirmed = False

    def compound(self, *ops: o.Nfs4Op, minor: int = 0) -> o.Compound4Res:
        """Send a COMPOUND and return its result (whatever the status)."""
        reply = self.rpc.call(NFS_PROGRAM, NFS_V4, 1, o.Compound4Args("t", minor, ops))
        result: o.Compound4Res = reply.result(lambda u: o.Compound4Res.unpack(u))
        return result

    def ok(self, *ops: o.Nfs4Op) -> o.Compound4Res:
        """Send a COMPOUND that must succeed."""
        res = self.compound(*ops)
        if res.status != Nfsstat4.NFS4_OK:
            raise Nfs4StatusError(res)
        return res

    def setclientid(self, verifier: bytes = b"verifier") -> int:
        """SETCLIENTID + SETCLIENTID_CONFIRM."""
        args = o.SetclientidArgs(verifier, self.name, 0x40000000, "tcp", "127.0.0.1.3.4", 1)
        res = self.ok(op(OpNum4.OP_SETCLIENTID, args))
        body = res.results[0].body
        self.ok(
            op(
                OpNum4.OP_SETCLIENTID_CONFIRM,
                o.SetclientidConfirmArgs(body.clientid, body.setclientid_confirm),
            )
        )
        self.clientid = body.clientid
        return self.clientid

    def walk(self, path: str) -> list[o.Nfs4Op]:
        """PUTROOTFH and a LOOKUP per component of ``path``."""
        ops = [op(OpNum4.OP_PUTROOTFH)]
        ops += [op(OpNum4.OP_LOOKUP, o.NameArgs(n)) for n in path.strip("/").split("/") if n]
        return ops

    def fh(self, path: str) -> bytes:
        """The filehandle of ``path``."""
        res = self.ok(*self.walk(path), op(OpNum4.OP_GETFH))
        handle: bytes = res.results[-1].body.object
        return handle

    def open_args(
        self, name: str, access: int, *, create: o.OpenFlag4 | None = None, seqid: int
    ) -> o.OpenArgs:
        return o.OpenArgs(
            seqid,
            access,
            0,
            StateOwner4(self.clientid, self.owner),
            create or o.OpenFlag4(),
            o.OpenClaim4(o.CLAIM_NULL, file=name),
        )

    def open(
        self, path: str, access: int = 3, *, create: o.OpenFlag4 | None = None
    ) -> tuple[bytes, Stateid4]:
        """OPEN ``path`` (and OPEN_CONFIRM if asked): its filehandle and stateid."""
        parent, _, name = path.rstrip("/").rpartition("/")
        seqid = next(self.seqid)
        res = self.ok(
            *self.walk(parent),
            op(OpNum4.OP_OPEN, self.open_args(name, access, create=create, seqid=seqid)),
            op(OpNum4.OP_GETFH),
        )
        opened = res.results[-2].body
        fh: bytes = res.results[-1].body.object
        sid: Stateid4 = opened.stateid
        if opened.rflags & o.OPEN4_RESULT_CONFIRM:
            res = self.ok(
                op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)),
                op(OpNum4.OP_OPEN_CONFIRM, o.OpenConfirmArgs(sid, next(self.seqid))),
            )
            sid = res.results[-1].body
        return fh, sid

    def write(self, fh: bytes, sid: Stateid4, offset: int, data: bytes, stable: int = 0) -> Any:
        """WRITE (UNSTABLE by default)."""
        res = self.ok(
            op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)),
            op(OpNum4.OP_WRITE, o.WriteArgs(sid, offset, stable, data)),
        )
        return res.results[-1].body

    def commit(self, fh: bytes) -> None:
        """COMMIT the whole file."""
        self.ok(op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)), op(OpNum4.OP_COMMIT, o.CommitArgs(0, 0)))

    def read(self, fh: bytes, sid: Stateid4, offset: int = 0, count: int = 1 << 20) -> bytes:
        """READ."""
        res = self.ok(
            op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)),
            op(OpNum4.OP_READ, o.ReadArgs(sid, offset, count)),
        )
        data: bytes = res.results[-1].body.data
        return data

    def close_res(self, fh: bytes, sid: Stateid4, seqid: int | None = None) -> o.Compound4Res:
        """CLOSE (whatever its status)."""
        return self.compound(
            op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)),
            op(OpNum4.OP_CLOSE, o.CloseArgs(next(self.seqid) if seqid is None else seqid, sid)),
        )

    def truncate(self, fh: bytes, sid: Stateid4, size: int = 0) -> None:
        """SETATTR size with the open's stateid."""
        attrs = encode_fattr({4: size})
        self.ok(
            op(OpNum4.OP_PUTFH, o.PutfhArgs(fh)),
            op(OpNum4.OP_SETATTR, o.SetattrArgs(sid, attrs)),
        )

    def getattr(self, path: str, *bits: int) -> dict[int, Any]:
        """GETATTR of ``bits`` of ``path``."""
        res = self.ok(*self.walk(path), op(OpNum4.OP_GETATTR, o.GetattrArgs(bitmap_of(bits))))
        return decode_fattr(res.results[-1].body)

    def listdir(self, path: str) -> list[str]:
        """READDIR (every page) of ``path``: the names."""
        names: list[str] = []
        cookie, verf = 0, bytes(8)
        while True:
            res = self.ok(
                *self.walk(path),
                op(OpNum4.OP_READDIR, o.ReaddirArgs(cookie, verf, 4096, 8192, bitmap_of([1, 20]))),
            )
            body = res.results[-1].body
            names += [e.name for e in body.entries]
            if body.eof:
                return names
            cookie, verf = body.entries[-1].cookie, body.cookieverf
