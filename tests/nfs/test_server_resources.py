"""One client cannot exhaust the server: memory, connections and descriptors are bounded.

The server runs in a child process (`tests.nfs.serverproc`) so that its resident set
size and open descriptors can be read from /proc. Waits are on the server's counters
(`NfsServer.wait_stats`, an event) or on sockets, never on sleeps.

Before these bounds (measured on the same machine): 8 connections x 12 MB of one-byte
fragments took the server from 24 to 963 MiB; a SETATTR of a scratch file to 2 GiB to
2,072 MiB; 1,100 idle connections at a 1,024-fd limit made new clients time out and
logged 8,499 tracebacks in 10 s.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
from pathlib import Path

import pytest

from nfs.protocol.memfs import MemoryFs
from nfs.protocol.nfs3 import Nfsstat3, Sattr3
from nfs.protocol.record import LAST_FRAGMENT
from nfs.protocol.server import NfsServer, ResourceLimits, default_max_connections
from tests.nfs.rpcclient import RpcClient
from tests.nfs.serverproc import ServerProcess

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")

MiB = 1 << 20


class Flood:
    """A connection that sends `data` from a thread until sent or refused."""

    def __init__(self, port: int, data: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.error: OSError | None = None
        self._thread = threading.Thread(target=self._send, args=(data,), daemon=True)
        self._thread.start()

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as err:  # the server closed the connection: expected
            self.error = err

    def closed_by_server(self) -> bool:
        """Wait for the server to close the connection (an EOF or a reset)."""
        self.sock.settimeout(30)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        """Wait for the sender, then close."""
        self._thread.join(30)
        self.sock.close()


def test_unfinished_fragments_cost_no_memory(tmp_path: Path) -> None:
    one_byte = struct.pack(">I", 1) + b"x"  # a fragment that never ends its record
    data = one_byte * (12 * MiB // len(one_byte))
    with ServerProcess(tmp_path) as server:
        before = server.rss_mib()
        floods = [Flood(server.port, data) for _ in range(8)]
        for flood in floods:
            assert flood.closed_by_server()
            flood.close()
        grown = server.rss_mib() - before
        assert grown < 16, f"RSS grew by {grown:.0f} MiB"
        assert "more than 1024 fragments" in server.log()
        assert "Traceback" not in server.log()


def test_unfinished_records_are_bounded_in_total(tmp_path: Path) -> None:
    budget = 16 * MiB
    limits = {"max_buffered_bytes": budget, "max_connection_bytes": 5 * MiB}
    header = struct.pack(">I", LAST_FRAGMENT | (4 * MiB))
    data = header + b"y" * (4 * MiB - 1)  # one byte short of a 4 MiB record
    with ServerProcess(tmp_path, resources=limits) as server:
        before = server.rss_mib()
        floods = [Flood(server.port, data) for _ in range(12)]  # 48 MiB sent
        stats = server.wait("paused_connections", 1)  # the budget is full: reading stops
        assert stats["buffered_bytes"] <= budget + 12 * 256 * 1024
        grown = server.rss_mib() - before
        assert grown < budget / MiB + 24, f"RSS grew by {grown:.0f} MiB"
        server.kill()  # unblocks the senders
        for flood in floods:
            flood.close()


def test_idle_connections_at_the_descriptor_limit(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, nofile=256) as server:
        cap = (256 - 128) // 2
        socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(300)]
        try:
            stats = server.wait("evicted_connections", 300 - cap)
            assert stats["refused_connections"] == 0
            # an evicted connection's descriptor is free before the next one is accepted,
            # so a burst of connects never reaches the limit
            assert stats["accept_errors"] == 0
            assert server.fds() < 256 - 64
            # a new client gets in (the oldest idle connection makes room) and can write
            with RpcClient("127.0.0.1", server.port) as c:
                c.mount("/")
                c.write_file("/notes.txt", b"still here\n")
                assert c.read_file("/notes.txt") == b"still here\n"
        finally:
            for sock in socks:
                sock.close()
        assert "Traceback" not in server.log()


def test_a_burst_of_connects_holds_no_descriptor_per_evicted_connection(
    tmp_path: Path,
) -> None:
    # the server is stopped while 120 clients connect (the kernel completes them into the
    # listen backlog), so it then accepts them back to back: each accept past the cap
    # evicts an idle connection, whose descriptor must be free before the next accept
    with ServerProcess(tmp_path, nofile=200) as server:
        cap = (200 - 128) // 2
        base = server.fds()
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(120)]
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        try:
            stats = server.wait("evicted_connections", 120 - cap)
            assert stats["accept_errors"] == 0
            assert server.fds() <= base + cap
        finally:
            for sock in socks:
                sock.close()
        assert "Traceback" not in server.log()


def test_accept_errors_are_logged_once(tmp_path: Path) -> None:
    # a connection cap above the descriptor limit, so accept() itself fails (EMFILE)
    with ServerProcess(tmp_path, nofile=48, resources={"max_connections": 1000}) as server:
        socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(100)]
        try:
            server.wait("accept_errors", 3)
            with RpcClient("127.0.0.1", server.port, timeout=30) as c:  # idle ones make room
                c.null()
        finally:
            for sock in socks:
                sock.close()
        log = server.log()
        assert log.count("cannot accept NFS connections") == 1
        assert "Traceback" not in log


def test_idle_timeout_closes_a_half_sent_record() -> None:
    limits = ResourceLimits(idle_timeout=0.2)
    with NfsServer(MemoryFs(), 0, resources=limits) as server:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(struct.pack(">I", LAST_FRAGMENT | 100) + b"partial")
            sock.settimeout(30)
            assert sock.recv(1) == b""  # closed by the server once idle
        stats = server.wait_stats(lambda s: s.connections == 0, 30)
        assert stats is not None and stats.idle_closed == 1 and stats.buffered_bytes == 0


def test_a_busy_connection_is_not_idle() -> None:
    limits = ResourceLimits(idle_timeout=0.5)
    with (
        NfsServer(MemoryFs(), 0, resources=limits) as server,
        RpcClient("127.0.0.1", server.port) as c,
    ):
        c.mount("/")
        for i in range(20):
            c.write_file(f"/f{i}", b"x" * 1000)
        assert server.stats().idle_closed == 0


def test_scratch_files_are_sparse_and_quota_bound(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, quota_bytes=64 * MiB) as server:
        before = server.rss_mib()
        with RpcClient("127.0.0.1", server.port) as c:
            c.mount("/")
            fh = c.write_file("/scratch.bin", b"x")
            assert c.setattr(fh, Sattr3(size=2 << 30)).status == Nfsstat3.NFS3ERR_DQUOT
            assert c.setattr(fh, Sattr3(size=48 * MiB)).status == Nfsstat3.NFS3_OK  # a hole
            fs = c.fsstat(c.root or fh).resok
            assert fs is not None
            assert fs.tbytes == 64 * MiB and fs.fbytes == 16 * MiB
            assert c.attrs("/scratch.bin").used < MiB
        assert server.rss_mib() - before < 16


def test_resource_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        NfsServer(MemoryFs(), resources=ResourceLimits(max_connection_bytes=MiB), autostart=False)
    with pytest.raises(ValueError):
        NfsServer(
            MemoryFs(),
            resources=ResourceLimits(max_buffered_bytes=8 * MiB, max_connection_bytes=9 * MiB),
            autostart=False,
        )
    assert 4 <= default_max_connections() <= 1024
