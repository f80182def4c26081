"""``posixlake serve``: the table as CSV files over NFSv3, in the foreground."""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Final, Protocol

import click

from cli._common import (
    echo_json,
    engine_options,
    get_options,
    json_option,
    open_table,
    storage_options,
    table_argument,
    user_option,
)
from posixlake.errors import InvalidOperation, IoError

if TYPE_CHECKING:
    from nfs.lake import LakeFs
    from nfs.protocol.vfs import FileId, Vfs
    from nfs.table.access import TableEntries, UserMap
    from posixlake import DatabaseOps

__all__ = ["COMMANDS", "mount_commands"]

logger = logging.getLogger(__name__)

LINUX_MOUNT_POINT: Final = "/mnt/posixlake"
MACOS_MOUNT_POINT: Final = "/Volumes/posixlake"
_LOOPBACK: Final = ("127.0.0.1", "::1", "localhost")


def _mount_host(host: str) -> str:
    """Return the address a client mounts: this machine's name for a wildcard bind."""
    if host in ("0.0.0.0", "::", ""):
        return socket.gethostname()
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host


def libnfs_url(host: str, port: int, path: str = "/") -> str:
    """Return the libnfs URL (``nfs-ls``, ``nfs-cat``, ``nfs-cp``) of ``path`` on the share.

    libnfs needs both ports in the URL (no portmapper): ``?nfsport=P&mountport=P``.
    """
    return f"nfs://{_mount_host(host)}{path}?version=3&nfsport={port}&mountport={port}"


def mount_commands(host: str, port: int) -> dict[str, str]:
    """Return the commands that mount a posixlake share on Linux and on macOS, and the
    libnfs commands that read it without a mount.

    No portmapper is needed: MOUNT and NFS share ``port``. ``nolock``/``nolocks``:
    there is no NLM lock service; ``noacl``: no NFSACL protocol on Linux.
    """
    where = _mount_host(host)
    return {
        "nfs_ls": f"nfs-ls '{libnfs_url(host, port, '/')}'",
        "nfs_cat": f"nfs-cat '{libnfs_url(host, port, '/data/data.csv')}'",
        "linux": (
            f"sudo mount -t nfs -o vers=3,proto=tcp,port={port},mountport={port},"
            f"mountproto=tcp,nolock,noacl {where}:/ {LINUX_MOUNT_POINT}"
        ),
        "linux_v4": (
            f"sudo mount -t nfs -o vers=4.0,proto=tcp,port={port} {where}:/ {LINUX_MOUNT_POINT}"
        ),
        "macos": (
            f"sudo mount -t nfs -o vers=3,tcp,port={port},mountport={port},nolocks,resvport "
            f"{where}:/ {MACOS_MOUNT_POINT}"
        ),
        "macos_v4": (
            f"sudo mount -t nfs -o vers=4.0,tcp,port={port},resvport {where}:/ {MACOS_MOUNT_POINT}"
        ),
    }


def _notify(message: str) -> None:
    """Tell a service manager (systemd ``Type=notify``) about our state, if it asked."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(message.encode("utf-8"), address)
    except OSError as err:
        logger.warning("cannot notify %s: %s", os.environ.get("NOTIFY_SOCKET"), err)


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[list[str]]:
    """Set ``stop`` on SIGINT or SIGTERM (restoring the old handlers after).

    The handler runs in the main thread between two bytecodes, possibly while that thread
    holds ``stop``'s own lock (inside ``stop.wait()``): setting the event there would wait
    for itself forever. A short thread sets it instead, once the main thread lets go.
    """
    received: list[str] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signal.Signals(signum).name)
        threading.Thread(target=stop.set, name="posixlake-stop", daemon=True).start()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class _Serving(Protocol):
    """What :func:`serve_until_stopped` needs of an NFS server."""

    @property
    def port(self) -> int: ...

    def is_ready(self) -> bool: ...


def serve_until_stopped(
    server: _Serving, stop: threading.Event, received: list[str], what: str
) -> None:
    """Tell systemd the server is ready (``what``: "<table or lake> on <host>"), wait for
    ``stop`` (a signal), failing if the server dies meanwhile, and tell systemd it stops."""
    _notify(f"READY=1\nSTATUS=serving {what}:{server.port}\n")
    while not stop.wait(1.0):
        if not server.is_ready():
            raise IoError("the NFS server stopped unexpectedly")
    _notify("STOPPING=1\n")
    logger.info("stopping on %s", ", ".join(received))


def _warn_if_exposed(host: str, port: int, mode: str) -> None:
    if host not in _LOOPBACK:
        click.echo(
            f"Warning: listening on {host}: NFS clients are not authenticated, "
            f"anyone who reaches port {port} gets a {mode} share",
            err=True,
        )


@click.command()
@table_argument
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0: every interface; NFS clients are not authenticated).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=2049,
    show_default=True,
    help="TCP port for MOUNT and NFS (0 picks a free one).",
)
@click.option("--read-only", is_flag=True, help="Refuse every change through the share.")
@click.option(
    "--idle-commit",
    "idle_seconds",
    type=click.FloatRange(0.1, None),
    default=5.0,
    show_default=True,
    help="Seconds without a write after which a writer is done and its edit is applied "
    "(NFSv3 has no close: a COMMIT only makes bytes durable). Longer than a producer's "
    "pauses.",
)
@click.option(
    "--abandon-after",
    "abandon_seconds",
    type=click.FloatRange(1.0, None),
    default=3600.0,
    show_default=True,
    help="Seconds after which a staged write that can never apply (it ends mid-line, or "
    "is a truncation alone) is given up, logged and reported to its writer.",
)
@click.option(
    "--segment-cache",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory of cached CSV segments (safe to delete); default "
    "$POSIXLAKE_SEGMENT_CACHE or ~/.cache/posixlake/segments.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Local directory for the server's durable state (the write journal); default "
    "$POSIXLAKE_STATE_DIR or ~/.local/state/posixlake.",
)
@click.option(
    "--root-squash/--no-root-squash",
    default=True,
    show_default=True,
    help="Treat a client's root (uid/gid 0) as nobody (65534).",
)
@click.option(
    "--require-privileged-port",
    is_flag=True,
    help="Refuse calls from client ports >= 1024 (only root can bind lower ones).",
)
@click.option(
    "--map-uid",
    "map_uid",
    multiple=True,
    metavar="UID=USER",
    help=(
        "Act for AUTH_SYS uid UID as the table's user USER, whose roles then apply to "
        "data.csv (repeatable; *=USER for any other uid). With a map, an unmapped uid "
        "cannot read or change the table. Needs a table with users."
    ),
)
@click.option(
    "--max-connections",
    type=click.IntRange(1),
    default=None,
    help="Open connections at most (default: from the open-file limit); the idlest goes first.",
)
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    help="Close a connection after this many seconds without a complete call.",
)
@click.option(
    "--http",
    "http_listen",
    metavar="HOST:PORT",
    default=None,
    help="Also serve /healthz, /readyz, /metrics (Prometheus) and a read-only JSON API "
    "(/api/v1/tables...) over HTTP; loopback unless HOST says otherwise (see docs/cli.md).",
)
@click.option(
    "--http-token",
    envvar="POSIXLAKE_HTTP_TOKEN",
    default=None,
    help="Bearer token the HTTP API and /metrics require (needed to listen beyond "
    "loopback); prefer $POSIXLAKE_HTTP_TOKEN to the command line.",
)
@engine_options
@storage_options
@user_option
@json_option
def serve(
    table: str,
    host: str,
    port: int,
    read_only: bool,
    idle_seconds: float,
    abandon_seconds: float,
    segment_cache: str | None,
    state_dir: str | None,
    root_squash: bool,
    require_privileged_port: bool,
    map_uid: tuple[str, ...],
    max_connections: int | None,
    idle_timeout: float,
    http_listen: str | None,
    http_token: str | None,
) -> None:
    """Serve the table over NFSv3 as CSV files, until Ctrl-C or SIGTERM.

    \b
    The share holds:
      /data/data.csv          the table (read it; write it to insert, update, delete)
      /schema.sql             CREATE TABLE of the table
      /versions/N/data.csv    the table at version N (read-only time travel)
    With --user, the share can do what that user may do (a read user's is read-only).
    An edit is applied when its writer is done: --idle-commit seconds after its
    last write (a rename onto data.csv and echo >> at once). Staged writes are journaled
    in --state-dir; on Ctrl-C or SIGTERM unfinished ones stay there and the next
    serve of the table recovers them.
    AUTH_SYS identities are asserted by the client, not proven: see docs/nfs-security.md.
    A TABLE that is a directory or prefix of tables (no _delta_log/ in it) is served as a
    lake: every table under it is a directory holding the files above (docs/cli.md).

    \b
    Examples:
      posixlake serve /data/sales --port 2049
      posixlake serve /data/sales --port 0 --read-only --user analyst
      posixlake serve /data/sales --user admin --map-uid 1000=ana --map-uid '*=viewer'
    """
    from nfs.protocol.identity import IdentityPolicy
    from nfs.protocol.server import (  # imported here: other commands start faster
        NfsServer,
        ResourceLimits,
    )
    from nfs.table.access import UserMap
    from nfs.table.tablefs import TableFs

    opts = get_options()
    stop = threading.Event()
    listen = None
    if http_listen is not None:
        from cli._control import check_listen

        listen = check_listen(http_listen, http_token)
    try:
        user_map = UserMap.parse(map_uid) if map_uid else None
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--map-uid") from err
    from cli._lake import lake_root

    root = lake_root(table)
    if root is not None:  # not a table but a directory of tables: the lake
        from cli._lake import open_lake

        lake = open_lake(
            root,
            read_only=read_only,
            state_dir=state_dir,
            wrap=None if user_map is None else (lambda db, fs: per_user_vfs(db, fs, user_map)),
            idle_seconds=idle_seconds,
            abandon_seconds=abandon_seconds,
            segment_cache=segment_cache,
        )
        serve_lake(
            lake,
            host=host,
            port=port,
            read_only=read_only,
            server_options={
                "resources": ResourceLimits(
                    max_connections=max_connections, idle_timeout=idle_timeout
                ),
                "credential_policy": IdentityPolicy(
                    root_squash=root_squash, require_privileged_port=require_privileged_port
                ),
            },
            http=None if listen is None else (listen, http_token),
        )
        return
    with open_table(table, computes=True, shared=False) as db:  # runs for hours
        mode = "read-only" if read_only or not db.authorizer.allows("write") else "read-write"
        try:
            fs = TableFs(
                db,
                read_only=read_only,
                idle_seconds=idle_seconds,
                abandon_seconds=abandon_seconds,
                state_dir=state_dir,
                segment_cache=segment_cache,
            )
        except OSError as err:
            raise IoError(f"cannot use the state directory: {err}") from err
        try:
            vfs = per_user_vfs(db, fs, user_map)
        except InvalidOperation:
            fs.close()
            raise
        try:  # before listening, so that no client call pays for opening the table
            open_table_view(fs, db)
        except BaseException:
            fs.close()
            raise
        try:
            server = NfsServer(
                vfs,
                port,
                host,
                resources=ResourceLimits(
                    max_connections=max_connections, idle_timeout=idle_timeout
                ),
                credential_policy=IdentityPolicy(
                    root_squash=root_squash, require_privileged_port=require_privileged_port
                ),
            )
        except OSError as err:
            raise IoError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
        plane = None
        try:
            if listen is not None:
                from cli._control import serving_plane

                plane = serving_plane(db, server, listen, http_token, share=fs)
            with _stop_on_signals(stop) as received:
                mounts = mount_commands(host, server.port)
                if opts.json:
                    echo_json(
                        {
                            "event": "listening",
                            "table": db.uri,
                            "host": host,
                            "port": server.port,
                            "mode": mode,
                            "mount": mounts,
                            "http": plane.url if plane else None,
                        }
                    )
                else:
                    _print_banner(db.uri, host, server.port, mode, mounts)
                    if plane is not None:
                        click.echo(f"HTTP: {plane.url}/metrics, /healthz, /readyz, /api/v1/tables")
                _warn_if_exposed(host, server.port, mode)
                serve_until_stopped(server, stop, received, f"{db.uri} on {host}")
        finally:
            if plane is not None:
                plane.stop()
            server.shutdown()
        version = db.version
    if opts.json:
        echo_json(
            {
                "event": "stopped",
                "table": db.uri,
                "version": version,
                "unfinished_writes": fs.unfinished_at_close,
            }
        )
    else:
        kept = fs.unfinished_at_close
        note = f" {kept} unfinished write(s) kept for the next start." if kept else ""
        click.echo(f"Stopped. {db.uri} is at version {version}.{note}")


def serve_lake(
    lake: LakeFs,
    *,
    host: str,
    port: int,
    read_only: bool,
    server_options: dict[str, object],
    http: tuple[tuple[str, int], str | None] | None = None,
) -> None:
    """Serve ``lake`` over NFS until Ctrl-C or SIGTERM (as ``serve`` serves a table);
    ``http``: the address and token of its HTTP control plane (``--http``)."""
    from nfs.protocol.server import NfsServer

    opts = get_options()
    mode = "read-only" if read_only else "read-write"
    try:
        server = NfsServer(lake, port, host, **server_options)  # type: ignore[arg-type]
    except OSError as err:
        lake.close()
        raise IoError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
    stop = threading.Event()
    plane = None
    try:
        if http is not None:
            from cli._lake import lake_plane

            plane = lake_plane(lake, server, *http)
        with _stop_on_signals(stop) as received:
            mounts = mount_commands(host, server.port)
            if opts.json:
                echo_json(
                    {
                        "event": "listening",
                        "lake": lake.root,
                        "tables": len(lake.tables()),
                        "host": host,
                        "port": server.port,
                        "mode": mode,
                        "mount": mounts,
                        "http": plane.url if plane else None,
                    }
                )
            else:
                _print_banner(lake.root, host, server.port, mode, mounts, lake=True)
                if plane is not None:
                    click.echo(f"HTTP: {plane.url}/metrics, /healthz, /readyz, /api/v1/tables")
            _warn_if_exposed(host, server.port, mode)
            serve_until_stopped(server, stop, received, f"{lake.root} on {host}")
    finally:
        if plane is not None:  # first: its open change streams end, their tables are let go
            plane.stop()
        server.shutdown()  # closes the lake, and with it every open table
    kept = lake.unfinished_at_close
    if opts.json:
        echo_json({"event": "stopped", "lake": lake.root, "unfinished_writes": kept})
    else:
        note = f" {kept} unfinished write(s) kept for the next start." if kept else ""
        click.echo(f"Stopped serving the lake {lake.root}.{note}")


OPEN_AT_START_ROWS: Final = 1_000_000
"""Tables up to this many rows have data.csv opened (rendered if need be) before serving."""


def open_table_view(fs: Vfs, db: DatabaseOps, *, max_rows: int = OPEN_AT_START_ROWS) -> bool:
    """Open what a client's first call on ``fs`` (a TableFs of ``db``) needs; call before listening.

    Otherwise the first GETATTR or READ of ``/data/data.csv`` pays for it, and competes
    with the CSV codec's lazy imports (pyarrow loads pandas on first use, 0.3-0.8 s of
    CPU, which TableFs starts in the background): the current version's snapshot and
    history, its segment index (the cached per-file segments, mapped) and commit time.
    A table of more than ``max_rows`` rows whose segments are not cached yet would be
    rendered whole here, delaying the start: for those only the codec and the file list
    are opened, and the first read renders.

    Returns:
        Whether data.csv's rendering was opened (False: the table is larger than
        ``max_rows``, unhealthy, or the server's user may not read it).
    """
    import pyarrow as pa

    from nfs.protocol.vfs import NfsError
    from nfs.table.tablefs import DATA_CSV_ID
    from posixlake.csvcodec import render_csv

    # waits for the background warm-up's imports if it is running (the import lock)
    render_csv(pa.table({"x": pa.array([1.5], pa.float64()), "y": pa.array(["a"])}))
    if not db.authorizer.allows("read"):
        return False
    health = db.health_check()  # the current version and its files, listed once
    if health.status != "healthy" or health.rows > max_rows:
        return False
    try:
        fs.getattr(DATA_CSV_ID)
    except NfsError as err:  # the first client call gets the error itself
        logger.warning("cannot open %s before serving: %s", db.uri, err)
        return False
    return True


def table_entries() -> TableEntries:
    """Where ``nfs.table.tablefs.TableFs`` keeps the table's own files (for per-user checks)."""
    from nfs.table.access import TableEntries
    from nfs.table.tablefs import DATA_CSV_ID, DATA_DIR_ID, is_changes, version_of

    def holds_rows(fid: FileId) -> bool:
        """/versions/<N>/data.csv, /changes.csv and /versions/<N>/changes.csv."""
        version = version_of(fid)  # /versions/<N>/data.csv: (N, True)
        return (version is not None and version[1]) or is_changes(fid)

    return TableEntries(DATA_DIR_ID, "data.csv", DATA_CSV_ID, holds_rows)


def per_user_vfs(db: DatabaseOps, fs: Vfs, user_map: UserMap | None) -> Vfs:
    """Return ``fs`` (a TableFs of ``db``), wrapped so that mapped users' roles apply.

    Raises:
        InvalidOperation: a map on a table without users, or naming an unknown user.
    """
    from nfs.table.access import TableAccessVfs, UserPermissions

    if user_map is None:
        return fs
    list_users = getattr(db.authorizer, "list_users", None)
    if list_users is None:
        raise InvalidOperation(f"--map-uid: {db.uri} has no users (see posixlake users --help)")

    def load() -> dict[str, frozenset[str]]:
        return {u.name: frozenset(u.permissions) for u in list_users()}

    permissions = UserPermissions(load)
    unknown = sorted(user_map.names() - load().keys())
    if unknown:
        raise InvalidOperation(f"--map-uid: no such user in {db.uri}: {', '.join(unknown)}")
    return TableAccessVfs(fs, table_entries(), user_map, permissions.of)


def _print_banner(
    uri: str, host: str, port: int, mode: str, mounts: dict[str, str], *, lake: bool = False
) -> None:
    what = f"the lake {uri} (every table a directory)" if lake else uri
    click.echo(f"Serving {what} over NFSv3 and NFSv4.0 on {host}:{port} ({mode})")
    click.echo("")
    click.echo("Mount on Linux (NFSv4.0: an edit applies when the file is closed):")
    click.echo(f"  sudo mkdir -p {LINUX_MOUNT_POINT}")
    click.echo(f"  {mounts['linux_v4']}")
    click.echo("or NFSv3 (an edit applies once its writer is idle):")
    click.echo(f"  {mounts['linux']}")
    click.echo("Mount on macOS (NFSv4.0):")
    click.echo(f"  sudo mkdir -p {MACOS_MOUNT_POINT}")
    click.echo(f"  {mounts['macos_v4']}")
    click.echo("or NFSv3:")
    click.echo(f"  {mounts['macos']}")
    click.echo("")
    example = "TABLE/data/data.csv" if lake else "data/data.csv"
    click.echo(f"Then: cat {LINUX_MOUNT_POINT}/{example}; unmount with sudo umount.")
    click.echo("Without mounting (libnfs-utils):")
    click.echo(f"  {mounts['nfs_ls']}")
    click.echo(f"  {mounts['nfs_cat']}")
    click.echo("Press Ctrl-C to stop.")


COMMANDS: Final[list[click.Command]] = [serve]
