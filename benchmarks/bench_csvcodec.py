"""Benchmark the CSV codec and row diffs against plain pyarrow doing comparable work.

Run: ``python benchmarks/bench_csvcodec.py [--rows 100000] [--repeat 9]``.

Prints the median wall time of each operation on a table of ``--rows`` rows and six
columns (int64, string, float64, bool, date32, timestamp UTC), next to a pyarrow
reference measured in the same run, and their ratio (ours / reference). Absolute times
depend on the machine and its load; the ratio is the number to watch.

References:
- render: ``pyarrow.csv.write_csv`` (quotes every string, so it is not our format).
- render whole floats (a float64 column of whole numbers, such as counts or amounts
  without cents, which the codec writes as integers): Arrow's cast of the column to
  text (its shortest digits, which the codec used for every float before).
- parse: ``pyarrow.csv.read_csv`` of the same bytes with the column types given.
- infer: ``pyarrow.csv.read_csv`` of the same bytes with its own type inference.
- keyed diff: an Acero full outer join of old and new on the key.
- unkeyed diff: an Acero group-by count over all columns of old and of new.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nfs.table.diff import diff_rows
from posixlake.csvcodec import parse_csv, read_csv_infer, render_csv


def make_table(rows: int, seed: int = 7) -> pa.Table:
    """Build the benchmark table: six columns, some strings needing quotes."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma, delta", 'say "hi"', "epsilon", " padded", "zeta"]
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": pa.array([f"{rng.choice(words)} {i}" for i in range(rows)], pa.string()),
            "price": pa.array([rng.random() * 1000 for _ in range(rows)], pa.float64()),
            "active": pa.array([rng.random() < 0.5 for _ in range(rows)], pa.bool_()),
            "day": pa.array([18_000 + rng.randrange(3_000) for _ in range(rows)], pa.int32()).cast(
                pa.date32()
            ),
            "at": pa.array(
                [1_700_000_000_000_000 + i * 1_234_567 for i in range(rows)], pa.int64()
            ).cast(pa.timestamp("us", tz="UTC")),
        }
    )


def median_ms(function: Callable[[], Any], repeat: int) -> float:
    """Return the median wall time of ``function`` in milliseconds (after one warm-up)."""
    function()
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> None:
    """Run the benchmarks and print the table of medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)

    table = make_table(args.rows)
    schema = table.schema
    data = render_csv(table)
    changed = table.set_column(
        1, "name", pc.if_else(pc.equal(table["id"], args.rows // 2), "changed", table["name"])
    )
    typed = pacsv.ConvertOptions(column_types={f.name: f.type for f in schema})

    def arrow_write() -> None:
        pacsv.write_csv(table, io.BytesIO())

    def arrow_join() -> None:
        table.join(changed, "id", join_type="full outer", right_suffix="_new")

    def arrow_group() -> None:
        for side in (table, changed):
            side.group_by(side.column_names).aggregate([([], "count_all")])

    whole = pa.table({"amount": pc.round(pc.multiply(table["price"], 100.0))})

    cases: list[tuple[str, Callable[[], Any], Callable[[], Any], str]] = [
        ("render_csv", lambda: render_csv(table), arrow_write, "csv.write_csv"),
        (
            "render whole floats",
            lambda: render_csv(whole),
            lambda: pc.cast(whole["amount"], pa.string()),
            "cast float64 to text",
        ),
        (
            "parse_csv",
            lambda: parse_csv(data, schema),
            lambda: pacsv.read_csv(io.BytesIO(data), convert_options=typed),
            "csv.read_csv typed",
        ),
        (
            "read_csv_infer",
            lambda: read_csv_infer(data),
            lambda: pacsv.read_csv(io.BytesIO(data)),
            "csv.read_csv inferred",
        ),
        (
            "diff_rows keyed",
            lambda: diff_rows(table, changed, key=["id"]),
            arrow_join,
            "Table.join full outer",
        ),
        (
            "diff_rows unkeyed",
            lambda: diff_rows(table, changed, key=None),
            arrow_group,
            "group_by all columns x2",
        ),
    ]

    print(
        f"{args.rows:,} rows x {table.num_columns} columns, CSV {len(data) / 1e6:.1f} MB, "
        f"pyarrow {pa.__version__}, {os.cpu_count()} CPUs, median of {args.repeat}"
    )
    header = f"{'operation':<20} {'ours ms':>9} {'pyarrow ms':>11} {'ratio':>7}  reference"
    print(header)
    print("-" * len(header))
    for name, ours, reference, label in cases:
        ours_ms = median_ms(ours, args.repeat)
        reference_ms = median_ms(reference, args.repeat)
        ratio = ours_ms / reference_ms
        print(f"{name:<20} {ours_ms:9.1f} {reference_ms:11.1f} {ratio:7.2f}  {label}")


if __name__ == "__main__":
    main()
