"""ONC RPC authentication (RFC 5531 §8.2, §9, Appendix A): AUTH_NONE and AUTH_SYS.

`OpaqueAuth` is a call's credential or verifier on the wire; `Credentials` is who is
calling as the Vfs sees it (AUTH_SYS uid, gid, groups; AUTH_NONE is nobody).
`nfs.protocol.rpc` re-exports every name. Pure: imports only `nfs.protocol.xdr`.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from nfs.protocol.xdr import Packer, Unpacker, XdrError

__all__ = [
    "AUTH_NONE_BODY",
    "MAX_AUTH_BYTES",
    "NOBODY",
    "AuthError",
    "AuthFlavor",
    "AuthStat",
    "AuthSysParms",
    "Credentials",
    "OpaqueAuth",
]

MAX_AUTH_BYTES: Final = 400
"""RFC 5531 §8.2: the body of an opaque_auth is at most 400 bytes."""

NOBODY: Final = 65534
"""uid and gid given to AUTH_NONE callers."""


class AuthStat(enum.IntEnum):
    """auth_stat (RFC 5531 §9)."""

    AUTH_OK = 0
    AUTH_BADCRED = 1
    AUTH_REJECTEDCRED = 2
    AUTH_BADVERF = 3
    AUTH_REJECTEDVERF = 4
    AUTH_TOOWEAK = 5
    AUTH_INVALIDRESP = 6
    AUTH_FAILED = 7


class AuthFlavor(enum.IntEnum):
    """auth_flavor (RFC 5531 §8.2, §A)."""

    AUTH_NONE = 0
    AUTH_SYS = 1
    AUTH_SHORT = 2
    AUTH_DH = 3
    RPCSEC_GSS = 6


class AuthError(Exception):
    """A credential or verifier the server refuses (MSG_DENIED / AUTH_ERROR)."""

    def __init__(self, stat: AuthStat, message: str = "") -> None:
        super().__init__(message or stat.name)
        self.stat = stat


@dataclass(frozen=True)
class OpaqueAuth:
    """opaque_auth (RFC 5531 §8.2): a flavor and up to 400 bytes of body."""

    flavor: int = AuthFlavor.AUTH_NONE
    body: bytes = b""

    def pack(self, p: Packer) -> None:
        """Append flavor and body."""
        p.pack_uint(self.flavor)
        p.pack_opaque(self.body, MAX_AUTH_BYTES)

    @classmethod
    def unpack(cls, u: Unpacker) -> OpaqueAuth:
        """Read flavor and body; a body over 400 bytes raises `XdrError`."""
        return cls(u.unpack_uint(), u.unpack_opaque(MAX_AUTH_BYTES))


AUTH_NONE_BODY: Final = OpaqueAuth()


@dataclass(frozen=True)
class AuthSysParms:
    """authsys_parms (RFC 5531 §A.2): the body of an AUTH_SYS credential."""

    stamp: int = 0
    machinename: str = ""
    uid: int = 0
    gid: int = 0
    gids: tuple[int, ...] = ()

    def pack(self, p: Packer) -> None:
        """Append the parameters."""
        if len(self.gids) > 16:
            raise XdrError("AUTH_SYS allows at most 16 groups")
        p.pack_uint(self.stamp)
        p.pack_string(self.machinename, 255)
        p.pack_uint(self.uid)
        p.pack_uint(self.gid)
        p.pack_array(self.gids, p.pack_uint)

    @classmethod
    def unpack(cls, u: Unpacker) -> AuthSysParms:
        """Read the parameters (machinename <= 255 bytes, <= 16 gids)."""
        return cls(
            stamp=u.unpack_uint(),
            machinename=u.unpack_string(255),
            uid=u.unpack_uint(),
            gid=u.unpack_uint(),
            gids=tuple(u.unpack_array(u.unpack_uint, 16)),
        )

    def to_opaque(self) -> OpaqueAuth:
        """Return these parameters as an AUTH_SYS opaque_auth."""
        p = Packer()
        self.pack(p)
        return OpaqueAuth(AuthFlavor.AUTH_SYS, p.get_buffer())


@dataclass(frozen=True)
class Credentials:
    """Who is calling, as the VFS sees it.

    AUTH_SYS gives uid, gid, supplementary gids and the machine name; AUTH_NONE
    callers get uid and gid 65534 (nobody).
    """

    flavor: AuthFlavor = AuthFlavor.AUTH_NONE
    uid: int = NOBODY
    gid: int = NOBODY
    gids: tuple[int, ...] = ()
    machinename: str = ""

    @classmethod
    def from_auth(cls, cred: OpaqueAuth) -> Credentials:
        """Decode a call's credential (RFC 5531 §8.2, §A).

        Raises:
            AuthError: AUTH_BADCRED for a malformed AUTH_SYS body, AUTH_REJECTEDCRED
                for a flavor we do not accept (only AUTH_NONE and AUTH_SYS are).
        """
        return cls.of(cred.flavor, cred.body)

    @staticmethod
    def of(flavor: int, body: bytes) -> Credentials:
        """`from_auth` of a credential given as its flavor and body (a call's header
        decoded in one go; no `OpaqueAuth` made for it).

        Raises:
            AuthError: as `from_auth`.
        """
        if flavor == AuthFlavor.AUTH_SYS:
            # the stamp (the first word) differs per client process and tells nothing of
            # who calls: the rest is the cache's key, so a new process is no miss
            if len(body) < 4:
                raise AuthError(AuthStat.AUTH_BADCRED, "AUTH_SYS credential without its stamp")
            return _auth_sys_credentials(body[4:])
        if flavor == AuthFlavor.AUTH_NONE:
            return _ANONYMOUS
        raise AuthError(AuthStat.AUTH_REJECTEDCRED, f"auth flavor {flavor} not supported")

    @classmethod
    def sys(
        cls, uid: int = 0, gid: int = 0, gids: Iterable[int] = (), machinename: str = ""
    ) -> Credentials:
        """Build AUTH_SYS credentials (for tests and local callers)."""
        return cls(AuthFlavor.AUTH_SYS, uid, gid, tuple(gids), machinename)

    def in_group(self, gid: int) -> bool:
        """Return whether `gid` is the primary or a supplementary group."""
        return gid == self.gid or gid in self.gids


_ANONYMOUS: Final = Credentials()


@functools.lru_cache(maxsize=1024)
def _auth_sys_credentials(unstamped: bytes) -> Credentials:
    """Decode an AUTH_SYS body without its stamp (cached: a client sends the same one on
    every call)."""
    u = Unpacker(b"\0\0\0\0" + unstamped)
    try:
        parms = AuthSysParms.unpack(u)
        u.done()
    except XdrError as err:
        raise AuthError(AuthStat.AUTH_BADCRED, str(err)) from err
    return Credentials(AuthFlavor.AUTH_SYS, parms.uid, parms.gid, parms.gids, parms.machinename)
