"""The Spark engine against plain Spark (and the local engine) doing the same work.

Run:  python benchmarks/bench_spark.py [--runs N] [--rows N] [--dir /tmp] [--master local[2]]

Three workloads, in one SparkSession, each figure a median over ``--runs`` warm runs:

1. A group-by over a 1,000,000-row table: ``SELECT grp, count(*), sum(val), avg(val)
   FROM data GROUP BY grp``. posixlake: ``DatabaseOps.query`` on the Spark engine (delta-rs
   resolves the snapshot; Spark reads the Parquet files). Plain Spark: the same SQL over
   ``spark.read.parquet(<the same files>)`` registered as a view. Target: <= 1.2x.
2. Delete, and update, of one row in a 100,000-row table (warm: after two of each), on
   the Spark engine (a small DML in delta-rs' subset runs in place: see
   ``posixlake.engines.spark._dml.in_place``) and on plain delta-rs (``DeltaTable.delete``
   / ``update`` on a table of the same rows, loaded once), alternating round by round so
   that both see the same machine load and have made as many commits; then the Spark
   engine forced to run its copy-on-write Spark jobs (as every DML did before). Also a
   one-row delete after 300 more single-row commits through each handle: a loaded
   delta-rs table slows down with every commit it sees, and a posixlake handle loads its
   table afresh every ``RELOAD_AFTER_COMMITS`` commits.
   Target: <= 200 ms; when plain delta-rs alone takes more on the machine, the ratio to
   it is the figure to read.
3. Import of a 1,000,000-row CSV (``create_from_csv``): on Spark and on the local engine.

These are benchmarks, not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from posixlake import DatabaseOps
from posixlake.delta._table import RELOAD_AFTER_COMMITS
from posixlake.engines import LocalEngine
from posixlake.engines.spark import SparkEngine, build_session

GROUP_SQL = "SELECT grp, count(*) AS n, sum(val) AS total, avg(val) AS mean FROM {t} GROUP BY grp"


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def medians(fn: Callable[[], Any], runs: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    return [timed(fn) for _ in range(runs)]


def alternating(
    fns: dict[str, Callable[[], Any]], runs: int, warmup: int = 2
) -> dict[str, list[float]]:
    """Time each of ``fns`` ``runs`` times, one of each per round (after ``warmup``
    rounds), so that all see the same machine load."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            times[name].append(timed(fn))
    return times


def line(name: str, xs: list[float], note: str = "") -> float:
    m = statistics.median(xs)
    print(
        f"  {name:<42} median {m * 1000:9.1f} ms   (min {min(xs) * 1000:.1f}, max {max(xs) * 1000:.1f}) {note}"
    )
    return m


def group_by(spark: Any, base: Path, rows: int, runs: int) -> None:
    print(f"\n1. group-by over {rows:,} rows")
    n = rows
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "grp": pa.array([i % 100 for i in range(n)], pa.int32()),
            "val": pa.array([i * 0.5 for i in range(n)], pa.float64()),
            "name": pa.array([f"name-{i % 1000}" for i in range(n)], pa.string()),
        }
    )
    db = DatabaseOps.create(
        base / "group",
        {"id": "Int64", "grp": "Int32", "val": "Float64", "name": "String"},
        engine=SparkEngine(spark=spark),
    )
    db.insert(table)
    files = [str(base / "group" / p) for p in _files(db)]
    plain = spark.read.parquet(*files)

    def ours() -> None:
        db.query(GROUP_SQL.format(t="data")).arrow()

    def vanilla() -> None:
        plain.createOrReplaceTempView("plain_parquet")
        spark.sql(GROUP_SQL.format(t="plain_parquet")).toArrow()

    times = alternating({"ours": ours, "plain": vanilla}, runs)
    mo = line("posixlake (Spark engine) query", times["ours"])
    mp = line("plain Spark over the same Parquet files", times["plain"])
    print(f"  ratio posixlake / plain Spark: {mo / mp:.2f}x   (target <= 1.20x)")


def _files(db: DatabaseOps) -> list[str]:
    import urllib.parse

    actions = db._log.add_actions()
    return [urllib.parse.unquote(p) for p in actions.column("path").to_pylist()]


def cow_delete(spark: Any, base: Path, runs: int) -> None:
    from deltalake import DeltaTable, write_deltalake

    from posixlake.engines.spark import _dml

    print("\n2. delete / update of one row in a 100,000-row table")
    n = 100_000
    data = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "name": [f"n{i}" for i in range(n)],
            "val": [i / 7 for i in range(n)],
        }
    )
    engine = SparkEngine(spark=spark)
    db = DatabaseOps.create(
        base / "cow",
        {"id": "Int64", "name": "String", "val": "Float64"},
        engine=engine,
        primary_key="id",
    )
    db.insert(data)
    write_deltalake(base / "plain", data)
    plain = DeltaTable(base / "plain")
    ids = iter(range(0, n, 97))

    def delete() -> None:
        db.delete_rows_where(f"id = {next(ids)}")

    def update() -> None:
        db.update(f"id = {next(ids)}", {"name": "changed"})

    times = alternating(
        {
            "delete": delete,
            "delete-plain": lambda: plain.delete(f"id = {next(ids)}"),
            "update": update,
            "update-plain": lambda: plain.update(
                updates={"name": "'changed'"}, predicate=f"id = {next(ids)}"
            ),
        },
        runs,
    )
    for what in ("delete", "update"):
        ours = line(f"{what} 1 row, Spark engine", times[what])
        theirs = line(f"{what} 1 row, plain delta-rs", times[f"{what}-plain"])
        verdict = "met" if ours <= 0.2 else "NOT met"
        if theirs > 0.2:
            verdict += " (plain delta-rs alone takes more here: read the ratio)"
        print(
            f"  ratio Spark engine / delta-rs: {ours / theirs:.2f}x "
            f"({(ours - theirs) * 1000:+.1f} ms); target <= 200 ms: {verdict}"
        )
    more = 300  # a long-lived handle: delta-rs' loaded table slows with each commit it sees
    for k in range(more):
        db.insert({"id": n + k, "name": "x", "val": 0.0})
        write_deltalake(
            plain,
            pa.table({"id": pa.array([n + k], pa.int64()), "name": ["x"], "val": [0.0]}),
            mode="append",
        )
    times = alternating(
        {"delete": delete, "delete-plain": lambda: plain.delete(f"id = {next(ids)}")}, runs
    )
    ours = line(f"delete 1 row, +{more} commits, Spark engine", times["delete"])
    theirs = line(f"delete 1 row, +{more} commits, plain delta-rs", times["delete-plain"])
    print(
        f"  ratio Spark engine / delta-rs: {ours / theirs:.2f}x "
        "(a posixlake handle loads its table afresh every "
        f"{RELOAD_AFTER_COMMITS} commits; the plain DeltaTable is the one loaded at the start)"
    )
    forced = _dml.DELTA_RS_MAX_ROWS
    _dml.DELTA_RS_MAX_ROWS = -1  # every DML a Spark job, as before
    try:
        for what, fn in (("delete", delete), ("update", update)):
            line(f"{what} 1 row, Spark engine, Spark job", medians(fn, max(3, runs // 2)))
    finally:
        _dml.DELTA_RS_MAX_ROWS = forced
    local = DatabaseOps.open(base / "cow", engine=LocalEngine())
    line(
        "delete 1 row, local engine",
        medians(lambda: local.delete_rows_where(f"id = {next(ids)}"), runs),
    )


def csv_import(spark: Any, base: Path, rows: int, runs: int) -> None:
    print(f"\n3. create_from_csv of a {rows:,}-row CSV")
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "qty": pa.array([i % 1000 for i in range(rows)], pa.int64()),
            "price": pa.array([i / 4 for i in range(rows)], pa.float64()),
            "ok": pa.array([i % 2 == 0 for i in range(rows)]),
            "day": pa.array([(t0 + timedelta(days=i % 365)).date() for i in range(rows)]),
            "at": pa.array(
                [t0 + timedelta(seconds=i) for i in range(rows)], pa.timestamp("us", tz="UTC")
            ),
            "name": pa.array([f"item {i % 5000}" for i in range(rows)]),
        }
    )
    src = base / "import.csv"
    pacsv.write_csv(table, src)
    print(f"  CSV size {src.stat().st_size / 1e6:.1f} MB")
    counter = iter(range(10_000))

    def on(engine: Any) -> Callable[[], None]:
        def run() -> None:
            target = base / f"import-{next(counter)}"
            DatabaseOps.create_from_csv(target, src, engine=engine)
            shutil.rmtree(target)

        return run

    spark_engine = SparkEngine(spark=spark)
    a = medians(on(spark_engine), runs, warmup=1)
    b = medians(on(LocalEngine()), runs, warmup=1)
    ms = line("Spark engine", a)
    ml = line("local engine", b)
    print(f"  ratio Spark / local: {ms / ml:.2f}x   ({rows / ms:,.0f} rows/s on Spark)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--only", choices=["group", "delete", "import"], default=None)
    args = parser.parse_args()
    warnings.simplefilter("ignore", FutureWarning)
    base = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=args.dir))
    started = time.perf_counter()
    spark = build_session(master=args.master)
    print(
        f"Spark session ({args.master}) started in {time.perf_counter() - started:.1f} s; data in {base}"
    )
    try:
        if args.only in (None, "group"):
            group_by(spark, base, args.rows, args.runs)
        if args.only in (None, "delete"):
            cow_delete(spark, base, args.runs)
        if args.only in (None, "import"):
            csv_import(spark, base, args.rows, max(3, args.runs // 2))
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
