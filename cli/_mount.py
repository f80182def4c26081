"""The original project's ``mount``, ``unmount`` and ``status``: serve a table and mount it.

``posixlake mount TABLE MOUNT_POINT`` starts the NFS server (port 12049 by default, as
the original), runs the operating system's ``mount`` (through ``sudo`` unless already
root), waits for Ctrl-C or SIGTERM, unmounts, then stops the server (staged writes are
applied). ``$POSIXLAKE_MOUNT_PROGRAM`` / ``$POSIXLAKE_UMOUNT_PROGRAM`` name other programs
to run instead of ``mount`` / ``umount`` (without ``sudo``): a wrapper, or a test's fake.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Final

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
from cli._serve import _stop_on_signals, serve_until_stopped
from posixlake.errors import IoError

if TYPE_CHECKING:
    from nfs.lake import LakeFs

__all__ = [
    "COMMANDS",
    "DEFAULT_PORT",
    "MOUNT_PROGRAM_ENV",
    "UMOUNT_PROGRAM_ENV",
    "find_mount",
    "mount_argv",
    "mount_attempts",
    "mount_first",
    "unmount_argv",
]

logger = logging.getLogger(__name__)

DEFAULT_PORT: Final = 12049
"""The original project's NFS port."""
MOUNT_PROGRAM_ENV: Final = "POSIXLAKE_MOUNT_PROGRAM"
UMOUNT_PROGRAM_ENV: Final = "POSIXLAKE_UMOUNT_PROGRAM"
MOUNTS_FILE: Final = "/proc/self/mounts"
_COMMAND_TIMEOUT: Final = 120.0


def _privileged(argv: list[str], injected: str | None) -> list[str]:
    """Prefix ``sudo`` when the OS program needs root and we are not root."""
    if injected or not hasattr(os, "geteuid") or os.geteuid() == 0:
        return argv
    return ["sudo", *argv]


def mount_argv(
    port: int,
    mount_point: str,
    *,
    host: str = "127.0.0.1",
    platform: str = sys.platform,
    vers: str = "3",
) -> list[str]:
    """Return the command that mounts the share served on ``host:port`` at ``mount_point``.

    NFSv3 over TCP, MOUNT on the same port (no portmapper), no lock manager (``nolock``)
    and, on Linux, no NFSACL (``noacl``); a hard mount, so an interrupted server never
    turns into silent I/O errors. ``vers="4.0"``: NFSv4.0 on the same port, where an edit
    is exactly an open (docs/nfs-writes.md); NFSv4 has no MOUNT protocol (no
    ``mountport``) and its locks are operations of the protocol, which the server serves
    (no ``nolock``).
    """
    injected = os.environ.get(MOUNT_PROGRAM_ENV) or None
    if vers == "4.0" and platform == "darwin":  # mount_nfs(8): vers=<num>[.<num>]
        argv = [
            injected or "mount_nfs",
            "-o",
            f"vers=4.0,tcp,port={port},resvport",
            f"{host}:/",
            mount_point,
        ]
        return _privileged(argv, injected)
    if vers == "4.0":
        argv = [
            injected or "mount",
            "-t",
            "nfs",
            "-o",
            f"vers=4.0,proto=tcp,port={port}",
            f"{host}:/",
            mount_point,
        ]
        return _privileged(argv, injected)
    if platform == "darwin":
        argv = [
            injected or "mount_nfs",
            "-o",
            f"vers=3,tcp,port={port},mountport={port},nolocks,resvport",
            f"{host}:/",
            mount_point,
        ]
    else:
        argv = [
            injected or "mount",
            "-t",
            "nfs",
            "-o",
            f"vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock,noacl",
            f"{host}:/",
            mount_point,
        ]
    return _privileged(argv, injected)


def mount_attempts(
    port: int, mount_point: str, *, platform: str = sys.platform
) -> list[tuple[list[str], str]]:
    """Return the mounts to try, in order, each with its NFS version: NFSv4.0 first where
    the OS client has it (Linux, macOS: an edit is exactly an open), then NFSv3."""
    attempts = [(mount_argv(port, mount_point, platform=platform), "3")]
    if platform.startswith("linux") or platform == "darwin":
        attempts.insert(0, (mount_argv(port, mount_point, platform=platform, vers="4.0"), "4.0"))
    return attempts


def mount_first(attempts: list[tuple[list[str], str]]) -> tuple[list[str], str, int, str]:
    """Run the mount commands of ``attempts`` in order until one succeeds.

    Returns:
        ``(argv, vers, exit code, stderr)`` of the one that succeeded, else of the last
        one (the command to print for mounting by hand).
    """
    argv, vers = attempts[-1]
    code, detail = 1, ""
    for argv, vers in attempts:
        code, detail = _run(argv)
        if code == 0:
            break
        logger.info("NFSv%s mount failed (%s)", vers, detail or f"exit {code}")
    return argv, vers, code, detail


def unmount_argv(mount_point: str) -> list[str]:
    """Return the command that unmounts ``mount_point``."""
    injected = os.environ.get(UMOUNT_PROGRAM_ENV) or None
    return _privileged([injected or "umount", mount_point], injected)


def _run(argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` (stdin left to it: sudo may ask for a password); return (code, stderr)."""
    try:
        proc = subprocess.run(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=_COMMAND_TIMEOUT
        )
    except FileNotFoundError:
        return 127, f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not finish within {_COMMAND_TIMEOUT:.0f} s"
    return proc.returncode, proc.stderr.decode("utf-8", "replace").strip()


def _shell(argv: list[str]) -> str:
    return " ".join(a if re.fullmatch(r"[\w@%+=:,./-]+", a) else repr(a) for a in argv)


# -- mount ------------------------------------------------------------------------------------


@click.command()
@table_argument
@click.argument("mount_point", metavar="MOUNT_POINT", type=click.Path(file_okay=False))
@click.option(
    "--port",
    "-p",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="TCP port of the NFS server on 127.0.0.1 (0 picks a free one).",
)
@click.option("--read-only", is_flag=True, help="Refuse every change through the share.")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Local directory for the server's write journal (as `serve --state-dir`).",
)
@engine_options
@storage_options
@user_option
@json_option
def mount(table: str, mount_point: str, port: int, read_only: bool, state_dir: str | None) -> None:
    """Serve TABLE and mount it at MOUNT_POINT until Ctrl-C.

    \b
    The command of the original posixlake. It runs `mount` through sudo (unless root);
    MOUNT_POINT is created when missing. If mounting fails the server keeps running and
    the command to mount by hand is printed. Ctrl-C or SIGTERM unmounts (the client
    finishes its writes) and stops the server; writes still unfinished stay journaled
    for the next start, as with `serve`.

    \b
    Examples:
      posixlake mount /data/sales /mnt/sales
      cat /mnt/sales/data/data.csv
      posixlake mount s3://lake/sales /mnt/sales --endpoint http://127.0.0.1:9000
      posixlake mount s3://lake /mnt/lake     (a lake root: /mnt/lake/sales/data/data.csv)
    """
    from nfs.protocol.server import NfsServer  # imported here: other commands start faster
    from nfs.table.tablefs import TableFs

    opts = get_options()
    where = os.path.abspath(mount_point)
    stop = threading.Event()
    from cli._lake import lake_root

    root = lake_root(table)
    if root is not None:  # not a table but a directory of tables: the lake
        from cli._lake import open_lake

        try:
            os.makedirs(where, exist_ok=True)
        except OSError as err:
            raise IoError(f"cannot create the mount point {where}: {err.strerror}") from err
        mount_lake(open_lake(root, read_only=read_only, state_dir=state_dir), where, port)
        return
    with open_table(table, computes=True, shared=False) as db:  # runs for hours
        try:
            os.makedirs(where, exist_ok=True)
        except OSError as err:
            raise IoError(f"cannot create the mount point {where}: {err.strerror}") from err
        try:
            fs = TableFs(db, read_only=read_only, state_dir=state_dir)
        except OSError as err:
            raise IoError(f"cannot use the state directory: {err}") from err
        try:
            server = NfsServer(fs, port, "127.0.0.1")
        except OSError as err:
            raise IoError(f"cannot listen on 127.0.0.1:{port}: {err.strerror or err}") from err
        mounted = False
        unmount_error: str | None = None
        try:
            with _stop_on_signals(stop) as received:
                # NFSv4.0 where the OS client has it (an edit is an open), else NFSv3
                argv, vers, code, detail = mount_first(mount_attempts(server.port, where))
                mounted = code == 0
                _report_mount(db.uri, server.port, where, argv, code, detail, vers)
                serve_until_stopped(server, stop, received, f"{db.uri} on 127.0.0.1")
        finally:
            if mounted:  # while the server still answers, or umount would hang
                unmount_error = _unmount_at_stop(where)
            server.shutdown()
        version = db.version
    kept = fs.unfinished_at_close
    if opts.json:
        echo_json(
            {
                "event": "stopped",
                "table": db.uri,
                "version": version,
                "unmounted": mounted,
                "unfinished_writes": kept,
            }
        )
    else:
        note = f" {kept} unfinished write(s) kept for the next start." if kept else ""
        click.echo(
            ("Unmounted; " if mounted else "") + f"stopped. {db.uri} is at version {version}.{note}"
        )
    if unmount_error:
        raise click.ClickException(unmount_error)


def mount_lake(lake: LakeFs, where: str, port: int) -> None:
    """Serve ``lake`` on 127.0.0.1 and mount it at ``where`` until Ctrl-C or SIGTERM (as
    ``mount`` does a table); unmount and stop then."""
    from nfs.protocol.server import NfsServer

    opts = get_options()
    try:
        server = NfsServer(lake, port, "127.0.0.1")
    except OSError as err:
        lake.close()
        raise IoError(f"cannot listen on 127.0.0.1:{port}: {err.strerror or err}") from err
    stop = threading.Event()
    mounted = False
    unmount_error: str | None = None
    try:
        with _stop_on_signals(stop) as received:
            argv, vers, code, detail = mount_first(mount_attempts(server.port, where))
            mounted = code == 0
            _report_mount(lake.root, server.port, where, argv, code, detail, vers)
            serve_until_stopped(server, stop, received, f"{lake.root} on 127.0.0.1")
    finally:
        if mounted:  # while the server still answers, or umount would hang
            unmount_error = _unmount_at_stop(where)
        server.shutdown()
    kept = lake.unfinished_at_close
    if opts.json:
        echo_json(
            {"event": "stopped", "lake": lake.root, "unmounted": mounted, "unfinished_writes": kept}
        )
    else:
        note = f" {kept} unfinished write(s) kept for the next start." if kept else ""
        click.echo(("Unmounted; " if mounted else "") + f"stopped serving {lake.root}.{note}")
    if unmount_error:
        raise click.ClickException(unmount_error)


def _unmount_at_stop(where: str) -> str | None:
    """Unmount ``where``; return the error to report (None: unmounted)."""
    code, detail = _run(unmount_argv(where))
    if code == 0:
        return None
    return (
        f"unmount of {where} failed (exit {code}{': ' + detail if detail else ''}); "
        f"unmount it by hand: {_shell(unmount_argv(where))}"
    )


def _report_mount(
    uri: str, port: int, where: str, argv: list[str], code: int, detail: str, vers: str = "3"
) -> None:
    opts = get_options()
    if opts.json:
        echo_json(
            {
                "event": "mounted" if code == 0 else "serving",
                "table": uri,
                "host": "127.0.0.1",
                "port": port,
                "mount_point": where,
                "mount": _shell(argv),
                "mount_exit": code,
                "nfs_version": vers,
            }
        )
    elif code == 0:
        click.echo(f"Mounted {uri} at {where} (NFSv{vers} on 127.0.0.1:{port})")
        click.echo(f"  ls {where}")
        click.echo(f"  cat {where}/data/data.csv")
        click.echo("Press Ctrl-C to unmount and stop.")
    else:
        click.echo(f"Serving {uri} over NFSv3 on 127.0.0.1:{port}")
        click.echo("Press Ctrl-C to stop.")
    if code != 0:
        click.echo(
            f"Warning: mounting failed (exit {code}{': ' + detail if detail else ''}); "
            f"the server keeps running: mount by hand with: {_shell(argv)}",
            err=True,
        )


# -- unmount / status -------------------------------------------------------------------------


@click.command()
@click.argument("mount_point", metavar="MOUNT_POINT", type=click.Path())
def unmount(mount_point: str) -> None:
    """Unmount a share (runs umount, through sudo unless root).

    \b
    Example:
      posixlake unmount /mnt/sales
    """
    where = os.path.abspath(mount_point)
    argv = unmount_argv(where)
    code, detail = _run(argv)
    if code != 0:
        raise click.ClickException(
            f"unmount of {where} failed (exit {code}){': ' + detail if detail else ''}"
        )
    click.echo(f"Successfully unmounted {where}")


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def find_mount(mount_point: str, mounts: str | None = None) -> tuple[str, str] | None:
    """Return ``(source, fstype)`` of the mount at ``mount_point`` (None: not a mount point).

    Reads the kernel's mount table (``/proc/self/mounts``) unless ``mounts`` (its text)
    is given; the last entry for a path is the one in effect.
    """
    if mounts is None:
        try:
            with open(MOUNTS_FILE, encoding="utf-8", errors="replace") as fh:
                mounts = fh.read()
        except OSError:
            mounts = _macos_mounts()
    found: tuple[str, str] | None = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3 and _unescape(fields[1]) == mount_point:
            found = (_unescape(fields[0]), fields[2])
    return found


def _macos_mounts() -> str:
    """Return the output of ``mount`` rewritten as mount-table lines (macOS, BSD)."""
    try:
        out = subprocess.run(["mount"], capture_output=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = []
    for line in out.decode("utf-8", "replace").splitlines():
        m = re.match(r"^(?P<src>.+) on (?P<dir>.+) \((?P<type>[^,)]+)", line)
        if m:
            src, path = (m.group(k).replace(" ", "\\040") for k in ("src", "dir"))
            lines.append(f"{src} {path} {m.group('type')}")
    return "\n".join(lines)


@click.command()
@click.argument("mount_point", metavar="MOUNT_POINT", type=click.Path())
@json_option
def status(mount_point: str) -> None:
    """Say whether MOUNT_POINT is mounted (exit 0 either way).

    \b
    Example:
      posixlake status /mnt/sales
    """
    where = os.path.realpath(mount_point)
    found = find_mount(where)
    if get_options().json:
        echo_json(
            {
                "mount_point": where,
                "mounted": found is not None,
                "source": found[0] if found else None,
                "fstype": found[1] if found else None,
            }
        )
    elif found is not None:
        click.echo(f"mounted: {where} is an active mount ({found[1]} from {found[0]})")
    else:
        click.echo(f"not mounted: {where} is not currently mounted")


COMMANDS: Final[list[click.Command]] = [mount, unmount, status]
