"""A transport floor for the NFS benchmarks: a minimal server that replays recorded replies.

It listens on one TCP port (MOUNT and NFS, as posixlake's server does). A call it has
not seen yet is forwarded to the real server (``--upstream``) and its reply recorded;
a call it has seen (the same program, version, procedure and argument bytes: the xid
and the credentials are not compared) is answered with the recorded reply, its xid
patched in. After one ``nfs-cat`` through it, later ``nfs-cat`` runs of the same file are
answered from memory: on an event loop (uvloop, as the real server), by ``recv_into``,
a dict lookup and one blocking ``sendmsg``.

What it measures: the cost of a Python server whose per-call work is next to nothing,
over the same sockets, loop and client. The real server's time minus this one's is what
its transport's own per-call work and decoding, running and encoding the calls cost
(`bench_nfs.py`, workload 1). It is no NFS server: it knows no state, and a changed file
would be served stale.

Run:  python benchmarks/nfs_replay.py --upstream PORT
      (prints "PORT PID" once listening; after SIGUSR1 (recording done) a call still
      forwarded is a miss; SIGTERM stops it, printing "misses N")
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import struct

import uvloop

from nfs.protocol.record import LAST_FRAGMENT, RecordReader, encode_record

_MARK = struct.Struct(">I")
_HEAD = struct.Struct(">IIIII")  # prog, vers, proc, credential flavor, credential length

Key = tuple[int, int, int, bytes]


def call_key(record: bytes) -> Key:
    """(prog, vers, proc, arguments) of an RPC call record (no record mark)."""
    prog, vers, proc, _, cred_len = _HEAD.unpack_from(record, 12)
    at = 32 + ((cred_len + 3) & ~3)
    verf_len = _MARK.unpack_from(record, at + 4)[0]
    at += 8 + ((verf_len + 3) & ~3)
    return prog, vers, proc, record[at:]


def _read_reply(sock: socket.socket) -> bytes:
    """The one reply record a blocking upstream socket sends next (no record mark)."""
    reader = RecordReader()
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the upstream server closed the connection")
        records = reader.feed(chunk)
        if records:
            return records[0]


class Replay:
    """The recorded replies (key -> reply without its xid) and the upstream server."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.replies: dict[Key, bytes] = {}
        self.recording = True
        self.misses = 0

    def answer(self, record: bytes, upstream: list[socket.socket]) -> bytes:
        """The reply to one call (without its record mark): recorded, or asked for."""
        key = call_key(record)
        reply = self.replies.get(key)
        if reply is not None:
            return record[:4] + reply
        if not upstream:
            upstream.append(socket.create_connection(("127.0.0.1", self.upstream)))
        up = upstream[0]
        up.sendall(encode_record(record))
        full = _read_reply(up)
        if not self.recording:
            self.misses += 1
        self.replies[key] = full[4:]
        return full


async def serve(replay: Replay) -> None:
    loop = asyncio.get_running_loop()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.setblocking(False)
    print(listener.getsockname()[1], os.getpid(), flush=True)
    buf = bytearray(256 * 1024)

    def readable(conn: socket.socket, held: list[bytes], upstream: list[socket.socket]) -> None:
        try:
            n = conn.recv_into(buf, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except ConnectionError:
            n = 0
        if not n:
            loop.remove_reader(conn.fileno())
            conn.close()
            for up in upstream:
                up.close()
            return
        data = held[0] + bytes(buf[:n]) if held[0] else bytes(buf[:n])
        at = 0
        while len(data) - at >= 4:
            mark = _MARK.unpack_from(data, at)[0]
            size = mark & ~LAST_FRAGMENT
            if len(data) - at - 4 < size:
                break
            if not mark & LAST_FRAGMENT:
                raise ValueError("multi-fragment calls are not replayed")
            reply = replay.answer(data[at + 4 : at + 4 + size], upstream)
            conn.sendmsg([_MARK.pack(len(reply) | LAST_FRAGMENT), reply])  # blocking
            at += 4 + size
        held[0] = data[at:]

    def acceptable() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                return
            conn.setblocking(True)  # sends block in the kernel; reads pass MSG_DONTWAIT
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            loop.add_reader(conn.fileno(), readable, conn, [b""], [])

    def recorded() -> None:
        replay.recording = False

    loop.add_reader(listener.fileno(), acceptable)
    loop.add_signal_handler(signal.SIGUSR1, recorded)
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    await stop
    print(f"misses {replay.misses}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Replay an NFS server's recorded replies.")
    parser.add_argument("--upstream", type=int, required=True, help="the real server's port")
    upstream: int = parser.parse_args().upstream
    uvloop.run(serve(Replay(upstream)))


if __name__ == "__main__":
    main()
