"""Backup, verify and restore throughput on a ~1 GB table, against ``cp -r`` of the folder.

Run:  python benchmarks/bench_backup.py [--size-mb 1024] [--repeats 3] [--dir /tmp]

The table holds incompressible rows (random bytes), so its size on disk is the size
asked for. Every run starts from the same warm page cache with no dirty pages (``sync`` first); the
operations take turns, and each figure is the median of ``--repeats`` runs, in MB/s of
table bytes (1 MB = 10^6 bytes). Our backup hashes
every byte (SHA-256) and fsyncs every file it writes; ``cp -r`` does neither, so the
run also times ``cp -r`` followed by an fsync of each copied file (``sync FILE...``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from posixlake import DatabaseOps
from posixlake.backup import restore, verify_backup

ROW_BYTES = 4096
CHUNK_ROWS = 16_384  # 64 MiB per insert (one data file each)


def build_table(path: Path, size_mb: int) -> DatabaseOps:
    db = DatabaseOps.create(path, {"id": "Int64", "payload": "Binary"}, engine="local")
    rows = size_mb * 1_000_000 // ROW_BYTES
    start = 0
    while start < rows:
        n = min(CHUNK_ROWS, rows - start)
        payload = os.urandom(n * ROW_BYTES)
        table = pa.table(
            {
                "id": pa.array(range(start, start + n), pa.int64()),
                "payload": pa.array(
                    [payload[i * ROW_BYTES : (i + 1) * ROW_BYTES] for i in range(n)], pa.binary()
                ),
            }
        )
        db.insert(table)
        start += n
    return db


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(
    ops: dict[str, tuple[Callable[[], object], Callable[[], object]]], repeats: int
) -> dict[str, float]:
    """Median seconds of each ``(run, cleanup)``; the ops take turns, so load noise spreads.

    Dirty pages of earlier runs are flushed (``sync``) before each timed run, so no run
    pays for another's writeback.
    """
    times: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(repeats):
        for name, (run, cleanup) in ops.items():
            os.sync()
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
            cleanup()
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-backup-", dir=args.dir))
    try:
        table = work / "table"
        print(f"building a {args.size_mb} MB table in {table} ...", flush=True)
        db = build_table(table, args.size_mb)
        size = folder_bytes(table)
        mb = size / 1e6
        files = sum(1 for p in table.rglob("*") if p.is_file())
        print(f"table: {mb:.0f} MB in {files} files, version {db.version}")
        copy, bk, rs = work / "copy", work / "backup", work / "restored"

        def rm(p: Path) -> Callable[[], None]:
            return lambda: shutil.rmtree(p, ignore_errors=True)

        def cp() -> None:
            subprocess.run(["cp", "-r", str(table), str(copy)], check=True)

        def cp_sync() -> None:
            cp()
            subprocess.run(["sync", *(str(p) for p in copy.rglob("*") if p.is_file())], check=True)

        db.backup(bk, workers=args.workers)  # the one verify and restore read
        bk2 = work / "backup2"
        results = measure(
            {
                "cp -r": (cp, rm(copy)),
                "cp -r + fsync": (cp_sync, rm(copy)),
                "backup": (lambda: db.backup(bk2, workers=args.workers), rm(bk2)),
                "verify": (lambda: verify_backup(bk, workers=args.workers), lambda: None),
                "restore": (lambda: restore(bk, rs, workers=args.workers), rm(rs)),
            },
            args.repeats,
        )
        base = results["cp -r"]
        print(f"\nmedian of {args.repeats} runs, {mb:.0f} MB, {os.cpu_count()} CPUs")
        print(f"{'operation':<16}{'seconds':>10}{'MB/s':>10}{'vs cp -r':>10}")
        for name, secs in results.items():
            print(f"{name:<16}{secs:>10.2f}{mb / secs:>10.0f}{base / secs:>10.2f}x")
        assert verify_backup(bk).ok
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
