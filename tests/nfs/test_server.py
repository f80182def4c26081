"""The asyncio transport: a real NfsServer on 127.0.0.1:0, spoken to over TCP."""

from __future__ import annotations

import socket
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from nfs.protocol.memfs import MemoryFs
from nfs.protocol.nfs3 import NFS_PROGRAM, NFS_V3, NfsProc3, Read3Args, Read3Res, StableHow
from nfs.protocol.portmap import IPPROTO_TCP, PMAP_PROGRAM, PMAP_V2, Mapping, PmapPort, PmapProc
from nfs.protocol.record import LAST_FRAGMENT, encode_record
from nfs.protocol.rpc import AcceptStat, CallContext, Packable, decode_reply
from nfs.protocol.server import NfsServer, make_vfs
from nfs.protocol.vfs import FileId
from tests.nfs.rpcclient import RpcClient


class GatedFs(MemoryFs):
    """A MemoryFs whose reads of /gated wait for `gate`, to observe concurrency."""

    def __init__(self) -> None:
        super().__init__(root_mode=0o777)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.gated = self.put("/gated", b"slow data")
        self.events: list[str] = []

    def read(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> tuple[bytes, bool]:
        if fid == self.gated:
            self.entered.set()
            assert self.gate.wait(30)
            self.events.append("read done")
        return super().read(fid, offset, count, ctx)

    def close(self) -> None:
        self.events.append("closed")


def test_start_port_ready_and_shutdown(memfs: MemoryFs) -> None:
    server = NfsServer(memfs, 0, autostart=False)
    assert not server.is_ready()
    with pytest.raises(RuntimeError):
        _ = server.port
    server.start()
    try:
        assert server.ready.is_set() and server.is_ready()
        assert server.port > 0
        assert server.host == "127.0.0.1"
        assert server.nfs_url("/a.txt") == (
            f"nfs://127.0.0.1/a.txt?version=3&nfsport={server.port}&mountport={server.port}"
            "&auto-traverse-mounts=0"
        )
        with RpcClient("127.0.0.1", server.port) as c:
            c.null()
            c.mount_null()
    finally:
        server.shutdown()
    assert not server.is_ready()
    server.shutdown()  # idempotent
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()


def test_port_in_use_raises(nfs_server: NfsServer, memfs: MemoryFs) -> None:
    with pytest.raises(OSError):
        NfsServer(memfs, nfs_server.port).start()


def test_make_vfs_keeps_a_vfs(memfs: MemoryFs) -> None:
    assert make_vfs(memfs) is memfs


def test_write_and_read_back_large_file(client: RpcClient) -> None:
    data = bytes(range(256)) * (3 * 4096 + 17)  # ~3 MiB, not a multiple of the chunk
    client.write_file("/big.bin", data, stable=StableHow.UNSTABLE)
    assert client.read_file("/big.bin") == data
    assert client.read_file("/big.bin", chunk=65536) == data
    assert client.attrs("/big.bin").size == len(data)


def test_pipelined_calls_on_one_connection(client: RpcClient) -> None:
    fh = client.write_file("/f", b"0123456789")
    calls: list[tuple[int, int, int, Packable | bytes]] = []
    for i in range(200):
        if i % 3 == 0:
            calls.append((NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_NULL, b""))
        else:
            calls.append((NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_READ, Read3Args(fh, i % 10, 3)))
    replies = client.call_many(calls)
    for i, reply in enumerate(replies):
        assert reply.header.success
        if i % 3:
            res = reply.result(Read3Res.unpack)
            assert res.resok is not None
            assert res.resok.data == b"0123456789"[i % 10 : i % 10 + 3]


def test_calls_run_concurrently_and_replies_come_back_by_xid() -> None:
    fs = GatedFs()
    with NfsServer(fs, 0) as server, RpcClient("127.0.0.1", server.port) as c:
        fh = c.walk("/gated")
        slow = c.send_call(NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_READ, Read3Args(fh, 0, 100))
        assert fs.entered.wait(30)
        fast = c.send_call(NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_NULL)
        first, _ = decode_reply(c.recv_record())
        assert first.xid == fast  # answered while the READ is still running
        fs.gate.set()
        res = c.wait_reply(slow).result(Read3Res.unpack)
        assert res.resok is not None and res.resok.data == b"slow data"


def test_several_connections_at_once(nfs_server: NfsServer) -> None:
    def worker(n: int) -> bytes:
        with RpcClient("127.0.0.1", nfs_server.port, uid=1000 + n, gid=1000) as c:
            payload = f"client {n}\n".encode() * 1000
            for _ in range(10):
                c.write_file(f"/w{n}.txt", payload)
                assert c.read_file(f"/w{n}.txt") == payload
            assert c.attrs(f"/w{n}.txt").uid == 1000 + n
            return payload

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(worker, range(6)))
    with RpcClient("127.0.0.1", nfs_server.port) as c:
        assert sorted(c.listdir("/")) == sorted(f"w{n}.txt" for n in range(6))
        for n, payload in enumerate(results):
            assert c.read_file(f"/w{n}.txt") == payload


def test_rpc_level_errors_over_tcp(client: RpcClient) -> None:
    assert client.call(100227, 3, 0).header.accept_stat == AcceptStat.PROG_UNAVAIL
    mismatch = client.call(NFS_PROGRAM, 2, 0).header  # v3 and v4 are served
    assert mismatch.accept_stat == AcceptStat.PROG_MISMATCH
    assert (mismatch.low, mismatch.high) == (3, 4)
    garbage = client.call(NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_GETATTR, b"\0\0\0\x40")
    assert garbage.header.accept_stat == AcceptStat.GARBAGE_ARGS
    client.null()  # the connection is still fine


def test_garbage_records_get_no_reply_and_the_connection_survives(client: RpcClient) -> None:
    client.send_raw(encode_record(b"\x01\x02"))  # not even an xid: no reply
    client.send_raw(encode_record(b""))
    # Each record read back answers the valid call sent after the garbage: nothing came
    # for the garbage (twice, so that a reply racing the first NULL would be seen).
    for _ in range(2):
        xid = client.send_call(NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_NULL)
        header, _ = decode_reply(client.recv_record())
        assert header.xid == xid


def test_oversized_record_closes_the_connection(client: RpcClient) -> None:
    client.send_raw(struct.pack(">I", LAST_FRAGMENT | 0x7FFFFFFF))
    with pytest.raises(EOFError):
        client.recv_record()


def test_shutdown_closes_connections_and_then_the_vfs() -> None:
    fs = GatedFs()
    server = NfsServer(fs, 0).start()
    c = RpcClient("127.0.0.1", server.port)
    fh = c.walk("/gated")
    c.send_call(NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_READ, Read3Args(fh, 0, 10))
    assert fs.entered.wait(30)
    stopper = threading.Thread(target=server.shutdown)
    stopper.start()
    with pytest.raises(EOFError):
        c.recv_record()  # the connection is closed, the pending reply dropped
    fs.gate.set()
    stopper.join(30)
    assert not stopper.is_alive()
    assert fs.events == ["read done", "closed"]  # the Vfs is closed after the last call
    c.close()


def test_a_client_that_hangs_up_while_its_call_runs_is_closed_after_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server's side of a connection whose client left stays open while a call of
    it runs (a worker still sends on it), and is closed and counted out once it ends."""
    fs = GatedFs()
    with NfsServer(fs, 0) as server:
        ended = threading.Event()
        end = server._end

        def spy(conn: object) -> None:
            end(conn)  # type: ignore[arg-type]
            ended.set()

        monkeypatch.setattr(server, "_end", spy)
        c = RpcClient("127.0.0.1", server.port)
        fh = c.walk("/gated")
        c.send_call(NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_READ, Read3Args(fh, 0, 10))
        assert fs.entered.wait(30)
        c.close()
        assert ended.wait(30)  # the loop has seen the client leave
        (conn,) = list(server._connections)
        assert conn.sock.fileno() != -1
        assert server.stats().connections == 1
        fs.gate.set()
        assert server.wait_stats(lambda s: s.connections == 0, 30) is not None
        assert conn.sock.fileno() == -1
        assert fs.events == ["read done"]


def test_a_client_that_hangs_up_with_nothing_running_is_closed_and_forgotten(
    memfs: MemoryFs,
) -> None:
    with NfsServer(memfs, 0) as server:
        with RpcClient("127.0.0.1", server.port) as c:
            c.null()
            (conn,) = list(server._connections)
        assert server.wait_stats(lambda s: s.connections == 0, 30) is not None
        assert conn.sock.fileno() == -1
        assert not server._connections


def test_portmapper_answers_on_the_same_port(memfs: MemoryFs) -> None:
    with NfsServer(memfs, 0, portmapper=True) as server, RpcClient("127.0.0.1", server.port) as c:
        reply = c.call(
            PMAP_PROGRAM,
            PMAP_V2,
            PmapProc.PMAPPROC_GETPORT,
            Mapping(NFS_PROGRAM, NFS_V3, IPPROTO_TCP, 0),
        )
        assert reply.result(PmapPort.unpack).port == server.port
        c.mount("/")


def test_portmapper_on_an_extra_port(memfs: MemoryFs) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    extra = probe.getsockname()[1]
    probe.close()
    with (
        NfsServer(memfs, 0, portmapper=True, portmap_port=extra) as server,
        RpcClient("127.0.0.1", extra) as c,
    ):
        reply = c.call(
            PMAP_PROGRAM,
            PMAP_V2,
            PmapProc.PMAPPROC_GETPORT,
            Mapping(100005, 3, IPPROTO_TCP, 0),
        )
        assert reply.result(PmapPort.unpack).port == server.port


def test_original_call_serves_at_construction(memfs: MemoryFs) -> None:
    server = NfsServer(memfs, 0)  # the original project's NfsServer(db, port)
    try:
        assert server.is_ready()
        assert server.start() is server  # already serving: start is a no-op
        with RpcClient("127.0.0.1", server.port) as c:
            c.null()
        linux = server.get_mount_command("/mnt/lake", platform="linux")
        assert linux[:4] == ["sudo", "mount", "-t", "nfs"]
        assert linux[-2:] == ["127.0.0.1:/", "/mnt/lake"]
        assert f"port={server.port},mountport={server.port}" in linux[5]
        assert "nolock" in linux[5] and "vers=3" in linux[5]
        mac = server.get_mount_command("/Volumes/lake", platform="darwin")
        assert "nolocks" in mac[5] and "resvport" in mac[5]
    finally:
        server.shutdown()
    assert not server.is_ready()
    with pytest.raises(RuntimeError):
        server.start()
