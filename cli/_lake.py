"""``posixlake serve ROOT`` / ``mount ROOT``: a lake root, every table under it a directory.

A ROOT that is not itself a Delta table (no ``_delta_log/`` in it) but a directory, or an
object-store prefix holding objects, is served as a lake (``nfs.lake.LakeFs``); a table
keeps the single-table share exactly.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from cli._common import credentials, engine_kwargs, get_options, storage_for
from posixlake.errors import InvalidOperation, IoError, PosixLakeError

if TYPE_CHECKING:
    from nfs.lake import LakeFs
    from nfs.table.access import UserMap

__all__ = ["check_lake_options", "lake_root", "mount_lake", "open_lake", "serve_lake"]


def lake_root(root: str) -> str | None:
    """Return the normalized ROOT if it is a lake root (not a table), else None.

    A missing local path, or an object-store location that cannot be listed or holds
    nothing, is None too: opening it as a table then reports the error as before.
    """
    from nfs.lake import is_table
    from posixlake.storage import is_local, normalize_uri, open_store, storage_options_for

    uri = normalize_uri(root)
    if is_local(uri):
        return uri if os.path.isdir(uri) and not is_table(uri) else None
    try:
        options = storage_options_for(uri, storage_for(uri))
        if is_table(uri, options) or not open_store(uri, options).has_any(""):
            return None
    except PosixLakeError:
        return None
    return uri


def open_lake(
    root: str,
    *,
    read_only: bool,
    state_dir: str | None,
    user_map: UserMap | None = None,
    **tablefs: object,
) -> LakeFs:
    """Return the LakeFs of ``root`` with the shared options (storage, engine, --user).

    Each table is opened on first use with the same storage options, engine and login;
    a table with users that the login does not open is listed and refuses access.
    """
    from cli._serve import per_user_vfs
    from nfs.lake import LakeFs
    from nfs.lake.opening import lake_state_dir, tablefs_opener
    from posixlake.storage import storage_options_for

    opts = get_options()
    storage = storage_for(root)
    login = credentials() if opts.user else None
    state = lake_state_dir(root, state_dir)
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise IoError(f"cannot use the state directory: {err}") from err
    wrap = None
    if user_map is not None:
        wrap = lambda db, fs: per_user_vfs(db, fs, user_map)  # noqa: E731
    opener = tablefs_opener(
        root,
        state_dir=state,
        storage=storage,
        credentials=login,
        engine=engine_kwargs(computes=True, shared=False),
        tablefs={"read_only": read_only, **tablefs},
        wrap=wrap,
    )
    lake = LakeFs(
        root,
        opener,
        storage_options=storage_options_for(root, storage),
        state_dir=state,
        read_only=read_only,
    )
    from nfs.protocol.vfs import NfsError

    try:
        lake.tables()  # list once before listening: a root that cannot be listed fails here
    except NfsError as err:
        lake.close()
        raise InvalidOperation(f"cannot list the lake {root}: {err}") from err
    return lake


def check_lake_options(*, http_listen: str | None) -> None:
    """Refuse the options a lake root does not support yet."""
    if http_listen is not None:
        raise click.BadParameter("not supported with a lake root yet", param_hint="--http")


def serve_lake(
    lake: LakeFs,
    *,
    host: str,
    port: int,
    read_only: bool,
    server_options: dict[str, object],
) -> None:
    """Serve ``lake`` over NFS until Ctrl-C or SIGTERM (as ``serve`` serves a table)."""
    import logging
    import threading

    from cli._common import echo_json
    from cli._serve import _LOOPBACK, _notify, _print_banner, _stop_on_signals, mount_commands
    from nfs.protocol.server import NfsServer

    opts = get_options()
    mode = "read-only" if read_only else "read-write"
    try:
        server = NfsServer(lake, port, host, **server_options)  # type: ignore[arg-type]
    except OSError as err:
        lake.close()
        raise IoError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
    stop = threading.Event()
    try:
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
                    }
                )
            else:
                _print_banner(lake.root, host, server.port, mode, mounts, lake=True)
            if host not in _LOOPBACK:
                click.echo(
                    f"Warning: listening on {host}: NFS clients are not authenticated, "
                    f"anyone who reaches port {server.port} gets a {mode} share",
                    err=True,
                )
            _notify(f"READY=1\nSTATUS=serving {lake.root} on {host}:{server.port}\n")
            while not stop.wait(1.0):
                if not server.is_ready():
                    raise IoError("the NFS server stopped unexpectedly")
            _notify("STOPPING=1\n")
            logging.getLogger("cli._serve").info("stopping on %s", ", ".join(received))
    finally:
        server.shutdown()  # closes the lake, and with it every open table
    kept = lake.unfinished_at_close
    if opts.json:
        echo_json({"event": "stopped", "lake": lake.root, "unfinished_writes": kept})
    else:
        note = f" {kept} unfinished write(s) kept for the next start." if kept else ""
        click.echo(f"Stopped serving the lake {lake.root}.{note}")


def mount_lake(lake: LakeFs, where: str, port: int) -> None:
    """Serve ``lake`` on 127.0.0.1 and mount it at ``where`` until Ctrl-C or SIGTERM (as
    ``mount`` does a table); unmount and stop then."""
    import threading

    from cli._common import echo_json
    from cli._mount import _report_mount, _run, _shell, mount_attempts, mount_first, unmount_argv
    from cli._serve import _notify, _stop_on_signals
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
        with _stop_on_signals(stop):
            argv, vers, code, detail = mount_first(mount_attempts(server.port, where))
            mounted = code == 0
            _report_mount(lake.root, server.port, where, argv, code, detail, vers)
            _notify(f"READY=1\nSTATUS=serving {lake.root} on 127.0.0.1:{server.port}\n")
            while not stop.wait(1.0):
                if not server.is_ready():
                    raise IoError("the NFS server stopped unexpectedly")
            _notify("STOPPING=1\n")
    finally:
        if mounted:  # while the server still answers, or umount would hang
            code, detail = _run(unmount_argv(where))
            if code != 0:
                unmount_error = (
                    f"unmount of {where} failed (exit {code}{': ' + detail if detail else ''}); "
                    f"unmount it by hand: {_shell(unmount_argv(where))}"
                )
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
