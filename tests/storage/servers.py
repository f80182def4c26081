"""Real local object-store servers for tests and scripts: moto_server (S3) and Azurite.

Each server runs as a child process on a free 127.0.0.1 port. Readiness is the
server's own "listening" line on its output (no polling); a reader thread keeps
draining the output afterwards so the server never blocks on a full pipe. Servers are
stopped by their PID.

Also used by ``scripts/test_python_s3.py`` and ``scripts/test_python_azure.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "AZURITE_MIN_VERSION",
    "LocalServer",
    "ServerUnavailable",
    "find_azurite",
    "find_moto",
    "free_port",
    "make_iam_user",
    "start_azurite",
    "start_moto",
]

REPO: Final = Path(__file__).resolve().parents[2]

#: Azurite 3.37 is the first to honour ``startFrom`` in blob listings, which delta-rs
#: (object_store) uses to list new commits; older versions make every second commit
#: fail with "Invalid table version".
AZURITE_MIN_VERSION: Final = (3, 37, 0)
AZURITE_INSTALL: Final = "npm install --no-audit --no-fund azurite@3.37.0"
MOTO_INSTALL: Final = "pip install 'moto[server]>=5,<6'"


class ServerUnavailable(RuntimeError):
    """The server program is not installed (or too old); the message says how to install it."""


@dataclass
class LocalServer:
    """A server child process and the URL it listens on."""

    name: str
    endpoint: str
    process: subprocess.Popen[str]
    output: deque[str] = field(default_factory=lambda: deque(maxlen=200))
    reader: threading.Thread | None = None
    grace: float = 10.0

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL after ``grace`` seconds)."""
        if self.process.poll() is not None:
            self._close_output()
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        finally:
            self._close_output()

    def _close_output(self) -> None:
        if self.reader is not None:
            self.reader.join(timeout=10)  # it ends at EOF, once the process is gone
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start(
    name: str,
    cmd: Sequence[str],
    *,
    endpoint: str,
    ready_marker: str,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float = 60.0,
) -> LocalServer:
    """Start ``cmd`` and return once it prints ``ready_marker``.

    Raises:
        RuntimeError: the process exits, or is not ready within ``timeout`` seconds.
    """
    proc = subprocess.Popen(
        list(cmd),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    server = LocalServer(name, endpoint, proc)
    ready = threading.Event()
    assert proc.stdout is not None
    stdout = proc.stdout

    def drain() -> None:
        for line in stdout:
            server.output.append(line.rstrip())
            if ready_marker in line:
                ready.set()
        ready.set()  # EOF: the process ended; the caller checks poll()

    server.reader = threading.Thread(target=drain, name=f"{name}-output", daemon=True)
    server.reader.start()
    if not ready.wait(timeout) or proc.poll() is not None:
        server.stop()
        tail = "\n".join(list(server.output)[-20:])
        raise RuntimeError(f"{name} did not start ({' '.join(cmd)}):\n{tail}")
    return server


# -- moto ------------------------------------------------------------------------------


def find_moto() -> list[str] | None:
    """Return the command that runs moto's server, or None when moto[server] is missing."""
    exe = shutil.which("moto_server")
    if exe:
        return [exe]
    try:
        import moto.server  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "moto.server"]


def start_moto(*, port: int | None = None, env: Mapping[str, str] | None = None) -> LocalServer:
    """Start ``moto_server -H 127.0.0.1 -p PORT`` (S3, DynamoDB, IAM, ...).

    Args:
        port: the port (a free one when None).
        env: extra environment, e.g. ``{"INITIAL_NO_AUTH_ACTION_COUNT": "3"}`` to make
            moto check credentials after three unauthenticated calls.

    Raises:
        ServerUnavailable: moto[server] is not installed.
    """
    cmd = find_moto()
    if cmd is None:
        raise ServerUnavailable(f"moto_server not found: {MOTO_INSTALL}")
    port = port or free_port()
    return _start(
        "moto_server",
        [*cmd, "-H", "127.0.0.1", "-p", str(port)],
        endpoint=f"http://127.0.0.1:{port}",
        ready_marker="Running on",
        env=env,
    )


def make_iam_user(endpoint: str) -> tuple[str, str]:
    """Create an all-powerful IAM user on a moto server; return its (key id, secret).

    Uses three unauthenticated calls, so it suits a server started with
    ``INITIAL_NO_AUTH_ACTION_COUNT=3``.
    """
    import boto3

    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        aws_access_key_id="bootstrap",
        aws_secret_access_key="bootstrap",
        region_name="us-east-1",
    )
    iam.create_user(UserName="lake")
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
    }
    iam.put_user_policy(UserName="lake", PolicyName="all", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="lake")["AccessKey"]
    return str(key["AccessKeyId"]), str(key["SecretAccessKey"])


# -- Azurite ---------------------------------------------------------------------------


def _version(exe: str) -> tuple[int, ...] | None:
    """Return Azurite's version: from its package.json (fast), else ``--version``."""
    for parent in Path(os.path.realpath(exe)).parents:
        manifest = parent / "package.json"
        if manifest.is_file():
            try:
                meta = json.loads(manifest.read_text())
            except (OSError, ValueError):
                break
            if meta.get("name") == "azurite":
                try:
                    return tuple(int(p) for p in str(meta["version"]).split("."))
                except (KeyError, ValueError):
                    break
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    try:
        return tuple(int(p) for p in out.split("."))
    except ValueError:
        return None


def find_azurite() -> str:
    """Return the path of an ``azurite-blob`` new enough for delta-rs.

    Looks at ``$POSIXLAKE_AZURITE``, the repository's ``node_modules/.bin`` and ``$PATH``.

    Raises:
        ServerUnavailable: no Azurite, or only versions older than 3.37.0.
    """
    candidates = [
        os.environ.get("POSIXLAKE_AZURITE", ""),
        str(REPO / "node_modules" / ".bin" / "azurite-blob"),
        shutil.which("azurite-blob") or "",
    ]
    seen: list[str] = []
    for exe in dict.fromkeys(c for c in candidates if c and os.access(c, os.X_OK)):
        version = _version(exe)
        if version is not None and version >= AZURITE_MIN_VERSION:
            return exe
        seen.append(f"{exe} ({'.'.join(map(str, version)) if version else 'unknown version'})")
    wanted = ".".join(map(str, AZURITE_MIN_VERSION))
    if seen:
        raise ServerUnavailable(
            f"Azurite >= {wanted} is needed (older ones ignore 'startFrom' in listings, which "
            f"breaks delta-rs commits); found {', '.join(seen)}; run: {AZURITE_INSTALL}"
        )
    raise ServerUnavailable(f"azurite-blob not found (node/npm needed): {AZURITE_INSTALL}")


def start_azurite(
    *, workdir: str, port: int | None = None, https: tuple[str, str] | None = None
) -> LocalServer:
    """Start ``azurite-blob --blobHost 127.0.0.1 --blobPort PORT --inMemoryPersistence``.

    The endpoint is Azurite's path-style account URL,
    ``http://127.0.0.1:PORT/devstoreaccount1``. With ``https=(cert_file, key_file)`` it
    serves HTTPS and also accepts OAuth bearer tokens (``--oauth basic``: issuer,
    audience and lifetime are checked, the signature is not).

    Raises:
        ServerUnavailable: Azurite is missing or too old.
    """
    exe = find_azurite()
    port = port or free_port()
    server = _start(
        "azurite-blob",
        [
            exe,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--extentMemoryLimit",
            "2048",
            *(["--cert", https[0], "--key", https[1], "--oauth", "basic"] if https else []),
        ],
        endpoint=f"{'https' if https else 'http'}://127.0.0.1:{port}/devstoreaccount1",
        ready_marker="successfully listen",
        cwd=workdir,
    )
    # On SIGTERM Azurite waits for clients' idle keep-alive connections to close; its
    # data is in memory only, so there is nothing to lose by not waiting long.
    server.grace = 1.0
    return server
