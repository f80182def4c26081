"""One-row appends to data.csv next to a one-row ``db.insert`` on the same table (issue 24).

Run:  python benchmarks/bench_append.py [--rows 100000] [--runs 30] [--block 5] [--dir DIR]

A table (id Int64, name String, value Float64) of ``--rows`` rows, served by ``NfsServer``
in this process. In blocks of ``--block`` operations each, in turn:

1. **NFS append**: what ``echo row >> data.csv`` asks of the server, through libnfs (the
   library of Debian's ``libnfs-utils``, called with ctypes; a mount held open, as a
   client's): ``stat`` (GETATTR), ``open`` with ``O_SYNC`` (LOOKUP), ``pwrite`` of one
   line at the end (WRITE FILE_SYNC: the server commits it before it replies), ``fsync``
   (COMMIT), ``close``;
2. **in-process append**: the same through ``TableFs`` without RPC (``getattr`` and a
   FILE_SYNC ``write``);
3. **db.insert**: one row through the API, on the same table.

Each append is checked to have made exactly one commit, and at the end the served
data.csv is checked to be exactly the table's CSV (a fresh rendering, by a second
server with an empty segment cache). The first
operation of each block is not counted: it renders the versions the previous block's
other writer committed (a cost of reading another writer's commits, not of appending).
Medians (ms) and their ratios are printed; with a loaded machine, compare runs made
side by side. These are measurements, not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nfs.protocol.nfs3 import StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.server import NfsServer
from nfs.table.tablefs import DATA_CSV_ID, TableFs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_nfs import make_table  # the same table as bench_nfs.py's appends


class _Url(ctypes.Structure):
    _fields_ = [("server", ctypes.c_char_p), ("path", ctypes.c_char_p), ("file", ctypes.c_char_p)]


class LibNfs:
    """A libnfs client (its synchronous API, through ctypes) with the export mounted."""

    def __init__(self, port: int) -> None:
        name = ctypes.util.find_library("nfs") or "libnfs.so.13"
        lib = ctypes.CDLL(name)
        lib.nfs_init_context.restype = ctypes.c_void_p
        lib.nfs_get_error.restype = ctypes.c_char_p
        lib.nfs_get_error.argtypes = [ctypes.c_void_p]
        lib.nfs_parse_url_dir.restype = ctypes.POINTER(_Url)
        lib.nfs_parse_url_dir.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nfs_destroy_url.argtypes = [ctypes.POINTER(_Url)]
        lib.nfs_mount.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
        lib.nfs_stat64.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        lib.nfs_open.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_void_p),
        ]
        # libnfs 5 (soname 13): nfs_pwrite(nfs, fh, offset, count, buf)
        lib.nfs_pwrite.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_uint64,
            ctypes.c_uint64,
            ctypes.c_char_p,
        ]
        lib.nfs_fsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.nfs_close.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.nfs_destroy_context.argtypes = [ctypes.c_void_p]
        self._lib = lib
        self._nfs = lib.nfs_init_context()
        url = lib.nfs_parse_url_dir(
            self._nfs, f"nfs://127.0.0.1/?version=3&nfsport={port}&mountport={port}".encode()
        )
        if not url:
            raise RuntimeError(self._error())
        try:
            self._check(lib.nfs_mount(self._nfs, url.contents.server, url.contents.path))
        finally:
            lib.nfs_destroy_url(url)

    def _error(self) -> str:
        msg = self._lib.nfs_get_error(self._nfs)
        return msg.decode(errors="replace") if msg else "libnfs error"

    def _check(self, rc: int) -> int:
        if rc < 0:
            raise RuntimeError(self._error())
        return rc

    def append(self, path: str, line: bytes) -> None:
        """stat, open(O_WRONLY | O_SYNC), pwrite at the end, fsync, close."""
        lib, nfs = self._lib, self._nfs
        st = (ctypes.c_uint64 * 32)()
        self._check(lib.nfs_stat64(nfs, path.encode(), st))
        size = st[7]  # struct nfs_stat_64: dev, ino, mode, nlink, uid, gid, rdev, size, ...
        fh = ctypes.c_void_p()
        self._check(lib.nfs_open(nfs, path.encode(), os.O_WRONLY | os.O_SYNC, ctypes.byref(fh)))
        try:
            n = self._check(lib.nfs_pwrite(nfs, fh, size, len(line), line))
            if n != len(line):
                raise RuntimeError(f"short write: {n} of {len(line)}")
            self._check(lib.nfs_fsync(nfs, fh))
        finally:
            lib.nfs_close(nfs, fh)

    def close(self) -> None:
        self._lib.nfs_destroy_context(self._nfs)


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=30, help="counted operations of each kind")
    ap.add_argument("--block", type=int, default=5, help="operations of a kind in a row")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    args = ap.parse_args()
    block = max(2, args.block)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-append-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        print(f"bench_append: building {args.rows:,} rows ...", file=sys.stderr, flush=True)
        db = make_table(work / "t", args.rows)
        fs = TableFs(db, state_dir=work / "state", segment_cache=work / "segments")
        nfs_ms: list[float] = []
        local_ms: list[float] = []
        insert_ms: list[float] = []
        key = 50_000_000
        with NfsServer(fs) as srv:
            try:
                client = LibNfs(srv.port)
            except OSError as err:  # the library itself is missing
                sys.exit(f"bench_append: needs libnfs (apt install libnfs-utils): {err}")
            ctx = CallContext.local(peer="127.0.0.1:1")
            fs.read(DATA_CSV_ID, 0, 1 << 16, ctx)  # the first rendering: not an append's
            try:
                while min(len(nfs_ms), len(local_ms), len(insert_ms)) < args.runs:
                    for i in range(block):
                        key += 1
                        line = f"{key},nfs,0.5\n".encode()
                        before = db.version
                        t0 = time.perf_counter()
                        client.append("/data/data.csv", line)
                        took = (time.perf_counter() - t0) * 1000
                        assert db.version == before + 1, "an append must make one commit"
                        if i:
                            nfs_ms.append(took)
                    for i in range(block):
                        key += 1
                        line = f"{key},local,0.5\n".encode()
                        before = db.version
                        t0 = time.perf_counter()
                        size = fs.getattr(DATA_CSV_ID, ctx).size
                        fs.write(DATA_CSV_ID, size, line, StableHow.FILE_SYNC, ctx)
                        took = (time.perf_counter() - t0) * 1000
                        assert db.version == before + 1, "an append must make one commit"
                        if i:
                            local_ms.append(took)
                    for i in range(block):
                        key += 1
                        row = [{"id": key, "name": "api", "value": 0.5}]
                        t0 = time.perf_counter()
                        db.insert(row)
                        took = (time.perf_counter() - t0) * 1000
                        if i:
                            insert_ms.append(took)
            finally:
                client.close()
            served = fs.paths.read_file("/data/data.csv")
        # a fresh rendering: another server with an empty segment cache
        other = TableFs(
            db, state_dir=work / "state2", segment_cache=work / "segments2", idle_timer=False
        )
        fresh = other.paths.read_file("/data/data.csv")
        other.close()
        assert served == fresh, "the served data.csv is not the table's CSV"
        assert len(served.splitlines()) == db.to_arrow().num_rows + 1
        n, loc, ins = med(nfs_ms), med(local_ms), med(insert_ms)
        print(
            f"rows {args.rows:,}, {len(nfs_ms)} of each (medians, ms); the table has "
            f"{db.version + 1} versions at the end"
        )
        print(f"  one-row append, libnfs (stat, open, pwrite FILE_SYNC, fsync, close): {n:8.2f}")
        print(f"  one-row append, TableFs in process (getattr, write FILE_SYNC):      {loc:8.2f}")
        print(f"  one-row db.insert:                                                  {ins:8.2f}")
        print(
            f"  ratio NFS append / db.insert: {n / ins:.2f}   in process / db.insert: "
            f"{loc / ins:.2f}   (target <= 2)"
        )
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
