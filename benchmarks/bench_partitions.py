"""Reading one partition of a table costs that partition, not the table (/partitions).

Run:  python benchmarks/bench_partitions.py [--rows 200000] [--partitions 20] [--inserts 4]
                                            [--dir DIR]

A table (id Int64, day Date, name String, score Float64) partitioned by ``day`` is built
with ``--inserts`` bulk inserts through the local engine (each writes one file per
partition). Through TableFs in process (``PathOps``: LOOKUP, GETATTR, 1 MiB READs):

1. listing: READDIR of /partitions on a fresh TableFs (from the add actions; no data read);
2. cold partition read: one partition's data.csv, an empty segment cache (what a first
   ``cat partitions/day=.../data.csv`` costs): seconds, bytes, segments rendered;
3. cold whole read: /data/data.csv, another empty segment cache (the partition was read
   first, so the Parquet files' pages it shares are warm: the ratio favours the whole read);
4. warm: both again on the same TableFs (segments cached, memory-mapped).

Prints one JSON object with the ratios partition / whole (time and bytes). A measurement,
not a test: nothing is asserted; the machine may be shared.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps


def build(path: Path, rows: int, partitions: int, inserts: int) -> DatabaseOps:
    db = DatabaseOps.create(
        path,
        {"id": "Int64", "day": "Date", "name": "String", "score": "Float64"},
        partition_by=["day"],
        engine="local",
    )
    days = [datetime.date(2024, 1, 1) + datetime.timedelta(days=d) for d in range(partitions)]
    per = rows // inserts
    for k in range(inserts):
        ids = range(k * per, (k + 1) * per)
        db.insert(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "day": pa.array([days[i % partitions] for i in ids], pa.date32()),
                    "name": pa.array([f"name {i}, of row" for i in ids]),
                    "score": pa.array([i / 7 for i in ids], pa.float64()),
                }
            )
        )
    return db


def timed_read(fs: TableFs, path: str) -> tuple[float, int]:
    start = time.perf_counter()
    size = fs.paths.getattr(path).size
    got = len(fs.paths.read_file(path))
    assert got == size
    return time.perf_counter() - start, got


def fresh(db: DatabaseOps, work: Path, name: str) -> TableFs:
    return TableFs(
        db, idle_timer=False, state_dir=work / f"state-{name}", segment_cache=work / f"seg-{name}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--inserts", type=int, default=4)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-partitions-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        db = build(work / "t", args.rows, args.partitions, args.inserts)
        out: dict[str, Any] = {
            "rows": args.rows,
            "partitions": args.partitions,
            "inserts": args.inserts,
            "build_s": round(time.perf_counter() - t0, 3),
        }
        part = "/partitions/day=2024-01-01/data.csv"

        fs = fresh(db, work, "part")
        start = time.perf_counter()
        listed = [n for n in fs.paths.readdir("/partitions") if n not in (".", "..")]
        out["list_s"] = round(time.perf_counter() - start, 4)
        out["listed"] = len(listed)
        out["list_rendered_segments"] = fs._s.segmenter.stats.rendered
        secs, size = timed_read(fs, part)
        out["cold_partition_s"] = round(secs, 4)
        out["partition_bytes"] = size
        out["partition_rendered_segments"] = fs._s.segmenter.stats.rendered
        warm_part, _ = timed_read(fs, part)
        fs.close()

        fs = fresh(db, work, "whole")
        secs, size = timed_read(fs, "/data/data.csv")
        out["cold_whole_s"] = round(secs, 4)
        out["whole_bytes"] = size
        out["whole_rendered_segments"] = fs._s.segmenter.stats.rendered
        warm_whole, _ = timed_read(fs, "/data/data.csv")
        fs.close()

        out["warm_partition_s"] = round(warm_part, 4)
        out["warm_whole_s"] = round(warm_whole, 4)
        out["ratio_cold_time"] = round(out["cold_partition_s"] / out["cold_whole_s"], 4)
        out["ratio_warm_time"] = round(warm_part / warm_whole, 4)
        out["ratio_bytes"] = round(out["partition_bytes"] / out["whole_bytes"], 4)
        print(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
