"""Reading one partition of a table costs that partition, not the table (/partitions).

Run:  python benchmarks/bench_partitions.py [--rows 200000] [--partitions 20] [--inserts 4]
                                            [--dir DIR] [--no-whole] [--edits 5]

A table (id Int64, day Date, name String, score Float64) partitioned by ``day`` is built
with ``--inserts`` bulk inserts through the local engine (each writes one file per
partition). Through TableFs in process (``PathOps``: LOOKUP, GETATTR, 1 MiB READs):

1. listing: READDIR of /partitions on a fresh TableFs (from the add actions; no data read);
2. cold partition read: one partition's data.csv, an empty segment cache (what a first
   ``cat partitions/day=.../data.csv`` costs): seconds, bytes, segments rendered;
3. cold whole read: /data/data.csv, another empty segment cache (the partition was read
   first, so the Parquet files' pages it shares are warm: the ratio favours the whole read);
4. warm: both again on the same TableFs (segments cached, memory-mapped);
5. edits of one partition's data.csv (``--edits`` times each, medians), beside the same
   change through the API on the same table: a one-row append (``echo >>``: a FILE_SYNC
   WRITE at its end) against ``db.insert`` of one row, and a one-row change of the
   partition (the whole partition written back, ``cp``/``sed -i``) against ``db.update``
   of that row (delta-rs). ``--no-whole`` skips step 3's whole read (at 100M rows it
   renders ~4.5 GB); then the ratios are of the partition to the API only.

Prints one JSON object with the ratios partition / whole (time and bytes), the edit
medians and ratios, and the peak RSS. A measurement, not a test: nothing is asserted;
the machine may be shared.
"""

from __future__ import annotations

import argparse
import datetime
import json
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps


def build(path: Path, rows: int, partitions: int, inserts: int) -> DatabaseOps:
    db = DatabaseOps.create(
        path,
        {"id": "Int64", "day": "Date", "name": "String", "score": "Float64"},
        partition_by=["day"],
        engine="local",
    )
    days = pa.array(
        [datetime.date(2024, 1, 1) + datetime.timedelta(days=d) for d in range(partitions)],
        pa.date32(),
    )
    per = rows // inserts
    for k in range(inserts):
        ids = pa.array(range(k * per, (k + 1) * per), pa.int64())
        db.insert(
            pa.table(
                {
                    "id": ids,
                    "day": pc.take(days, pc.remainder(ids, partitions)),
                    "name": pc.binary_join_element_wise(
                        "name ", pc.cast(ids, pa.string()), ", of row", ""
                    ),
                    "score": pc.divide(pc.cast(ids, pa.float64()), 7.0),
                }
            )
        )
    return db


def edits(db: DatabaseOps, work: Path, part: str, n: int) -> dict[str, Any]:
    """One-row edits of one partition's data.csv beside the same change through the API."""
    fs = fresh(db, work, "edits")
    out: dict[str, Any] = {}
    append, insert, change, update = [], [], [], []
    try:
        for k in range(n):
            content = fs.paths.read_file(part)  # what the client holds (its READs)
            line = f"{900_000_000 + k},2024-01-01,appended {k},0.5\n".encode()
            start = time.perf_counter()
            fs.paths.write_file(part, line, offset=len(content), commit=False)
            append.append(time.perf_counter() - start)
            start = time.perf_counter()
            db.insert(
                [
                    {
                        "id": 910_000_000 + k,
                        "day": datetime.date(2024, 1, 1),
                        "name": "x",
                        "score": 0.5,
                    }
                ]
            )
            insert.append(time.perf_counter() - start)

            content = fs.paths.read_file(part)
            first = content.split(b"\n", 2)[1]  # the partition's first row
            new_row = first.rsplit(b",", 1)[0] + f",{k + 0.25}".encode()
            start = time.perf_counter()
            fs.paths.write_file(part, content.replace(first, new_row, 1), truncate=True)
            change.append(time.perf_counter() - start)
            row_id = int(first.split(b",", 1)[0])
            start = time.perf_counter()
            db.update(f"id = {row_id}", {"score": k + 0.75})
            update.append(time.perf_counter() - start)
    finally:
        fs.close()
    for name, values in (
        ("append", append),
        ("insert", insert),
        ("change", change),
        ("update", update),
    ):
        out[f"{name}_median_s"] = round(statistics.median(values), 4)
    out["ratio_append_to_insert"] = round(out["append_median_s"] / out["insert_median_s"], 3)
    out["ratio_change_to_update"] = round(out["change_median_s"] / out["update_median_s"], 3)
    return out


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
    ap.add_argument("--no-whole", action="store_true", help="skip the cold whole-table read")
    ap.add_argument("--edits", type=int, default=5, help="one-row edits of each kind (0: none)")
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

        out["warm_partition_s"] = round(warm_part, 4)
        if not args.no_whole:
            fs = fresh(db, work, "whole")
            secs, size = timed_read(fs, "/data/data.csv")
            out["cold_whole_s"] = round(secs, 4)
            out["whole_bytes"] = size
            out["whole_rendered_segments"] = fs._s.segmenter.stats.rendered
            warm_whole, _ = timed_read(fs, "/data/data.csv")
            fs.close()
            out["warm_whole_s"] = round(warm_whole, 4)
            out["ratio_cold_time"] = round(out["cold_partition_s"] / out["cold_whole_s"], 4)
            out["ratio_warm_time"] = round(warm_part / warm_whole, 4)
            out["ratio_bytes"] = round(out["partition_bytes"] / out["whole_bytes"], 4)
        if args.edits:
            out.update(edits(db, work, part, args.edits))
        out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        print(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
