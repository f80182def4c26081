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
from typing import Final

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
from posixlake.errors import IoError

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


def mount_commands(host: str, port: int) -> dict[str, str]:
    """Return the commands that mount a posixlake share on Linux and on macOS.

    No portmapper is needed: MOUNT and NFS share ``port``. ``nolock``/``nolocks``:
    there is no NLM lock service; ``noacl``: no NFSACL protocol on Linux.
    """
    where = _mount_host(host)
    return {
        "linux": (
            f"sudo mount -t nfs -o vers=3,proto=tcp,port={port},mountport={port},"
            f"mountproto=tcp,nolock,noacl {where}:/ {LINUX_MOUNT_POINT}"
        ),
        "macos": (
            f"sudo mount -t nfs -o vers=3,tcp,port={port},mountport={port},nolocks,resvport "
            f"{where}:/ {MACOS_MOUNT_POINT}"
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
    """Set ``stop`` on SIGINT or SIGTERM (restoring the old handlers after)."""
    received: list[str] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


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
    help="Seconds without a write after which a writer that never COMMITs (a -o sync "
    "mount) is done and its rewrite is applied (content on a line boundary only).",
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
) -> None:
    """Serve the table over NFSv3 as CSV files, until Ctrl-C or SIGTERM.

    \b
    The share holds:
      /data/data.csv          the table (read it; write it to insert, update, delete)
      /schema.sql             CREATE TABLE of the table
      /versions/N/data.csv    the table at version N (read-only time travel)
    With --user, the share can do what that user may do (a read user's is read-only).
    An edit is applied when its writer is done: at close() (COMMIT), or after
    --idle-commit seconds for clients that never COMMIT. Staged writes are journaled
    in --state-dir; on Ctrl-C or SIGTERM unfinished ones stay there and the next
    serve of the table recovers them.

    \b
    Examples:
      posixlake serve /data/sales --port 2049
      posixlake serve /data/sales --port 0 --read-only --user analyst
    """
    from nfs.server import NfsServer  # imported here: other commands start faster
    from nfs.tableview import TableFs

    opts = get_options()
    stop = threading.Event()
    with open_table(table, computes=True) as db:
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
            server = NfsServer(fs, port, host)
        except OSError as err:
            raise IoError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
        try:
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
                        }
                    )
                else:
                    _print_banner(db.uri, host, server.port, mode, mounts)
                if host not in _LOOPBACK:
                    click.echo(
                        f"Warning: listening on {host}: NFS clients are not authenticated, "
                        f"anyone who reaches port {server.port} gets a {mode} share",
                        err=True,
                    )
                _notify(f"READY=1\nSTATUS=serving {db.uri} on {host}:{server.port}\n")
                while not stop.wait(1.0):
                    if not server.is_ready():
                        raise IoError("the NFS server stopped unexpectedly")
                _notify("STOPPING=1\n")
                logger.info("stopping on %s", ", ".join(received))
        finally:
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


def _print_banner(uri: str, host: str, port: int, mode: str, mounts: dict[str, str]) -> None:
    click.echo(f"Serving {uri} over NFSv3 on {host}:{port} ({mode})")
    click.echo("")
    click.echo("Mount on Linux:")
    click.echo(f"  sudo mkdir -p {LINUX_MOUNT_POINT}")
    click.echo(f"  {mounts['linux']}")
    click.echo("Mount on macOS:")
    click.echo(f"  sudo mkdir -p {MACOS_MOUNT_POINT}")
    click.echo(f"  {mounts['macos']}")
    click.echo("")
    click.echo(f"Then: cat {LINUX_MOUNT_POINT}/data/data.csv; unmount with sudo umount.")
    click.echo("Press Ctrl-C to stop.")


COMMANDS: Final[list[click.Command]] = [serve]
