"""A one-row change after a dense edit: posixlake's replace_rows against plain delta-rs UPDATE.

Run:  python benchmarks/bench_rows.py [--rows 1000000,10000000] [--runs 3] [--mode key,rows]
                                      [--dir DIR] [--target-file-size BYTES]

What an NFS overwrite of data.csv becomes is ``DatabaseOps.replace_rows`` (a delta-rs
MERGE; by primary key, or without one as a multiset of whole rows). For each size, in one
process, two tables of the same rows (id Int64, name String, score Float64, city String;
ten inserts each, so ten files) are built: one by ``DatabaseOps.create`` + ``insert``, one
by plain ``write_deltalake``. Then:

1. the dense edit (``sed -i 's/,Paris$/,Lyon/'``: a quarter of the rows): posixlake
   ``replace_rows(delete=<Paris rows>, insert=<Lyon rows>)``; delta-rs
   ``DeltaTable.update(predicate="city = 'Paris'", updates={"city": "'Lyon'"})``;
2. ``--runs`` one-row changes (the name of a row; rows spread over the table), posixlake
   and delta-rs alternating, each a fresh row: posixlake ``replace_rows`` of that row,
   delta-rs ``DeltaTable.update(predicate="id = N")``; also delta-rs' UPDATE on a copy of
   posixlake's table after its dense edit (the same files: what the file layout costs
   apart from the MERGE).

Reported: medians, the ratio posixlake / delta-rs (1.00 = the same cost), the MB of the
files each change rewrote (removed from the table), and the peak RSS of each side's
changes (VmHWM, reset before each change; it includes the process' RSS before it, so
the increase over that RSS is printed too: "+N").
``--target-file-size 0`` removes ``delta.targetFileSize`` from posixlake's table (delta-rs'
100 MiB default: the layout before posixlake set it). Measurements, not tests: nothing here
asserts a time. The machine may be shared: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from posixlake import DatabaseOps

SCHEMA = {"id": "Int64", "name": "String", "score": "Float64", "city": "String"}
CITIES = ["Paris", "Berlin", "Zürich", "New York, NY", "São Paulo", ""]


def rows_of(start: int, n: int) -> pa.Table:
    """Rows ``start .. start + n``; a quarter of them in Paris (as bench_nfs_scale.py)."""
    ids = pa.array(range(start, start + n), pa.int64())
    cities = pa.array(CITIES, pa.string())
    return pa.table(
        {
            "id": ids,
            "name": pc.binary_join_element_wise("user-", pc.cast(ids, pa.string()), ""),
            "score": pc.divide(pc.cast(pc.multiply(ids, 7919), pa.float64()), 1000.0),
            "city": cities.take(pc.cast(pc.bit_wise_and(ids, 3), pa.int64())),
        }
    )


def status_mb(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def reset_peak_rss() -> None:
    """Start VmHWM again from the current RSS (Linux: clear_refs 5)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def file_sizes(path: str) -> dict[str, int]:
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    return dict(zip(actions["path"].to_pylist(), actions["size_bytes"].to_pylist(), strict=True))


def timed(path: str, fn: Callable[[], Any]) -> tuple[float, float, float, float]:
    """Run ``fn``; return (seconds, MB of files it removed from the table, peak RSS MB,
    peak RSS MB over the RSS before the call)."""
    before = file_sizes(path)
    reset_peak_rss()
    rss = status_mb("VmRSS")
    t = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t
    peak = status_mb("VmHWM")
    after = file_sizes(path)
    removed = sum(size for p, size in before.items() if p not in after) / 1e6
    return seconds, removed, peak, peak - rss


def one_size(rows: int, keyed: bool, runs: int, root: Path, target: int | None) -> dict[str, Any]:
    shutil.rmtree(root, ignore_errors=True)
    ours_path, plain_path, same_path = str(root / "ours"), str(root / "plain"), str(root / "same")
    chunk = rows // 10
    db = DatabaseOps.create(ours_path, SCHEMA, engine="local", primary_key="id" if keyed else None)
    if target is not None:  # 0: delta-rs' default, what posixlake's tables had before
        size = str(target or 100 << 20)
        DeltaTable(ours_path).alter.set_table_properties({"delta.targetFileSize": size})
    t = time.perf_counter()
    for start in range(0, rows, chunk):
        db.insert(rows_of(start, min(chunk, rows - start)))
        write_deltalake(plain_path, rows_of(start, min(chunk, rows - start)), mode="append")
    print(f"  built {rows:,} rows twice in {time.perf_counter() - t:.1f} s", flush=True)
    key = ["id"] if keyed else None
    paris = db.query("SELECT * FROM data WHERE city = 'Paris'").arrow()
    lyon = paris.set_column(3, "city", pa.array(["Lyon"] * paris.num_rows, pa.string()))
    dense_ours = timed(ours_path, partial(db.replace_rows, delete=paris, insert=lyon, key=key))
    plain = DeltaTable(plain_path)
    dense_plain = timed(
        plain_path, partial(plain.update, predicate="city = 'Paris'", updates={"city": "'Lyon'"})
    )
    del paris, lyon
    shutil.copytree(ours_path, same_path)
    same = DeltaTable(same_path)
    layout = {
        "ours_files_mb": sorted(round(s / 1e6, 1) for s in file_sizes(ours_path).values()),
        "plain_files_mb": sorted(round(s / 1e6, 1) for s in file_sizes(plain_path).values()),
    }
    out: dict[str, list[tuple[float, float, float, float]]] = {"ours": [], "plain": [], "same": []}
    for i in range(runs):
        row_id = rows * (2 * i + 1) // (2 * runs) + 1  # rows spread over the table
        row = db.query(f"SELECT * FROM data WHERE id = {row_id}").arrow()
        changed = row.set_column(1, "name", pa.array([f"renamed-{i}"], pa.string()))
        out["ours"].append(
            timed(ours_path, partial(db.replace_rows, delete=row, insert=changed, key=key))
        )
        sets = {"name": f"'renamed-{i}'"}
        out["plain"].append(
            timed(plain_path, partial(plain.update, predicate=f"id = {row_id}", updates=sets))
        )
        out["same"].append(
            timed(same_path, partial(same.update, predicate=f"id = {row_id}", updates=sets))
        )
    db.close()
    result: dict[str, Any] = {
        "rows": rows,
        "mode": "key" if keyed else "rows",
        "dense_ours_s": dense_ours[0],
        "dense_plain_s": dense_plain[0],
        **layout,
    }
    for side, xs in out.items():
        result[f"{side}_s"] = statistics.median(x[0] for x in xs)
        result[f"{side}_all_s"] = [round(x[0], 2) for x in xs]
        result[f"{side}_rewritten_mb"] = statistics.median(x[1] for x in xs)
        result[f"{side}_peak_rss_mb"] = max(x[2] for x in xs)
        result[f"{side}_peak_rss_over_mb"] = max(x[3] for x in xs)
    shutil.rmtree(root, ignore_errors=True)
    return result


def side(r: dict[str, Any], name: str) -> str:
    return (
        f"rewrote {r[name + '_rewritten_mb']:.0f} MB, peak RSS "
        f"{r[name + '_peak_rss_mb']:.0f} MB, +{r[name + '_peak_rss_over_mb']:.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mode", default="key,rows", help="key (primary key), rows, or both")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument(
        "--target-file-size",
        type=int,
        default=None,
        help="set delta.targetFileSize on posixlake's table (0: delta-rs' 100 MiB default)",
    )
    args = parser.parse_args()
    print(f"load average {os.getloadavg()} on {os.cpu_count()} cores", flush=True)
    results = []
    for rows in [int(r) for r in args.rows.split(",")]:
        for mode in args.mode.split(","):
            root = Path(args.dir) / f"bench-rows-{rows}-{mode}-{os.getpid()}"
            r = one_size(rows, mode == "key", args.runs, root, args.target_file_size)
            results.append(r)
            print(
                f"{rows:>11,} rows, {r['mode']:>4}: one-row change after a dense edit "
                f"posixlake {r['ours_s']:.2f} s ({side(r, 'ours')}) | delta-rs UPDATE "
                f"{r['plain_s']:.2f} s ({side(r, 'plain')}) | "
                f"ratio {r['ours_s'] / r['plain_s']:.2f}x",
                flush=True,
            )
            print(
                f"{'':>23}delta-rs UPDATE on a copy of posixlake's files {r['same_s']:.2f} s "
                f"(ratio {r['ours_s'] / r['same_s']:.2f}x); runs: posixlake "
                f"{r['ours_all_s']}, delta-rs {r['plain_all_s']}, same files {r['same_all_s']}",
                flush=True,
            )
            print(
                f"{'':>23}dense edit: posixlake {r['dense_ours_s']:.1f} s, delta-rs UPDATE "
                f"{r['dense_plain_s']:.1f} s; files after it (MB): posixlake "
                f"{r['ours_files_mb']}, delta-rs {r['plain_files_mb']}",
                flush=True,
            )
    print(f"load average {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
