"""Where the time of one `posixlake query` on the Spark engine goes, phase by phase.

Run:  python benchmarks/bench_cli_phases.py TABLE [--remote URL] [--runs N] [--rpcs]

Runs the steps of ``posixlake query TABLE SQL --json --engine spark`` in a new process per
run (as a user types the command) and prints, per phase, the median wall and CPU time of
that process: importing the command (click, posixlake, pyarrow), opening the table (the
Delta log), the Spark Connect session (PySpark's client, its first calls), the query
(snapshot frame, plan, execution on the server, Arrow batches back) and the rendering.
Without ``--remote`` the command finds the server ``posixlake spark start`` runs, as the
command line does (it leases a named session of it). ``--rpcs`` also lists the Spark
Connect calls of the last run and their time (it imports PySpark's client first, so that
import then counts in the first phase). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SQL = "SELECT grp, count(*) AS n, sum(val) AS total FROM data GROUP BY grp ORDER BY grp"

# The child: one command's steps, timed. Kept in the order cli/_data.py's query runs them.
CHILD = r"""
import io, json, os, sys, time
rpcs = []
if os.environ.get("BENCH_RPCS"):
    from pyspark.sql.connect.proto import base_pb2_grpc
    _init = base_pb2_grpc.SparkConnectServiceStub.__init__
    def _wrapped(self, channel):
        _init(self, channel)
        for name in ("ExecutePlan", "AnalyzePlan", "Config"):
            call = getattr(self, name)
            def timed(req, *a, _call=call, _name=name, **k):
                t = time.perf_counter()
                out = _call(req, *a, **k)
                if _name == "ExecutePlan":
                    out = iter(list(out))
                    kind = req.plan.WhichOneof("op_type")
                    sub = getattr(req.plan, kind)
                    what = sub.WhichOneof("rel_type" if kind == "root" else "command_type")
                elif _name == "AnalyzePlan":
                    what = req.WhichOneof("analyze")
                else:
                    what = req.operation.WhichOneof("op_type")
                rpcs.append((f"{_name} {what}", time.perf_counter() - t))
                return out
            setattr(self, name, timed)
    base_pb2_grpc.SparkConnectServiceStub.__init__ = _wrapped
marks = [("start", time.perf_counter(), time.process_time())]
def mark(name):
    marks.append((name, time.perf_counter(), time.process_time()))
import click
import cli.main
from cli import _data
from cli._common import Options, open_table
from cli._output import write_rows
mark("import the command (posixlake, pyarrow)")
table, sql, remote = sys.argv[1], sys.argv[2], sys.argv[3] or None
with click.Context(cli.main.cli) as ctx:
    opts = ctx.ensure_object(Options)
    opts.engine, opts.spark_remote = "spark", remote
    db = open_table(table, computes=True)
    mark("open the table (Delta log)")
    engine = db.engine  # the session the query runs in (older engines: .spark)
    getattr(engine, "_session", lambda: engine.spark)()
    mark("Spark Connect session")
    result = db.query(sql)
    mark("query (plan, execute, fetch Arrow)")
    write_rows(result.arrow(), "json", out=io.BytesIO(), terminal=False)
    mark("render")
    db.close()
phases = [(n, t - marks[i][1], c - marks[i][2]) for i, (n, t, c) in enumerate(marks[1:])]
print(json.dumps({"phases": phases, "rpcs": rpcs}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("table")
    parser.add_argument("--remote", default="", help="a Connect URL (default: the running one)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sql", default=SQL)
    parser.add_argument("--rpcs", action="store_true", help="list the Connect calls too")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if args.rpcs:
        env["BENCH_RPCS"] = "1"
    runs = []
    for _ in range(args.runs + 1):  # the first run warms caches and the server
        done = subprocess.run(
            [sys.executable, "-c", CHILD, args.table, args.sql, args.remote],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    runs = runs[1:]
    title = f"phase (median of {len(runs)} runs)"
    print(f"{title:42s} {'wall s':>7s} {'cpu s':>7s}")
    names = [p[0] for p in runs[0]["phases"]]
    for i, name in enumerate(names):
        wall = statistics.median(r["phases"][i][1] for r in runs)
        cpu = statistics.median(r["phases"][i][2] for r in runs)
        print(f"{name:42s} {wall:7.3f} {cpu:7.3f}")
    total = statistics.median(sum(p[1] for p in r["phases"]) for r in runs)
    print(f"{'total (in the process)':42s} {total:7.3f}")
    for name, seconds in runs[-1]["rpcs"]:
        print(f"  rpc {name:36s} {seconds * 1000:7.1f} ms")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
