"""`posixlake query` from the shell: Spark over a warm Connect server, local[*], local engine.

Run:  python benchmarks/bench_cli_spark.py [--runs N] [--rows N] [--dir /tmp] [--remote URL]

A 200,000-row table; each figure is the median wall time of ``--runs`` invocations of the
``posixlake`` command (a new process each time, as a user types it):

1. ``--engine spark`` on a warm Spark Connect server: the one ``posixlake spark start``
   runs (started here, on a free port, and stopped at the end; or ``--remote URL``).
   The command finds it by itself. Target: <= 2 s.
2. ``--engine spark --spark-master local[*]``: a new JVM per command (the old default).
3. ``--engine local``: delta-rs and DataFusion, no JVM.

The query: ``SELECT grp, count(*), sum(val) FROM data GROUP BY grp ORDER BY grp``.
A benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from posixlake import DatabaseOps

ROOT = Path(__file__).resolve().parents[1]
SQL = "SELECT grp, count(*) AS n, sum(val) AS total FROM data GROUP BY grp ORDER BY grp"


def _env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSIXLAKE_")}
    env["POSIXLAKE_STATE_DIR"] = str(state)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def posixlake(*args: str, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run the command; return its wall time and result (exit status checked)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"posixlake {' '.join(args)} failed: {done.stderr.strip()}")
    return wall, done


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_table(path: Path, rows: int) -> None:
    data = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "grp": pa.array([f"g{i % 50}" for i in range(rows)]),
            "val": pa.array([(i * 7919) % 10_000 / 100 for i in range(rows)], pa.float64()),
        }
    )
    with DatabaseOps.create(path, data.schema, engine="local") as db:
        db.insert(data)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--warmup",
        type=int,
        default=5,
        help="queries before timing on the Connect server (its JVM compiles the query's "
        "code on the first ones; a server that has served commands is warm)",
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--remote", default=None, help="an already running Connect server")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-cli-spark-", dir=args.dir))
    env = _env(work / "state")
    port = None
    try:
        table = str(work / "t")
        make_table(Path(table), args.rows)
        if args.remote is None:
            port = _free_port()
            wall, _ = posixlake("spark", "start", "--port", str(port), env=env)
            print(f"Connect server started in {wall:.1f} s", file=sys.stderr)
        connect = ("--engine", "spark") + (("--spark-remote", args.remote) if args.remote else ())
        modes = {
            "spark, warm Connect server": connect,
            "spark, local[*] (a JVM per command)": (
                "--engine",
                "spark",
                "--spark-master",
                "local[*]",
            ),
            "local engine": ("--engine", "local"),
        }
        expected = None
        figures: dict[str, dict[str, float]] = {}
        for name, flags in modes.items():
            # warm-up: caches; on the Connect server, the JVM's compiled code
            for _ in range(args.warmup if flags == connect else 1):
                posixlake("query", table, SQL, "--json", *flags, env=env)
            times = []
            for _ in range(args.runs):
                wall, done = posixlake("query", table, SQL, "--json", *flags, env=env)
                times.append(wall)
                result = json.loads(done.stdout)
                if expected is None:
                    expected = result
                elif [(r["grp"], r["n"]) for r in result] != [(r["grp"], r["n"]) for r in expected]:
                    raise SystemExit(f"{name}: a different result")
            figures[name] = {"median_s": statistics.median(times), "min_s": min(times)}
        if args.json:
            print(json.dumps({"rows": args.rows, "runs": args.runs, "figures": figures}))
            return
        print(f"posixlake query, {args.rows:,}-row table, median of {args.runs} runs (wall)")
        for name, fig in figures.items():
            print(f"  {name:38s} {fig['median_s']:6.2f} s   (min {fig['min_s']:.2f} s)")
    finally:
        if port is not None:
            posixlake("spark", "stop", "--port", str(port), env=env)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
