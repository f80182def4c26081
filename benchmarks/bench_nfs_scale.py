"""The NFS face at lake scale: segmented renderings of data.csv, and edits that cost the change.

Run:  python benchmarks/bench_nfs_scale.py [--rows 100000,10000000] [--chunk 1000000]
                                           [--dir DIR] [--runs N] [--workers N] [--baseline]
                                           [--compare PATH]

Tables (id Int64 primary key, name String, score Float64, city String) are built with bulk
inserts through the local engine, ``--chunk`` rows per insert (one data file each). Every
figure is measured in a fresh process, at the level TableFs calls: the version's rendering
from ``RenderCache(segmenter=Segmenter(...))`` — ``.size`` (what GETATTR needs) and
``.read()`` of the page holding the end of the file (what the client reads next):

1. first-ever render: an empty segment cache, GETATTR + READ of the last page;
2. first read after a restart: a new process, the cache directory warm, the table
   unchanged (also: the time to open the table, which a server start pays anyway);
3. read after an API insert of one row: another handle inserts one row; the serving
   handle notices the version, GETATTR + READ of the last page (median of ``--runs``);
4. warm sequential read: the whole file in 1 MiB READs (NFS rsize), each copied once
   (as packing the reply does), MB/s;

5. ``echo >>`` of one row: TableFs GETATTR, WRITE of the line at the end, COMMIT (median
   of ``--runs``; the rows are deleted again afterwards);
6. one-row change in a whole-file overwrite, as ``cat changed.csv > data.csv`` through the
   kernel client sends it (the name of the row in the middle changes; the client's copy
   is streamed from a file, not held in memory): SETATTR size 0, 1 MiB WRITEs (UNSTABLE), COMMIT, then
   the apply — the time from SETATTR to the apply's end, and (in parentheses) to COMMIT's reply,
   the part the journal costs (the client's read of the file before is not timed);
7. the same overwrite with two rows changed far apart (at 1% and 99% of the file, as one
   ``sed -i`` changing two lines sends it);
8. the same overwrite with a thousand rows changed, evenly apart;
9. the same overwrite with a quarter of the rows changed (``sed -i 's/,Paris$/,Lyon/'``,
   or back when an earlier run made them Lyon);

phases 5 to 9 call TableFs in the serving process (no RPC transport: bench_nfs.py times
the wire), with a state directory of their own;
each with the serving process' peak RSS (VmHWM, which counts the mapped cache pages it
touched) and its anonymous memory at the end (RssAnon).
``--compare PATH`` times only the first-ever render (1), ``--runs`` times with this
checkout's code and as many with PATH's (another checkout's ``nfs`` and ``posixlake`` first
on the path), alternating, each in a fresh process with an empty segment cache, and prints
the medians side by side: wall time, CPU seconds, MB/s (data.csv's size over the wall
time) and peak RSS.
``--baseline`` also times today's path (``db.to_arrow(version)`` rendered whole) for 1 and 3.

These are measurements, not tests: nothing here asserts a time. The machine may be
shared: the CPU seconds of the first render are printed next to its wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from nfs.protocol.nfs3 import Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.table.render_cache import RenderCache, VersionBytes
from nfs.table.segments import Segmenter, SegmentStore
from nfs.table.tablefs import DATA_CSV_ID, TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import iter_render_csv

SCHEMA = {"id": "Int64", "name": "String", "score": "Float64", "city": "String"}
PAGE = 4096
RSIZE = 1 << 20
CITIES = ["Paris", "Berlin", "Zürich", "New York, NY", "São Paulo", ""]


def rows_of(start: int, n: int) -> pa.Table:
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


def build(path: Path, rows: int, chunk: int) -> None:
    """Create the table with ``rows`` rows in inserts of ``chunk`` rows (skip if present)."""
    marker = path / "_bench_rows"
    if marker.exists() and marker.read_text() == str(rows):
        return
    shutil.rmtree(path, ignore_errors=True)
    t = time.perf_counter()
    db = DatabaseOps.create(path, SCHEMA, engine="local")
    db.set_primary_key("id")
    for start in range(0, rows, chunk):
        db.insert(rows_of(start, min(chunk, rows - start)))
    db.close()
    marker.write_text(str(rows))
    print(f"  built {rows:,} rows in {time.perf_counter() - t:.1f} s", flush=True)


# -- phases (each runs in its own process) -------------------------------------------------


def status_mb(key: str) -> float:
    """A memory figure of this process from /proc/self/status (VmHWM: peak RSS, including
    mapped cache pages touched; RssAnon: anonymous memory now). ru_maxrss would include
    the parent's peak, which Linux keeps over exec."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_mb() -> float:
    return status_mb("VmHWM")


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def last_page(r: VersionBytes) -> int:
    """GETATTR (the size) and READ of the page holding the end of the file."""
    size = r.size
    data, eof = r.read(max(0, size - 1) // PAGE * PAGE, PAGE)
    assert eof and (size == 0 or len(data) > 0)
    return size


def segmented(db: DatabaseOps, cache_dir: str, workers: int | None) -> RenderCache[Any]:
    return RenderCache(segmenter=Segmenter(db, SegmentStore(cache_dir), workers=workers))


def whole(db: DatabaseOps) -> RenderCache[Any]:
    def render(version: int) -> Iterator[bytes]:
        table = db.to_arrow(version=version)
        return iter_render_csv(table, schema=table.schema)

    return RenderCache(render)


def phase(name: str, table: str, cache_dir: str, runs: int, workers: int | None) -> dict[str, Any]:
    t = time.perf_counter()
    db = DatabaseOps.open(table, engine="local")
    opened = time.perf_counter() - t
    baseline = name.startswith("baseline")

    def cache_for() -> RenderCache[Any]:
        return whole(db) if baseline else segmented(db, cache_dir, workers)

    out: dict[str, Any] = {"open_ms": opened * 1000}
    if name in ("first", "restart", "baseline-first"):
        c, t = cpu_s(), time.perf_counter()
        cache = cache_for()  # the server builds it at start: counted, to be conservative
        size = last_page(cache.get(db.version))
        out.update(ms=(time.perf_counter() - t) * 1000, cpu_s=cpu_s() - c, size=size)
    elif name in ("insert", "baseline-insert"):
        cache = cache_for()
        last_page(cache.get(db.version))
        # the API writer is another process (its key index is not the server's memory)
        writer = subprocess.Popen(
            [sys.executable, __file__, "--phase", "writer", "--table", table],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdin is not None and writer.stdout is not None
        times = []
        for _ in range(runs):
            writer.stdin.write("insert\n")
            writer.stdin.flush()
            writer.stdout.readline()
            t = time.perf_counter()
            version = db.version  # what TableFs does when its version TTL expires
            last_page(cache.get(version))
            times.append((time.perf_counter() - t) * 1000)
        # leave the table as it was: the inserted rows go again (a new version)
        writer.stdin.write("cleanup\n")
        writer.stdin.close()
        writer.wait()
        out.update(ms=statistics.median(times), all_ms=times)
    elif name == "seq":
        cache = cache_for()
        r = cache.get(db.version)
        rates = []
        for _ in range(runs):
            t = time.perf_counter()
            pos, n = 0, 0
            while True:
                data, eof = r.read(pos, RSIZE)
                n += len(bytes(data))  # the reply copies the bytes
                pos += len(data)
                if eof:
                    break
            rates.append(n / (time.perf_counter() - t) / 1e6)
        out.update(mb_s=statistics.median(rates))
    out["peak_rss_mb"] = peak_rss_mb()
    out["anon_mb"] = status_mb("RssAnon")
    return out


def reset_peak_rss() -> None:
    """Start VmHWM again from the current RSS (Linux: clear_refs 5)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def write_phase(name: str, table: str, cache_dir: str, runs: int) -> dict[str, Any]:
    """Phases 5 and 6: edits through TableFs, in this process."""
    db = DatabaseOps.open(table, engine="local")
    state = tempfile.mkdtemp(prefix="bench-nfs-state-")
    fs = TableFs(db, state_dir=state, segment_cache=cache_dir, idle_timer=False)
    ctx = CallContext.local(peer="10.0.0.1:700")
    out: dict[str, Any] = {}
    try:
        size = fs.getattr(DATA_CSV_ID, ctx).size  # the first read renders (not timed)
        if name == "append":
            times = []
            for i in range(runs):
                reset_peak_rss()
                t = time.perf_counter()
                size = fs.getattr(DATA_CSV_ID, ctx).size
                line = f"{(1 << 41) + i},appended,1.5,Paris\n".encode()
                # echo >> sends one FILE_SYNC WRITE: applied before its reply
                fs.write(DATA_CSV_ID, size, line, StableHow.FILE_SYNC, ctx)
                times.append((time.perf_counter() - t) * 1000)
            db.delete_rows_where(f"id >= {1 << 41}")
            out["ms"] = statistics.median(times)
            out["all_ms"] = times
        else:  # overwrite, streamed through a file as `cat changed.csv > data.csv` is
            changed = Path(state) / "changed.csv"
            # overwrite: the row in the middle; spread: two rows, at 1% and at 99%
            wheres = [size // 2] if name == "overwrite" else [size // 100, size * 99 // 100]
            if name == "dense":
                wheres = []
            elif name == "scattered":  # a thousand rows, evenly apart
                wheres = [size * i // 1001 for i in range(1, 1001)]
            swap: tuple[bytes, bytes] | None = None
            with open(changed, "wb") as f:
                pos = 0
                while pos < size:
                    data, eof = fs.read(DATA_CSV_ID, pos, RSIZE, ctx)
                    chunk = bytes(data)
                    while wheres and pos + len(chunk) > wheres[0]:
                        lf = chunk.find(b"\n", max(0, wheres[0] - pos))
                        if lf < 0 or lf + 1 >= len(chunk):
                            break
                        at = chunk.find(b",", lf + 1) + 1  # the next row's name
                        chunk = chunk[:at] + b"renamed-" + chunk[at:]
                        wheres.pop(0)
                    if name == "dense":  # sed -i 's/,Paris$/,Lyon/': a quarter of the rows
                        if swap is None:  # (back again, when an earlier run made them Lyon)
                            swap = (b",Paris\n", b",Lyon\n")
                            if b",Paris\n" not in chunk:
                                swap = (b",Lyon\n", b",Paris\n")
                        chunk = chunk.replace(*swap)
                    f.write(chunk)
                    pos += len(data)
                    if eof:
                        break
            version = db.version
            reset_peak_rss()
            out["rss_before_mb"] = status_mb("VmRSS")
            t, cpu = time.perf_counter(), cpu_s()
            fs.setattr(DATA_CSV_ID, Sattr3(size=0), ctx)
            with open(changed, "rb") as f:
                pos = 0
                while chunk := f.read(RSIZE):
                    fs.write(DATA_CSV_ID, pos, chunk, StableHow.UNSTABLE, ctx)
                    pos += len(chunk)
            fs.commit(DATA_CSV_ID, 0, 0, ctx)  # close(): durable
            out["close_ms"] = (time.perf_counter() - t) * 1000
            # the apply, which NFSv3 runs once the writer is quiet for --idle-commit
            # seconds (not counted: a setting, not work)
            fs.finish(DATA_CSV_ID, ctx)
            out["ms"] = (time.perf_counter() - t) * 1000
            out["cpu_s"] = cpu_s() - cpu  # of every thread: the shared machine's load aside
            out["versions"] = db.version - version
            out["size"] = pos
        out["peak_rss_mb"] = peak_rss_mb()
        out["anon_mb"] = status_mb("RssAnon")
    finally:
        fs.close()
        shutil.rmtree(state, ignore_errors=True)
    return out


def writer_loop(table: str) -> None:
    """Insert one row per ``insert`` line on stdin (answering its version); ``cleanup``
    deletes the rows inserted."""
    db = DatabaseOps.open(table, engine="local")
    next_id = 1 << 40
    for line in sys.stdin:
        if line.strip() == "insert":
            version = db.insert(rows_of(next_id, 1))
            next_id += 1
            print(version, flush=True)
        elif line.strip() == "cleanup":
            db.delete_rows_where(f"id >= {1 << 40}")


def run_phase(
    name: str, table: Path, cache: Path, args: argparse.Namespace, code: str | None = None
) -> dict[str, Any]:
    """Run one phase in a fresh process (with the code of checkout ``code``, default this
    one) and return its figures."""
    cmd = [sys.executable, __file__, "--phase", name, "--table", str(table)]
    cmd += ["--cache", str(cache), "--runs", str(args.runs)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    env = dict(os.environ)
    root = code or str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def compare_first(table: Path, cache: Path, args: argparse.Namespace) -> None:
    """Phase 1 with this checkout's code and with ``args.compare``'s, alternating."""
    codes = {"this checkout": None, f"{args.compare}": args.compare}
    figures: dict[str, list[dict[str, Any]]] = {label: [] for label in codes}
    for i in range(args.runs):
        order = list(codes.items())
        for label, code in order if i % 2 else order[::-1]:
            shutil.rmtree(cache, ignore_errors=True)
            figures[label].append(run_phase("first", table, cache, args, code))
    shutil.rmtree(cache, ignore_errors=True)
    size = figures["this checkout"][0]["size"]
    print(f"  first-ever render (GETATTR+READ) of {size / 1e6:.1f} MB, median of {args.runs}:")
    for label, runs in figures.items():
        assert all(r["size"] == size for r in runs)
        ms = statistics.median(r["ms"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        rss = statistics.median(r["peak_rss_mb"] for r in runs)
        walls = ", ".join(f"{r['ms']:.0f}" for r in runs)
        print(
            f"    {label:<24} {ms:7.0f} ms wall ({walls}), {cpu:5.2f} CPU s, "
            f"{size / 1e6 / (ms / 1000):4.0f} MB/s, peak RSS {rss:.0f} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", default="100000,10000000", help="comma-separated table sizes")
    parser.add_argument("--chunk", type=int, default=1_000_000, help="rows per bulk insert")
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--runs", type=int, default=5, help="runs of the repeated workloads")
    parser.add_argument("--workers", type=int, default=None, help="render threads (default: CPUs)")
    parser.add_argument("--baseline", action="store_true", help="also time the whole-table path")
    parser.add_argument(
        "--compare", default=None, help="time the first render against this checkout's code"
    )
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "writer":
        writer_loop(args.table)
        return
    if args.phase in ("append", "overwrite", "spread", "scattered", "dense"):
        print(json.dumps(write_phase(args.phase, args.table, args.cache, args.runs)))
        return
    if args.phase:
        print(json.dumps(phase(args.phase, args.table, args.cache, args.runs, args.workers)))
        return
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-nfs-scale-"))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; work dir {work}")
    for rows in (int(r) for r in args.rows.split(",")):
        table, cache = work / f"t{rows}", work / f"cache{rows}"
        print(f"\n{rows:,} rows")
        build(table, rows, min(args.chunk, rows))
        shutil.rmtree(cache, ignore_errors=True)
        if args.compare:
            compare_first(table, cache, args)
            continue
        first = run_phase("first", table, cache, args)
        restart = run_phase("restart", table, cache, args)
        insert = run_phase("insert", table, cache, args)
        seq = run_phase("seq", table, cache, args)
        append = run_phase("append", table, cache, args)
        overwrite = run_phase("overwrite", table, cache, args)
        spread = run_phase("spread", table, cache, args)
        scattered = run_phase("scattered", table, cache, args)
        dense = run_phase("dense", table, cache, args)
        report: list[tuple[str, str]] = [
            ("data.csv size", f"{first['size'] / 1e6:.1f} MB"),
            (
                "first-ever render (GETATTR+READ)",
                f"{first['ms']:.0f} ms ({first['cpu_s']:.2f} CPU s), "
                f"peak RSS {first['peak_rss_mb']:.0f} MB, anon {first['anon_mb']:.0f} MB",
            ),
            (
                "first read after restart",
                f"{restart['ms']:.1f} ms (+ open {restart['open_ms']:.0f} ms), "
                f"peak RSS {restart['peak_rss_mb']:.0f} MB, anon {restart['anon_mb']:.0f} MB",
            ),
            (
                "read after API insert of 1 row",
                f"{insert['ms']:.1f} ms median of {args.runs} "
                f"({', '.join(f'{x:.1f}' for x in insert['all_ms'])}), "
                f"peak RSS {insert['peak_rss_mb']:.0f} MB, anon {insert['anon_mb']:.0f} MB",
            ),
            (
                "warm sequential read",
                f"{seq['mb_s']:.0f} MB/s, peak RSS {seq['peak_rss_mb']:.0f} MB, "
                f"anon {seq['anon_mb']:.0f} MB",
            ),
        ]
        report += [
            (
                "echo >> one row (TableFs)",
                f"{append['ms']:.1f} ms median of {args.runs} "
                f"({', '.join(f'{x:.1f}' for x in append['all_ms'])}), "
                f"peak RSS {append['peak_rss_mb']:.0f} MB",
            ),
            (
                "one-row change, whole overwrite (TableFs)",
                f"{overwrite['ms']:.0f} ms ({overwrite['close_ms']:.0f} SETATTR to COMMIT; "
                f"{overwrite['cpu_s']:.2f} CPU s), "
                f"{overwrite['versions']} version(s), "
                f"peak RSS {overwrite['peak_rss_mb']:.0f} MB "
                f"(+{overwrite['peak_rss_mb'] - overwrite['rss_before_mb']:.0f} MB over the "
                f"{overwrite['rss_before_mb']:.0f} MB before)",
            ),
            (
                "two rows far apart, whole overwrite",
                f"{spread['ms']:.0f} ms, {spread['versions']} version(s), "
                f"peak RSS {spread['peak_rss_mb']:.0f} MB "
                f"(+{spread['peak_rss_mb'] - spread['rss_before_mb']:.0f} MB over the "
                f"{spread['rss_before_mb']:.0f} MB before)",
            ),
            (
                "1,000 rows evenly apart, whole overwrite",
                f"{scattered['ms']:.0f} ms, {scattered['versions']} version(s), "
                f"peak RSS {scattered['peak_rss_mb']:.0f} MB "
                f"(+{scattered['peak_rss_mb'] - scattered['rss_before_mb']:.0f} MB over the "
                f"{scattered['rss_before_mb']:.0f} MB before)",
            ),
            (
                "a quarter of the rows, whole overwrite",
                f"{dense['ms']:.0f} ms, {dense['versions']} version(s), "
                f"peak RSS {dense['peak_rss_mb']:.0f} MB "
                f"(+{dense['peak_rss_mb'] - dense['rss_before_mb']:.0f} MB over the "
                f"{dense['rss_before_mb']:.0f} MB before)",
            ),
        ]
        if args.baseline:
            b_first = run_phase("baseline-first", table, cache, args)
            b_insert = run_phase("baseline-insert", table, cache, args)
            report += [
                (
                    "baseline: first render (whole table)",
                    f"{b_first['ms']:.0f} ms, peak RSS {b_first['peak_rss_mb']:.0f} MB",
                ),
                (
                    "baseline: read after API insert",
                    f"{b_insert['ms']:.0f} ms median, peak RSS {b_insert['peak_rss_mb']:.0f} MB",
                ),
            ]
        for label, text in report:
            print(f"  {label:<40} {text}", flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f} (a shared machine: figures vary)")


if __name__ == "__main__":
    main()
