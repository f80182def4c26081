"""What `nfs.protocol.server.NfsServer` is made of, apart from its event loop (no asyncio here).

The protocol stack over a Vfs (`build_dispatcher`: NFSv3 + MOUNT v3 + optional port
mapper on one `Dispatcher`), `make_vfs` (a Vfs, or what a Vfs factory makes), the
resource bounds and counters (`ResourceLimits`, `ServerStats`), and the client commands
and URLs for a server at host:port. `nfs.protocol.server` re-exports the public names.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from nfs.protocol.drc import DuplicateRequestCache
from nfs.protocol.mount import MountService
from nfs.protocol.nfs3.handles import HandleCodec
from nfs.protocol.nfs3.program import nfs3_program
from nfs.protocol.nfs3.service import DEFAULT_LIMITS, Nfs3Limits, Nfs3Service
from nfs.protocol.nfs3.types import NFS_PROGRAM, NFS_V3, NfsProc3
from nfs.protocol.nfs4.service import Nfs4Service, nfs4_program
from nfs.protocol.nfs4.state import Nfs4State
from nfs.protocol.portmap import PortmapService
from nfs.protocol.rpc import CredentialPolicy, Dispatcher
from nfs.protocol.vfs import Vfs

__all__ = [
    "DEFAULT_RESOURCES",
    "NFS3_NON_IDEMPOTENT",
    "ResourceLimits",
    "ServerStats",
    "build_dispatcher",
    "default_max_connections",
    "make_vfs",
    "mount_command",
    "nfs_url",
    "unmount_command",
]

_FD_RESERVE: Final = 128
"""File descriptors kept free of connections: table files, spill files, the Delta log."""


NFS3_NON_IDEMPOTENT: Final = frozenset(
    (NFS_PROGRAM, NFS_V3, proc)
    for proc in (
        NfsProc3.NFSPROC3_SETATTR,
        NfsProc3.NFSPROC3_WRITE,
        NfsProc3.NFSPROC3_CREATE,
        NfsProc3.NFSPROC3_MKDIR,
        NfsProc3.NFSPROC3_SYMLINK,
        NfsProc3.NFSPROC3_MKNOD,
        NfsProc3.NFSPROC3_REMOVE,
        NfsProc3.NFSPROC3_RMDIR,
        NfsProc3.NFSPROC3_RENAME,
        NfsProc3.NFSPROC3_LINK,
        NfsProc3.NFSPROC3_COMMIT,
    )
)
"""The NFSv3 procedures whose retransmissions the duplicate-request cache answers (those
knfsd caches as RC_REPLBUFF and Ganesha marks CAN_BE_DUP; MOUNT's are not cached)."""


def default_max_connections() -> int:
    """Return a connection cap that leaves file descriptors for the rest of the server.

    Half of what the soft RLIMIT_NOFILE leaves after a reserve of 128, between 4 and
    1024 (a 1,024-fd limit gives 448).
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 16
    return max(4, min(1024, (soft - _FD_RESERVE) // 2))


@dataclass(frozen=True)
class ResourceLimits:
    """What one client, and all of them together, may make the server hold.

    Attributes:
        max_connections: open connections at most (None: `default_max_connections`).
            A new connection beyond it closes the connection idle the longest (no
            call in progress); if every connection is busy, the new one is closed.
        idle_timeout: seconds a connection may go without completing a record or
            receiving a reply before it is closed (a half-sent record does not
            count as activity). NFS clients reconnect transparently.
        max_connection_bytes: bytes of unfinished and queued records per
            connection; beyond it the connection is not read until its calls
            finish (TCP flow control holds the client back).
        max_buffered_bytes: the same, summed over all connections.
        max_fragments: fragments per record (see `nfs.protocol.record.RecordReader`).
    """

    max_connections: int | None = None
    idle_timeout: float = 300.0
    max_connection_bytes: int = 8 << 20
    max_buffered_bytes: int = 64 << 20
    max_fragments: int = 1024

    def connection_cap(self) -> int:
        """The effective `max_connections`."""
        return self.max_connections if self.max_connections else default_max_connections()


DEFAULT_RESOURCES: Final = ResourceLimits()


@dataclass(frozen=True)
class ServerStats:
    """Counters of a running `NfsServer` (a snapshot).

    Attributes:
        connections: open connections.
        buffered_bytes: bytes of unfinished and queued records held, all connections.
        paused_connections: connections not being read because of a memory budget.
        received_bytes: bytes read from clients since start.
        refused_connections: closed at once because every connection was busy.
        evicted_connections: idle connections closed (socket and all) to make room for
            a new one.
        idle_closed: connections closed by the idle timeout.
        accept_errors: accept() failures (e.g. EMFILE) since start.
    """

    connections: int = 0
    buffered_bytes: int = 0
    paused_connections: int = 0
    received_bytes: int = 0
    refused_connections: int = 0
    evicted_connections: int = 0
    idle_closed: int = 0
    accept_errors: int = 0


def make_vfs(vfs: Vfs | Callable[[], Vfs]) -> Vfs:
    """Return `vfs` if it is a `Vfs`, else what the factory `vfs` makes.

    The protocol knows no file system of its own: a table is served by giving the server
    a ``nfs.table.TableFs`` (or ``nfs.table.server.TableNfsServer`` a ``DatabaseOps``).

    Raises:
        TypeError: `vfs` is neither a Vfs nor a callable returning one.
    """
    if isinstance(vfs, Vfs):
        return vfs
    made = vfs() if callable(vfs) else None
    if not isinstance(made, Vfs):
        raise TypeError(f"expected a Vfs or a Vfs factory, got {type(vfs).__name__}")
    return made


def build_dispatcher(
    vfs: Vfs,
    *,
    portmap_port: Callable[[], int] | None = None,
    write_verifier: bytes | None = None,
    limits: Nfs3Limits = DEFAULT_LIMITS,
    credential_policy: CredentialPolicy | None = None,
    reply_cache: DuplicateRequestCache | None = None,
    nfs4_state: Nfs4State | None = None,
) -> Dispatcher:
    """Wire NFSv3, NFSv4.0 and MOUNT v3 (and the port mapper if `portmap_port` is given) over `vfs`.

    Args:
        vfs: the file system to serve.
        portmap_port: returns the port to advertise; None leaves the port mapper out.
        write_verifier: WRITE/COMMIT verifier; random per call (per boot) by default.
        limits: FSINFO sizes.
        credential_policy: applied to every call's credentials (e.g. an
            ``nfs.protocol.identity.IdentityPolicy``: root squash, privileged ports).
        reply_cache: the duplicate-request cache; by default a new one for
            `NFS3_NON_IDEMPOTENT` (knfsd's bounds: 120 s per reply).
        nfs4_state: the NFSv4 client and open state (leases, grace); by default a new one
            recording its clients in the Vfs's ``state_dir`` when it has one (a restart
            then gives them a grace period to reclaim their opens), else without grace.
    """
    handles = HandleCodec(vfs)
    nfs = Nfs3Service(vfs, handles=handles, write_verifier=write_verifier, limits=limits)
    dispatcher = Dispatcher(
        [nfs3_program(nfs), MountService(vfs, handles).rpc_program()],
        credential_policy=credential_policy,
        reply_cache=reply_cache or DuplicateRequestCache(NFS3_NON_IDEMPOTENT),
    )
    # NFSv4.0 beside v3: the same Vfs, handles and credential policy (nfs.protocol.nfs4)
    dispatcher.register(
        nfs4_program(
            Nfs4Service(
                vfs,
                handles=handles,
                write_verifier=nfs.write_verifier,
                limits=limits,
                state=nfs4_state or _nfs4_state(vfs),
            )
        )
    )
    if portmap_port is not None:
        dispatcher.register(PortmapService(portmap_port).rpc_program())
    return dispatcher


def _nfs4_state(vfs: Vfs) -> Nfs4State:
    """NFSv4 state keeping its client records in the Vfs's ``state_dir`` (TableFs has one),
    so a restart gives a grace period to the clients that held state; none without one."""
    state_dir = getattr(vfs, "state_dir", None)
    if isinstance(state_dir, (str, os.PathLike)) and os.path.isdir(state_dir):
        return Nfs4State(records=os.path.join(state_dir, "nfs4-clients"))
    return Nfs4State(grace_seconds=0)


def nfs_url(host: str, port: int, path: str = "/") -> str:
    """Return a libnfs URL for `path` on the server at host:port (for nfs-cat, nfs-ls, nfs-cp).

    libnfs mounts the parent directory of the file; for a file directly in
    the root that is the empty path, which libnfs 4.0 only handles with
    ``auto-traverse-mounts=0`` (we have a single export, nothing to traverse).
    """
    if not path.startswith("/"):
        path = "/" + path
    return f"nfs://{host}{path}?version=3&nfsport={port}&mountport={port}&auto-traverse-mounts=0"


def mount_command(
    host: str, port: int, mount_point: str, *, platform: str = sys.platform
) -> list[str]:
    """Return the command (argv) that mounts the export of host:port at ``mount_point``.

    Linux and macOS: MOUNT and NFS share one port, given to the client, so no
    portmapper is needed; there is no lock service (``nolock``/``nolocks``) and, on
    Linux, no NFSACL (``noacl``). Windows (``platform="win32"``, the "Client for NFS"
    feature): ``mount.exe`` takes no port and asks the port mapper on port 111, so
    start the server with ``portmapper=True, portmap_port=111``; ``mount_point`` is
    a drive letter such as ``Z:``.

    Args:
        host: the server's address.
        port: its NFS and MOUNT port.
        mount_point: a directory (Linux, macOS) or a drive letter (Windows).
        platform: ``sys.platform`` of the client: ``linux``, ``darwin`` or ``win32``.
    """
    if platform == "win32":
        return ["mount.exe", "-o", "anon,nolock,mtype=hard", rf"\\{host}\share", mount_point]
    if platform == "darwin":
        opts = f"vers=3,tcp,port={port},mountport={port},nolocks,resvport"
    else:
        opts = f"vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock,noacl"
    return ["sudo", "mount", "-t", "nfs", "-o", opts, f"{host}:/", mount_point]


def unmount_command(mount_point: str, *, platform: str = sys.platform) -> list[str]:
    """Return the command (argv) that unmounts ``mount_point`` (see `mount_command`)."""
    if platform == "win32":
        return ["umount.exe", "-f", mount_point]
    return ["sudo", "umount", mount_point]
