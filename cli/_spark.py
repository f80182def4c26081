"""``posixlake spark start|stop|status``: a Spark Connect server that commands share."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

import click

from cli._common import echo_json, get_options, json_option

if TYPE_CHECKING:
    from posixlake.engines.spark import ConnectServer

__all__ = ["COMMANDS"]

DEFAULT_PORT: Final = 15002


def _port_option(default: int | None) -> click.Option:
    return click.Option(
        ["--port"],
        type=click.IntRange(1, 65535),
        default=default,
        show_default=default is not None,
        help="The server's port on 127.0.0.1."
        + ("" if default is not None else " Default: every server posixlake started."),
    )


def _describe(server: ConnectServer) -> dict[str, object]:
    return {
        "url": server.url,
        "pid": server.pid,
        "port": server.port,
        "master": server.master,
        "log": server.log,
        "uptime_seconds": round(time.time() - server.started, 1),
    }


@click.group(name="spark")
def spark() -> None:
    """Start, stop or check a Spark Connect server that commands share.

    Each command on the Spark engine otherwise starts a JVM of its own (seconds to tens
    of seconds). `posixlake spark start` runs the Spark Connect server that PySpark ships
    on 127.0.0.1, with posixlake's settings, in the background; while it runs, commands
    on the Spark engine use it (a warm Spark) unless --spark-master or --spark-remote says
    otherwise. Its pid, port and log are under $POSIXLAKE_STATE_DIR/spark (default
    ~/.local/state/posixlake/spark).

    \b
    Examples:
      posixlake spark start
      posixlake query /data/sales 'SELECT count(*) FROM data'    # runs on the server
      posixlake spark status
      posixlake spark stop
    """


@spark.command(name="start")
@click.option(
    "--spark-master",
    "master",
    metavar="URL",
    default=None,
    help="The Spark master the server runs on (default local[*]).",
)
@json_option
def start(port: int, master: str | None) -> None:
    """Start a Spark Connect server in the background (if none runs).

    Waits until the server listens, then prints its URL: commands on the Spark engine
    use it from then on; other programs can connect with `--spark-remote URL` or
    PySpark's `SparkSession.builder.remote(URL)`.

    \b
    Examples:
      posixlake spark start
      posixlake spark start --port 15003 --spark-master 'local[4]'
    """
    from posixlake.engines.spark import start_server

    if not get_options().json:
        click.echo(f"Starting a Spark Connect server on 127.0.0.1:{port}...", err=True)
    server, started = start_server(port=port, master=master)
    if get_options().json:
        echo_json({**_describe(server), "started": started})
        return
    state = "started" if started else "already running"
    click.echo(f"Spark Connect server {state} at {server.url} (pid {server.pid})")
    click.echo(f"Log: {server.log}")


start.params.insert(0, _port_option(DEFAULT_PORT))


@spark.command(name="stop")
def stop(port: int) -> None:
    """Stop the Spark Connect server posixlake started on --port.

    \b
    Examples:
      posixlake spark stop
      posixlake spark stop --port 15003
    """
    from posixlake.engines.spark import stop_server

    server = stop_server(port)
    if server is None:
        click.echo(f"No Spark Connect server of posixlake runs on port {port}")
    else:
        click.echo(f"Stopped the Spark Connect server at {server.url} (pid {server.pid})")


stop.params.insert(0, _port_option(DEFAULT_PORT))


@spark.command(name="status")
@json_option
def status(port: int | None) -> None:
    """Say whether a Spark Connect server runs, and its URL (exit 0 either way).

    \b
    Examples:
      posixlake spark status
      posixlake spark status --json
    """
    from posixlake.engines.spark import find_server, running_servers

    if port is None:
        servers = running_servers()
    else:
        found = find_server(port)
        servers = [found] if found is not None else []
    if get_options().json:
        echo_json([_describe(s) for s in servers])
        return
    if not servers:
        click.echo("No Spark Connect server of posixlake runs (start one: posixlake spark start)")
        return
    for server in servers:
        minutes = (time.time() - server.started) / 60
        click.echo(
            f"Spark Connect server running at {server.url} (pid {server.pid}, master "
            f"{server.master}, up {minutes:.0f} min); log: {server.log}"
        )


status.params.insert(0, _port_option(None))

COMMANDS: Final[list[click.Command]] = [spark]
