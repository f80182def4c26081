"""bench_slo: check the original project's SLOs from ``DatabaseOps.get_metrics()``.

Run:  python benchmarks/bench_slo.py [--runs 3] [--rows 10000] [--dir DIR] [--json]

SLOs (p50 of each operation over its calls, as ``posixlake metrics --json`` reports them):

- point query by primary key  p50 < 10 ms
- single-row insert           p50 < 50 ms
- health check                p50 < 5 ms
- zero committed-data loss: every acknowledged insert is in the table exactly once,
  durably buffered rows survive kill -9 of their process (replayed by the next open),
  and two processes inserting the same keys store each key once.

Each run uses a fresh table (local engine) preloaded with ``--rows`` rows; the figures
are the medians over runs of each run's percentiles, read from ``get_metrics()``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from posixlake import DatabaseOps
from posixlake.errors import DuplicateKeyError

SCHEMA = {"id": "Int64", "name": "String", "value": "Float64"}
TARGETS = {"query": 10.0, "insert": 50.0, "health": 5.0}
POINT_QUERIES = 200
INSERTS = 100
HEALTH_CHECKS = 200


def one_run(root: Path, rows: int) -> dict[str, Any]:
    path = root / "t"
    db = DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id")
    db.insert(
        {
            "id": list(range(rows)),
            "name": [f"n{i}" for i in range(rows)],
            "value": [i * 0.5 for i in range(rows)],
        }
    )
    fresh = DatabaseOps.open(path, engine="local")  # metrics of the measured calls only
    for i in range(POINT_QUERIES):
        fresh.query(f"SELECT * FROM data WHERE id = {(i * 7919) % rows}").fetchone()
    acknowledged = []
    for i in range(INSERTS):
        key = rows + i
        fresh.insert({"id": key, "name": "new", "value": 1.0})
        acknowledged.append(key)
    for _ in range(HEALTH_CHECKS):
        fresh.health_check()
    m = fresh.get_metrics()
    stored = fresh.query(
        f"SELECT count(*), count(DISTINCT id) FROM data WHERE id >= {rows}"
    ).fetchone()
    fresh.close()
    db.close()
    shutil.rmtree(path)
    return {
        "latency": {op: m.latency_ms[op] for op in TARGETS},
        "errors": m.errors,
        "given_up": m.commits_given_up,
        "acknowledged_present": stored == (len(acknowledged), len(acknowledged)),
    }


CRASH_CHILD = """
import os, signal, sys
from posixlake import DatabaseOps
db = DatabaseOps.open(sys.argv[1], engine="local")
for i in range(50):
    db.insert_buffered({"id": i, "name": "durable", "value": 0.0}, durable=True)
os.write(1, b"buffered")
os.kill(os.getpid(), signal.SIGKILL)
"""


def durable_crash(root: Path) -> bool:
    """Kill -9 a process holding 50 durably buffered rows; the next open must commit them."""
    path = root / "crash"
    DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id").close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_CHILD, str(path)], env=env, capture_output=True, timeout=120
    )
    if proc.stdout != b"buffered" or proc.returncode != -signal.SIGKILL:
        return False
    db = DatabaseOps.open(path, engine="local")
    ok = db.query("SELECT count(*), count(DISTINCT id) FROM data").fetchone() == (50, 50)
    again = DatabaseOps.open(path, engine="local")  # replayed once, not twice
    ok = ok and again.query("SELECT count(*) FROM data").scalar() == 50
    return bool(ok)


def _racer(path: str, barrier: Any, out: Any) -> None:
    db = DatabaseOps.open(path, engine="local")
    won = 0
    barrier.wait()
    for key in range(20):
        try:
            db.insert({"id": key, "name": "race", "value": 0.0})
            won += 1
        except DuplicateKeyError:
            pass
    m = db.get_metrics()
    out.put((won, m.commit_conflicts))


def racing_keys(root: Path) -> tuple[bool, int]:
    """Two processes insert keys 0..19 at once; each key must be stored once."""
    path = str(root / "race")
    DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id").close()
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(path, barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    db = DatabaseOps.open(path, engine="local")
    stored = db.query("SELECT count(*), count(DISTINCT id) FROM data").fetchone()
    wins = sum(w for w, _ in results)
    return stored == (20, 20) and wins == 20, sum(c for _, c in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs (default 3)")
    parser.add_argument("--rows", type=int, default=10_000, help="preloaded rows (default 10000)")
    parser.add_argument("--dir", default=None, help="where to put the tables (default: tmp)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-slo-", dir=args.dir))
    try:
        runs = [one_run(root, args.rows) for _ in range(args.runs)]
        crash_ok = durable_crash(root)
        race_ok, race_conflicts = racing_keys(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report: dict[str, Any] = {"runs": args.runs, "rows": args.rows, "slo": {}}
    for op, bound in TARGETS.items():
        p50 = statistics.median(r["latency"][op].p50 for r in runs)
        p90 = statistics.median(r["latency"][op].p90 for r in runs)
        p99 = statistics.median(r["latency"][op].p99 for r in runs)
        report["slo"][f"{op}_p50"] = {
            "p50_ms": round(p50, 3),
            "p90_ms": round(p90, 3),
            "p99_ms": round(p99, 3),
            "bound_ms": bound,
            "ok": p50 < bound,
        }
    loss_ok = all(
        r["acknowledged_present"] and r["errors"] == 0 and not r["given_up"] for r in runs
    )
    report["slo"]["zero_committed_data_loss"] = {
        "ok": loss_ok and crash_ok and race_ok,
        "acknowledged_inserts_present": loss_ok,
        "durable_buffer_survives_kill_9": crash_ok,
        "racing_processes_store_each_key_once": race_ok,
        "race_commit_conflicts": race_conflicts,
    }
    if args.json:
        print(json.dumps(report))
        return
    print(f"bench_slo: local engine, {args.rows:,}-row table, median of {args.runs} runs")
    print(f"{'SLO':<28}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'bound':>8}  ok")
    for name, r in report["slo"].items():
        if "p50_ms" in r:
            print(
                f"{name:<28}{r['p50_ms']:>9.2f}{r['p90_ms']:>9.2f}{r['p99_ms']:>9.2f}"
                f"{r['bound_ms']:>8g}  {'yes' if r['ok'] else 'NO'}"
            )
    loss = report["slo"]["zero_committed_data_loss"]
    print(
        f"{'zero_committed_data_loss':<28}acknowledged inserts present: "
        f"{loss['acknowledged_inserts_present']}, durable buffer survives kill -9: "
        f"{loss['durable_buffer_survives_kill_9']}, racing keys stored once: "
        f"{loss['racing_processes_store_each_key_once']} "
        f"({loss['race_commit_conflicts']} conflicts)  {'yes' if loss['ok'] else 'NO'}"
    )


if __name__ == "__main__":
    main()
