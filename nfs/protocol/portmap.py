"""Port mapper version 2 (RFC 1833 §3): tell clients where MOUNT and NFS listen.

Optional: a client given explicit ports never asks. When enabled, the program
answers GETPORT for NFS v3 and MOUNT v3 over TCP with our one port (and 0,
"not registered", for anything else), lists those mappings in DUMP, and refuses
SET / UNSET (the table is fixed). Sans-IO: the port comes from a callable,
because it is known only once the transport has bound its socket.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from nfs.protocol.rpc import VOID, CallContext, RpcProcedure, RpcProgram, Void
from nfs.protocol.xdr import Packer, Unpacker

__all__ = [
    "IPPROTO_TCP",
    "IPPROTO_UDP",
    "PMAP_PROGRAM",
    "PMAP_V2",
    "Mapping",
    "PmapBool",
    "PmapList",
    "PmapPort",
    "PmapProc",
    "PortmapService",
]

PMAP_PROGRAM: Final = 100000
PMAP_V2: Final = 2
IPPROTO_TCP: Final = 6
IPPROTO_UDP: Final = 17


class PmapProc(enum.IntEnum):
    """Port mapper v2 procedure numbers (RFC 1833 §3.2)."""

    PMAPPROC_NULL = 0
    PMAPPROC_SET = 1
    PMAPPROC_UNSET = 2
    PMAPPROC_GETPORT = 3
    PMAPPROC_DUMP = 4


@dataclass(frozen=True)
class Mapping:
    """mapping (RFC 1833 §3.1): program, version, protocol and port."""

    prog: int
    vers: int
    prot: int
    port: int

    def pack(self, p: Packer) -> None:
        """Append the four numbers."""
        p.pack_uint(self.prog)
        p.pack_uint(self.vers)
        p.pack_uint(self.prot)
        p.pack_uint(self.port)

    @classmethod
    def unpack(cls, u: Unpacker) -> Mapping:
        """Read the four numbers."""
        return cls(u.unpack_uint(), u.unpack_uint(), u.unpack_uint(), u.unpack_uint())


@dataclass(frozen=True)
class PmapPort:
    """The GETPORT result: a port, 0 if the program is not registered."""

    port: int

    def pack(self, p: Packer) -> None:
        """Append the port."""
        p.pack_uint(self.port)

    @classmethod
    def unpack(cls, u: Unpacker) -> PmapPort:
        """Read the port."""
        return cls(u.unpack_uint())


@dataclass(frozen=True)
class PmapBool:
    """The SET / UNSET result."""

    value: bool

    def pack(self, p: Packer) -> None:
        """Append the boolean."""
        p.pack_bool(self.value)

    @classmethod
    def unpack(cls, u: Unpacker) -> PmapBool:
        """Read the boolean."""
        return cls(u.unpack_bool())


@dataclass(frozen=True)
class PmapList:
    """pmaplist (RFC 1833 §3.1): the DUMP result."""

    mappings: tuple[Mapping, ...] = ()

    def pack(self, p: Packer) -> None:
        """Append the linked list."""
        p.pack_list(self.mappings, lambda m: m.pack(p))

    @classmethod
    def unpack(cls, u: Unpacker) -> PmapList:
        """Read the linked list."""
        return cls(tuple(u.unpack_list(lambda: Mapping.unpack(u))))


class PortmapService:
    """A fixed port mapper: the given (program, version) pairs, TCP, on one port.

    Args:
        port: returns the port MOUNT and NFS listen on.
        programs: the (program, version) pairs to advertise; NFS v3, MOUNT v3
            and the port mapper itself by default.
    """

    def __init__(
        self,
        port: Callable[[], int],
        programs: tuple[tuple[int, int], ...] = ((100003, 3), (100005, 3), (PMAP_PROGRAM, PMAP_V2)),
    ) -> None:
        self._port = port
        self._programs = programs

    def mappings(self) -> tuple[Mapping, ...]:
        """Return the advertised mappings."""
        port = self._port()
        return tuple(Mapping(prog, vers, IPPROTO_TCP, port) for prog, vers in self._programs)

    def rpc_program(self) -> RpcProgram:
        """Return the port mapper program (100000 v2)."""
        return RpcProgram(
            PMAP_PROGRAM,
            PMAP_V2,
            {
                PmapProc.PMAPPROC_NULL: RpcProcedure("PMAPPROC_NULL", Void.unpack, self.null),
                PmapProc.PMAPPROC_SET: RpcProcedure("PMAPPROC_SET", Mapping.unpack, self.set),
                PmapProc.PMAPPROC_UNSET: RpcProcedure("PMAPPROC_UNSET", Mapping.unpack, self.set),
                PmapProc.PMAPPROC_GETPORT: RpcProcedure(
                    "PMAPPROC_GETPORT", Mapping.unpack, self.getport
                ),
                PmapProc.PMAPPROC_DUMP: RpcProcedure("PMAPPROC_DUMP", Void.unpack, self.dump),
            },
        )

    def null(self, args: Void, ctx: CallContext) -> Void:
        """PMAPPROC_NULL: do nothing."""
        return VOID

    def set(self, args: Mapping, ctx: CallContext) -> PmapBool:
        """PMAPPROC_SET / PMAPPROC_UNSET: refused, the table is fixed."""
        return PmapBool(False)

    def getport(self, args: Mapping, ctx: CallContext) -> PmapPort:
        """PMAPPROC_GETPORT: our port for an advertised program over TCP, else 0."""
        if args.prot == IPPROTO_TCP and (args.prog, args.vers) in self._programs:
            return PmapPort(self._port())
        return PmapPort(0)

    def dump(self, args: Void, ctx: CallContext) -> PmapList:
        """PMAPPROC_DUMP: the advertised mappings."""
        return PmapList(self.mappings())
