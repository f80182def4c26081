"""Warm sequential reads through libnfs: our server (a child process) next to NFS-Ganesha.

Run:  python benchmarks/bench_nfs_read.py [--rows N] [--runs N] [--dir DIR] [--server PATH]
                                          [--fresh-cache] [--against PATH]

The table (id Int64 primary key, name, score Float64, city; ``bench_nfs_scale.build``,
1M rows per data file) is served by ``NfsServer`` in a child process; Ganesha serves
the same bytes as a plain file (``bench_nfs.ganesha``: ``nfs-ganesha`` and
``nfs-ganesha-vfs`` must be installed). Each run is one ``nfs-cat URL > /dev/null``
(libnfs reads 1 MiB at a time, one READ in flight), ours and Ganesha's in turn; the
report gives the medians in MB/s and their ratio. The same for the 100,000-row table of
``bench_nfs.py`` workload 1 (ms per ``nfs-cat``). The server's peak RSS (VmHWM) and
RSS are read from /proc after the first (warm-cache) read and after the runs.

The first read is timed too (ms and MB/s): with ``--fresh-cache`` the segment cache is
emptied first, so it is a first-ever rendering of the table (decode and render every data
file) followed by the transfer; without, it reuses the segments earlier runs left in
``DIR/segments``.

``--server PATH`` serves from another checkout's ``nfs`` and ``posixlake`` (its
directory goes first on the child's PYTHONPATH). ``--against PATH`` serves the same tables
from a second checkout as well, read in turn with ours and Ganesha's (every order of the
three in rotation), so a before/after pair is measured in one run, under the same load.
The machine may be shared: the load average is printed.

These are measurements, not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_nfs
import bench_nfs_scale

from nfs.protocol.serving import nfs_url

SERVER = textwrap.dedent(
    """
    import os, sys
    from posixlake import DatabaseOps
    from nfs.protocol.server import NfsServer
    from nfs.table.tablefs import TableFs

    server = NfsServer(TableFs(DatabaseOps.open(sys.argv[1], engine="local"), idle_timer=False))
    print(server.port, os.getpid(), flush=True)
    sys.stdin.read()
    server.shutdown()
    """
)


class Served:
    """A table served by NfsServer in a child process."""

    def __init__(self, table: Path, work: Path, name: str, code_dir: str | None) -> None:
        env = dict(os.environ)
        env["POSIXLAKE_STATE_DIR"] = str(work / f"state-{name}")
        env.setdefault("POSIXLAKE_SEGMENT_CACHE", str(work / "segments"))
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (code_dir, root) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(table)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=work,  # not the checkout: ``-c`` puts the working directory first on sys.path
        )
        assert self.proc.stdout is not None
        port, pid = self.proc.stdout.readline().split()
        self.pid = int(pid)
        self.url = nfs_url("127.0.0.1", int(port), "/data/data.csv")

    def memory(self) -> str:
        """VmHWM and VmRSS of the server process."""
        lines = Path(f"/proc/{self.pid}/status").read_text().splitlines()
        got = {k: v.split()[0] for k, _, v in (ln.partition(":") for ln in lines) if v.split()}
        return f"VmHWM {int(got['VmHWM']) // 1024} MB, VmRSS {int(got['VmRSS']) // 1024} MB"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)


def cat_seconds(url: str) -> float:
    t0 = time.perf_counter()
    bench_nfs.nfs_cat_null(url)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the big table")
    parser.add_argument("--runs", type=int, default=5, help="nfs-cat runs per server")
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--server", default=None, help="serve from this checkout")
    parser.add_argument(
        "--fresh-cache", action="store_true", help="empty the segment cache: a first-ever render"
    )
    parser.add_argument("--against", default=None, help="also serve from this checkout")
    args = parser.parse_args()
    if shutil.which("nfs-cat") is None:
        sys.exit("bench_nfs_read: needs libnfs-utils (nfs-cat)")
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-nfs-read-"))
    work.mkdir(parents=True, exist_ok=True)
    big = work / f"t{args.rows}"
    bench_nfs_scale.build(big, args.rows, 1_000_000)
    small = work / "t100k"
    if not small.exists():
        bench_nfs.make_table(small, bench_nfs.SMALL)
    print(f"load average: {os.getloadavg()[0]:.2f} (2 cores: others' work slows both servers)")
    ganesha_dir = work / f"ganesha-{os.getpid()}"
    if args.fresh_cache:
        shutil.rmtree(work / "segments", ignore_errors=True)
    ours, mine = Served(big, work, "big", args.server), Served(small, work, "small", args.server)
    other = other_small = None
    if args.against:
        other = Served(big, work, "big-against", args.against)
        other_small = Served(small, work, "small-against", args.against)
    try:
        first = cat_seconds(ours.url)
        data = subprocess.run(["nfs-cat", ours.url], capture_output=True, check=True).stdout
        small_data = subprocess.run(["nfs-cat", mine.url], capture_output=True, check=True).stdout
        mb = len(data) / 1e6
        what = "a first-ever render" if args.fresh_cache else "segments from the cache"
        print(
            f"first read of {mb:.0f} MB ({what}): {first * 1000:.0f} ms, {mb / first:.0f} MB/s; "
            f"{ours.memory()}"
        )
        with bench_nfs.ganesha(ganesha_dir, install=False) as g:
            if g is None:
                sys.exit("bench_nfs_read: Ganesha did not start")
            (g.export / "big.csv").write_bytes(data)
            (g.export / "small.csv").write_bytes(small_data)
            del data, small_data
            for url in (g.url("big.csv"), g.url("small.csv")):
                bench_nfs.nfs_cat_null(url)
            big_ours: list[float] = []
            big_theirs: list[float] = []
            big_other: list[float] = []
            order = [(ours.url, big_ours), (g.url("big.csv"), big_theirs)]
            if other is not None:
                bench_nfs.nfs_cat_null(other.url)
                order.append((other.url, big_other))
            for i in range(args.runs):
                for url, out in _rotation(order, i):
                    out.append(mb / cat_seconds(url))
            small_ours: list[float] = []
            small_theirs: list[float] = []
            small_other: list[float] = []
            order = [(mine.url, small_ours), (g.url("small.csv"), small_theirs)]
            if other_small is not None:
                bench_nfs.nfs_cat_null(other_small.url)
                order.append((other_small.url, small_other))
            for i in range(max(args.runs, 9) * (3 if other is not None else 1)):
                for url, out in _rotation(order, i):
                    out.append(cat_seconds(url) * 1000)
        mo, mg = statistics.median(big_ours), statistics.median(big_theirs)
        print(
            f"warm read of {mb:.0f} MB: posixlake {mo:.0f} MB/s, Ganesha {mg:.0f} MB/s, "
            f"ratio {mo / mg:.2f}"
        )
        print(f"  runs: posixlake {[round(x) for x in big_ours]}")
        print(f"        Ganesha   {[round(x) for x in big_theirs]}")
        print(f"  server after the runs: {ours.memory()}")
        if big_other:
            mb_other = statistics.median(big_other)
            print(
                f"  --against: {mb_other:.0f} MB/s, ratio {mb_other / mg:.2f} "
                f"(this checkout / it: {mo / mb_other:.2f})"
            )
        so, sg = statistics.median(small_ours), statistics.median(small_theirs)
        print(
            f"warm read, 100k rows: posixlake {so:.2f} ms, Ganesha {sg:.2f} ms, "
            f"ratio {so / sg:.2f} (median of {len(small_ours)})"
        )
        if small_other:
            st = statistics.median(small_other)
            print(f"  --against: {st:.2f} ms, ratio {st / sg:.2f}")
        print(f"load average: {os.getloadavg()[0]:.2f}")
    finally:
        for served in (ours, mine, other, other_small):
            if served is not None:
                served.close()
        shutil.rmtree(ganesha_dir, ignore_errors=True)  # its copy of the table's bytes


def _rotation(order: list[tuple[str, list[float]]], i: int) -> list[tuple[str, list[float]]]:
    """The ``i``-th order of the servers (every permutation in turn: none is always first)."""
    orders = list(itertools.permutations(order))
    return list(orders[i % len(orders)])


if __name__ == "__main__":
    main()
