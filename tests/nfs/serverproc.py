"""An NfsServer over a MemoryFs in a child process, to measure its memory and descriptors.

Run as ``python -m tests.nfs.serverproc CONFIG`` (CONFIG is JSON: ``nofile`` sets
RLIMIT_NOFILE, ``resources`` the `ResourceLimits` fields, ``quota_bytes`` the
MemoryFs quota). The child prints ``{"port": N}`` and then answers one JSON line per
command it reads: ``{"wait": FIELD, "at_least": N, "timeout": S}`` waits on
`NfsServer.wait_stats` (an event, not a poll) and prints the counters, or null.
`ServerProcess` is the parent's side.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

__all__ = ["ServerProcess"]


def _child(config: dict[str, Any]) -> None:
    nofile = config.get("nofile")
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from nfs.protocol.memfs import MemoryFs
    from nfs.protocol.server import NfsServer, ResourceLimits, ServerStats

    fs = MemoryFs(
        root_mode=0o777,
        **({"quota_bytes": config["quota_bytes"]} if "quota_bytes" in config else {}),
    )
    server = NfsServer(fs, 0, resources=ResourceLimits(**config.get("resources", {})))
    print(json.dumps({"port": server.port}), flush=True)
    try:
        for line in sys.stdin:
            command = json.loads(line)

            def reached(stats: ServerStats, c: dict[str, Any] = command) -> bool:
                return bool(getattr(stats, c["wait"]) >= c["at_least"])

            stats = server.wait_stats(reached, command["timeout"])
            print(json.dumps(None if stats is None else asdict(stats)), flush=True)
    finally:
        server.shutdown()


class ServerProcess:
    """A child process serving a MemoryFs (see the module docstring).

    Args:
        tmp_path: where the child's stderr (its log) is kept.
        config: the child's configuration.
    """

    def __init__(self, tmp_path: Path, **config: Any) -> None:
        self.log_path = tmp_path / "server.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        root = Path(__file__).resolve().parents[2]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.nfs.serverproc", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the server did not start: {self.log()}")
        self.port: int = json.loads(line)["port"]

    def rss_mib(self) -> float:
        """Return the child's resident set size in MiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def fds(self) -> int:
        """Return the number of file descriptors the child has open."""
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def wait(self, field: str, at_least: int, timeout: float = 30.0) -> dict[str, int]:
        """Wait until the server's counter `field` reaches `at_least`; return the counters.

        Raises:
            AssertionError: if it does not within `timeout` seconds.
        """
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(
            json.dumps({"wait": field, "at_least": at_least, "timeout": timeout}) + "\n"
        )
        self.proc.stdin.flush()
        stats: dict[str, int] | None = json.loads(self.proc.stdout.readline() or "null")
        assert stats is not None, f"{field} never reached {at_least}"
        return stats

    def log(self) -> str:
        """Return what the child logged so far."""
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """Stop the child at once."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)

    def close(self) -> None:
        """Stop the child (closing its stdin shuts the server down)."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
