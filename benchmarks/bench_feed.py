"""bench_feed: commit -> subscriber latency of ``db.subscribe()``, and the cost of a
``/metrics`` scrape of ``posixlake serve --http`` (idle and under NFS read load).

Run:  python benchmarks/bench_feed.py [--commits 50] [--scrapes 200] [--rows 100000]
                                      [--dir DIR] [--json]

1. Latency (target: median <= 100 ms on a local table). A subscriber iterates a feed in
   its own thread, watching ``_delta_log/`` with inotify; a writer in a child process
   (another process, as most writers are) commits ``--commits`` single-row inserts, each
   after the subscriber got the previous one, and prints when each commit call returned.
   The latency of a commit is the time from its ``insert`` returning in the writer to its
   batch arriving at the subscriber (wall clock, same machine). Measured for an append
   on a table with the change data feed (rows from the CDF reader), without it (rows
   from the added file), and for single-row UPDATEs without it (rows of the rewritten
   file against the removed one: the file-diff path).
2. Scrape cost: ``--scrapes`` GETs of /metrics of a ControlPlane over a ``--rows``-row
   table and its NfsServer, first idle, then while a libnfs client (``nfs-cat``, if
   installed) reads data.csv in a loop. p50 / p99 ms and the body size.

These are measurements, not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posixlake import DatabaseOps  # noqa: E402
from posixlake.feed import ChangeBatch  # noqa: E402

WRITER = r"""
import sys, time
from posixlake import DatabaseOps
path, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
db = DatabaseOps.open(path, engine="local")
for i in range(n):
    sys.stdin.readline()  # the subscriber got the previous commit
    if mode == "update":
        db.update("id = 0", {"name": f"u{i}"})
    else:
        db.insert({"id": 1000 + i, "name": "x"})
    print(db.version, time.time(), flush=True)
"""


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p * len(ordered)) - 1))]


def latency(root: Path, commits: int, *, cdf: bool, mode: str) -> dict[str, Any]:
    path = root / f"lat-{mode}-{'cdf' if cdf else 'files'}"
    db = DatabaseOps.create(
        path,
        {"id": "Int64", "name": "String"},
        primary_key="id",
        engine="local",
        change_data_feed=cdf,
    )
    db.insert([{"id": i, "name": f"n{i}"} for i in range(1000)])  # one 1000-row file
    got: queue.Queue[tuple[ChangeBatch, float]] = queue.Queue()
    feed = db.subscribe()

    def follow() -> None:
        for batch in feed:
            got.put((batch, time.time()))

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(commits), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as writer:
        assert writer.stdin is not None and writer.stdout is not None
        lat = []
        for _ in range(commits):
            writer.stdin.write("\n")
            writer.stdin.flush()
            version, committed = writer.stdout.readline().split()
            batch, arrived = got.get(timeout=60)
            assert batch.version == int(version) and batch.rows.num_rows >= 1, batch
            lat.append((arrived - float(committed)) * 1000)
        writer.stdin.close()
        writer.wait(60)
    feed.close()
    thread.join(10)
    return {
        "mode": mode,
        "cdf": cdf,
        "commits": commits,
        "p50_ms": statistics.median(lat),
        "p90_ms": pct(lat, 0.9),
        "max_ms": max(lat),
    }


def scrapes(root: Path, rows: int, n: int) -> list[dict[str, Any]]:
    from cli._control import serving_plane
    from nfs.protocol.server import NfsServer
    from nfs.protocol.serving import nfs_url
    from nfs.table.tablefs import TableFs

    path = root / "scrape"
    db = DatabaseOps.create(path, {"id": "Int64", "name": "String"}, engine="local")
    db.insert({"id": list(range(rows)), "name": [f"name {i}" for i in range(rows)]})
    out = []
    share = TableFs(db, state_dir=root / "scrape-state")
    # as `posixlake serve --http` runs it: NFS calls by procedure and the share's counters
    with NfsServer(share, 0) as server:
        plane = serving_plane(db, server, ("127.0.0.1", 0), None, share=share)
        try:
            url = plane.url + "/metrics"
            stop = threading.Event()
            reads = [0]

            def load() -> None:
                while not stop.is_set():
                    subprocess.run(
                        ["nfs-cat", nfs_url("127.0.0.1", server.port, "/data/data.csv")],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        check=False,
                    )
                    reads[0] += 1

            if shutil.which("nfs-cat"):  # render data.csv once: the load is warm reads
                subprocess.run(
                    ["nfs-cat", nfs_url("127.0.0.1", server.port, "/data/data.csv")],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                )
            for label in ("idle", "nfs-load"):
                loader = None
                if label == "nfs-load":
                    if not shutil.which("nfs-cat"):
                        continue
                    loader = threading.Thread(target=load, daemon=True)
                    loader.start()
                times, size = [], 0
                for _ in range(n):
                    started = time.perf_counter()
                    with urllib.request.urlopen(url, timeout=30) as response:
                        size = len(response.read())
                    times.append((time.perf_counter() - started) * 1000)
                if loader is not None:
                    stop.set()
                    loader.join(120)
                out.append(
                    {
                        "while": label,
                        "scrapes": n,
                        "p50_ms": statistics.median(times),
                        "p99_ms": pct(times, 0.99),
                        "bytes": size,
                        "nfs_reads_meanwhile": reads[0] if label == "nfs-load" else 0,
                    }
                )
        finally:
            plane.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-feed-", dir=args.dir))
    try:
        results: dict[str, Any] = {
            "loadavg": os.getloadavg(),
            "latency": [
                latency(root, args.commits, cdf=True, mode="insert"),
                latency(root, args.commits, cdf=False, mode="insert"),
                latency(root, args.commits, cdf=False, mode="update"),
            ],
            "metrics_scrape": scrapes(root, args.rows, args.scrapes),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(results))
        return
    print(f"load average {results['loadavg']}")
    print("commit -> subscriber (local table, inotify; writer in another process)")
    for r in results["latency"]:
        source = "CDF" if r["cdf"] else "file diff"
        print(
            f"  {r['mode']:<6} {source:<9} {r['commits']} commits: p50 {r['p50_ms']:.1f} ms, "
            f"p90 {r['p90_ms']:.1f} ms, max {r['max_ms']:.1f} ms  (target p50 <= 100 ms)"
        )
    print(f"/metrics scrape ({args.rows:,}-row table, NFS server running)")
    for r in results["metrics_scrape"]:
        print(
            f"  {r['while']:<8} {r['scrapes']} scrapes: p50 {r['p50_ms']:.2f} ms, "
            f"p99 {r['p99_ms']:.2f} ms, {r['bytes']:,} bytes"
            + (f", {r['nfs_reads_meanwhile']} full reads meanwhile" if r["while"] != "idle" else "")
        )


if __name__ == "__main__":
    main()
