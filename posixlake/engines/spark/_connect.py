"""A Spark Connect server on this machine: the one PySpark ships, run for posixlake.

``posixlake spark start`` runs PySpark's ``sbin/start-connect-server.sh`` (PySpark's
package directory is a Spark home) on 127.0.0.1 with the settings posixlake's own
sessions use (:func:`~posixlake.engines.spark._session.jvm_conf`): Python workers on this
interpreter, with this posixlake importable, UTC, no web UI, log4j at WARN. Each server
is recorded as ``connect-<port>.json`` in ``<state dir>/spark`` (``$POSIXLAKE_STATE_DIR``,
else ``$XDG_STATE_HOME/posixlake``, else ``~/.local/state/posixlake``), next to the
daemon's pid and log files, so that ``status``, ``stop`` and the command line's engine
find it again.

Commands share the server's Spark sessions too (:func:`._leases.lease_session`): a new Connect
session is a new class loader on the server, so every query in it compiles its generated
code again and runs it cold (about half the time of a short query). A few named sessions
per server are leased to one process at a time with a file lock, so that no two commands
use a session at once; when all are taken a command gets a session of its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from posixlake.engines.spark._leases import SESSION_SLOTS, slot_path, state_dir
from posixlake.engines.spark._session import (
    DEFAULT_CONNECT_PORT,
    DEFAULT_MASTER,
    SESSION_CONF,
    SparkUnavailableError,
    check_java,
    jvm_conf,
)
from posixlake.errors import InvalidOperation

__all__ = [
    "CONNECT_CLASS",
    "ConnectServer",
    "find_server",
    "running_servers",
    "start_server",
    "state_dir",
    "stop_server",
]

logger = logging.getLogger(__name__)

CONNECT_CLASS: Final = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST: Final = "127.0.0.1"
#: how long a server may take to listen (a JVM start on a busy machine)
START_TIMEOUT: Final = 180.0
STOP_TIMEOUT: Final = 60.0


@dataclass(frozen=True)
class ConnectServer:
    """A Spark Connect server started by :func:`start_server`.

    Attributes:
        pid: the server's JVM.
        port: its gRPC port on 127.0.0.1.
        master: the Spark master it runs on.
        log: its log file.
        started: when it started (seconds since the epoch).
    """

    pid: int
    port: int
    master: str
    log: str
    started: float

    @property
    def url(self) -> str:
        """The URL a client connects to (``sc://127.0.0.1:PORT``)."""
        return f"sc://{HOST}:{self.port}"


def _record(port: int) -> Path:
    return state_dir() / f"connect-{port}.json"


def _ident(port: int) -> str:
    return f"posixlake-{port}"


def _spark_home() -> Path:
    try:
        import pyspark
    except ImportError as err:
        raise SparkUnavailableError(
            "a Spark Connect server needs PySpark: `pip install 'posixlake[spark]'`"
        ) from err
    home = Path(pyspark.__file__).parent
    if not (home / "sbin" / "start-connect-server.sh").exists():
        raise SparkUnavailableError(
            f"PySpark {pyspark.__version__} at {home} has no sbin/start-connect-server.sh "
            "(PySpark 4.0 or newer ships it)"
        )
    return home


def _alive(pid: int) -> bool:
    """Return whether ``pid`` is a running Spark Connect server JVM."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return CONNECT_CLASS.encode() in cmdline


def _listening(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _load(path: Path) -> ConnectServer | None:
    try:
        data = json.loads(path.read_text())
        return ConnectServer(**data)
    except (OSError, ValueError, TypeError):
        return None


def _forget(port: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        _record(port).unlink()
    for k in range(SESSION_SLOTS):
        with contextlib.suppress(FileNotFoundError):
            slot_path(port, k).unlink()
    pid_file = state_dir() / f"spark-{_ident(port)}-{CONNECT_CLASS}-1.pid"
    with contextlib.suppress(FileNotFoundError):
        pid_file.unlink()


def find_server(port: int = DEFAULT_CONNECT_PORT) -> ConnectServer | None:
    """Return the running server recorded on ``port`` (forgetting it if it died)."""
    server = _load(_record(port))
    if server is None:
        return None
    if not _alive(server.pid):
        _forget(port)
        return None
    return server


def running_servers() -> list[ConnectServer]:
    """Return every running recorded server, the default port first."""
    found = []
    directory = state_dir()
    if directory.is_dir():
        for path in sorted(directory.glob("connect-*.json")):
            server = _load(path)
            if server is not None:
                live = find_server(server.port)
                if live is not None:
                    found.append(live)
    return sorted(found, key=lambda s: (s.port != DEFAULT_CONNECT_PORT, s.port))


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    interesting = [ln for ln in text if "ERROR" in ln or "Exception" in ln] or text
    return " | ".join(ln.strip() for ln in interesting[-lines:])


def start_server(
    *,
    port: int = DEFAULT_CONNECT_PORT,
    master: str | None = None,
    timeout: float = START_TIMEOUT,
) -> tuple[ConnectServer, bool]:
    """Start a Spark Connect server on 127.0.0.1:``port`` and wait until it listens.

    Args:
        port: its gRPC port.
        master: the Spark master it runs on (default ``local[*]``).
        timeout: seconds to wait for it to listen.

    Returns:
        The server, and whether this call started it (False: it was running already).

    Raises:
        SparkUnavailableError: PySpark or Java is missing, or the server did not come up
            (the message carries the end of its log).
        InvalidOperation: another program listens on ``port``.
    """
    if not 0 < port < 65536:
        raise InvalidOperation(f"port {port} is not a TCP port")
    running = find_server(port)
    if running is not None:
        return running, False
    home = _spark_home()
    check_java()
    if _listening(port):
        raise InvalidOperation(
            f"port {port} on {HOST} is taken by another program: choose another port"
        )
    url_master = master or DEFAULT_MASTER
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    conf = {
        **jvm_conf(url_master),
        **SESSION_CONF,
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
    }
    command = [
        "bash",
        str(home / "sbin" / "start-connect-server.sh"),
        "--master",
        url_master,
    ]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    env = _server_env(home, directory, port)
    log = directory / f"spark-{_ident(port)}-{CONNECT_CLASS}-1-{socket.gethostname()}.out"
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise SparkUnavailableError(f"cannot run {command[1]}: {err}") from err
    if done.returncode != 0:
        raise SparkUnavailableError(
            f"start-connect-server.sh failed ({done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-500:]}"
        )
    pid_file = directory / f"spark-{_ident(port)}-{CONNECT_CLASS}-1.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError) as err:
        raise SparkUnavailableError(
            f"the Spark Connect server wrote no pid file ({pid_file}): {_log_tail(log)}"
        ) from err
    deadline = time.monotonic() + timeout
    while not _listening(port):
        if not _alive(pid):
            _forget(port)
            raise SparkUnavailableError(
                f"the Spark Connect server exited before listening on port {port}; "
                f"its log ({log}): {_log_tail(log)}"
            )
        if time.monotonic() > deadline:
            _terminate(pid)
            _forget(port)
            raise SparkUnavailableError(
                f"the Spark Connect server did not listen on port {port} within "
                f"{timeout:.0f} s; its log ({log}): {_log_tail(log)}"
            )
        time.sleep(0.2)
    server = ConnectServer(pid=pid, port=port, master=url_master, log=str(log), started=time.time())
    _record(port).write_text(json.dumps(asdict(server)))
    logger.info("Spark Connect server %s (pid %d) listening", server.url, pid)
    return server, True


def _server_env(home: Path, directory: Path, port: int) -> dict[str, str]:
    """Return the environment of the server: PySpark's Spark home, our state directory
    for its pid and log, and a PYTHONPATH under which its Python workers import this
    posixlake."""
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONNECT_MODE_ENABLED"}
    here = str(Path(__file__).resolve().parents[3])  # the directory holding posixlake/
    paths = [here, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != here]]
    env.update(
        SPARK_HOME=str(home),
        SPARK_PID_DIR=str(directory),
        SPARK_LOG_DIR=str(directory),
        SPARK_IDENT_STRING=_ident(port),
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(paths),
    )
    env.setdefault("SPARK_LOCAL_IP", HOST)
    env.pop("SPARK_CONF_DIR", None)
    return env


def _terminate(pid: int, timeout: float = STOP_TIMEOUT) -> None:
    """Stop ``pid`` (SIGTERM, then SIGKILL after ``timeout`` seconds) and wait for it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.1)


def stop_server(port: int = DEFAULT_CONNECT_PORT) -> ConnectServer | None:
    """Stop the server recorded on ``port``; return it (None: none was running)."""
    server = find_server(port)
    if server is None:
        return None
    _terminate(server.pid)
    _forget(port)
    logger.info("Spark Connect server %s (pid %d) stopped", server.url, server.pid)
    return server
