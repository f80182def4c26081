"""posixlake on S3 (moto_server) and Azure (Azurite) vs local disk, and vs plain delta-rs.

Run:  python benchmarks/bench_storage.py [--runs N] [--rows 100000] [--dir /tmp]

Starts moto_server and Azurite on free local ports (and stops them), then on each of
local disk, S3 and Azure times, for posixlake (local engine) and for plain delta-rs
doing the same work in the same run, alternating:

1. a single-row insert into a table (median over ``--runs`` x 5 inserts);
   delta-rs: ``write_deltalake(dt, row, mode="append")`` on a loaded DeltaTable;
2. a merge of 1,000 rows (500 updates, 500 inserts) into ``--rows`` rows, keyed on id;
   delta-rs: ``DeltaTable.merge`` with the same source and clauses;
3. ``SELECT COUNT(*) FROM data`` over ``--rows`` rows (warm); delta-rs: ``QueryBuilder``
   on a loaded table, and (second line) after ``update_incremental()``, which is what
   posixlake does before every read so that it sees other writers' commits: on an
   object store that is one LIST request per query.

Figures are medians in milliseconds. "vs delta-rs" is posixlake / delta-rs on the same
store; "vs local" is the store's posixlake median / local disk's. The local servers are
single-process emulators on the same machine: their figures measure our request
pattern (number and kind of requests), not a real cloud's latency. Nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from posixlake import AzureConfig, DatabaseOps, Field, S3Config, Schema  # noqa: E402
from posixlake.storage import storage_options_for  # noqa: E402
from tests.storage.servers import LocalServer, start_azurite, start_moto  # noqa: E402

SCHEMA = Schema(
    [Field("id", "Int64", False), Field("name", "String"), Field("value", "Float64")],
    primary_key="id",
)
ARROW = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("name", pa.string()),
        pa.field("value", pa.float64()),
    ]
)


@dataclass
class Store:
    """Where the tables of one column of the report live."""

    name: str
    base: str
    storage: Any = None
    figures: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)

    def uri(self, what: str) -> str:
        return f"{self.base}/{what}-{uuid.uuid4().hex[:8]}"

    @property
    def options(self) -> dict[str, str] | None:
        return storage_options_for(self.base, self.storage)


def ms(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def rows(start: int, n: int, name: str = "n") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "name": pa.array([f"{name}{i}" for i in range(start, start + n)]),
            "value": pa.array([float(i) for i in range(start, start + n)]),
        },
        schema=ARROW,
    )


def bench_insert(store: Store, runs: int) -> None:
    db = DatabaseOps.create(store.uri("ins"), SCHEMA, storage=store.storage, engine="local")
    dt = DeltaTable.create(store.uri("ins-plain"), ARROW, storage_options=store.options)
    ours: list[float] = []
    plain: list[float] = []
    for i in range(runs * 5):
        row = {"id": i, "name": f"r{i}", "value": float(i)}
        ours.append(ms(lambda row=row: db.insert(row)))  # type: ignore[misc]
        table = rows(i, 1)
        plain.append(ms(lambda table=table: write_deltalake(dt, table, mode="append")))  # type: ignore[misc]
    store.figures["single-row insert"] = (ours, plain)


def bench_merge(store: Store, runs: int, big: int) -> None:
    base = rows(0, big)
    db = DatabaseOps.create(store.uri("merge"), SCHEMA, storage=store.storage, engine="local")
    db.insert(base)
    dt = DeltaTable.create(store.uri("merge-plain"), ARROW, storage_options=store.options)
    write_deltalake(dt, base, mode="append")
    ours: list[float] = []
    plain: list[float] = []
    for r in range(runs):
        updates = rows(r * 500, 500, name="u")  # existing keys
        inserts = rows(big + r * 500, 500)  # new keys
        source = pa.concat_tables([updates, inserts])
        ops = source.append_column("_op", pa.array(["UPDATE"] * 500 + ["INSERT"] * 500))
        ours.append(ms(lambda ops=ops: db.merge(ops)))  # type: ignore[misc]

        def plain_merge(source: pa.Table = source) -> None:
            (
                dt.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )

        plain.append(ms(plain_merge))
    store.figures["merge 1,000 into 100,000"] = (ours, plain)


def bench_count(store: Store, runs: int, big: int) -> None:
    db = DatabaseOps.create(store.uri("count"), SCHEMA, storage=store.storage, engine="local")
    db.insert(rows(0, big))
    dt = DeltaTable.create(store.uri("count-plain"), ARROW, storage_options=store.options)
    write_deltalake(dt, rows(0, big), mode="append")

    def ours_count() -> None:
        assert db.query("SELECT COUNT(*) FROM data").scalar() == big

    def plain_count() -> None:
        out = QueryBuilder().register("data", dt).execute("SELECT COUNT(*) FROM data").read_all()
        assert pa.table(out).column(0)[0].as_py() == big

    def plain_fresh_count() -> None:
        dt.update_incremental()  # what posixlake does before every read: see new commits
        plain_count()

    ours_count()  # warm
    plain_count()
    ours: list[float] = []
    plain: list[float] = []
    fresh: list[float] = []
    for _ in range(runs * 2):
        ours.append(ms(ours_count))
        plain.append(ms(plain_count))
        fresh.append(ms(plain_fresh_count))
    store.figures["COUNT(*) over 100,000"] = (ours, plain)
    store.figures["  vs refreshed delta-rs"] = (ours, fresh)


def report(stores: list[Store], big: int) -> None:
    local = stores[0]
    print()
    print(f"medians in ms ({big:,} rows for merge and count)")
    header = f"{'workload':<28}{'store':<8}{'posixlake':>11}{'delta-rs':>10}{'vs delta-rs':>13}{'vs local':>10}"
    print(header)
    print("-" * len(header))
    for workload in local.figures:
        base = statistics.median(local.figures[workload][0])
        for store in stores:
            ours, plain = store.figures[workload]
            o, p = statistics.median(ours), statistics.median(plain)
            label = workload.replace("100,000", f"{big:,}")
            print(f"{label:<28}{store.name:<8}{o:>11.1f}{p:>10.1f}{o / p:>12.2f}x{o / base:>9.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="where local tables go (a temp dir)")
    parser.add_argument("--only", choices=["local", "s3", "azure"], action="append")
    args = parser.parse_args(argv)
    servers: list[LocalServer] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        try:
            stores = [Store("local", str(Path(tmp) / "lake"))]
            wanted = set(args.only or ["local", "s3", "azure"])
            if "s3" in wanted:
                moto = start_moto()
                servers.append(moto)
                stores.append(
                    Store(
                        "s3",
                        f"s3://bench-{uuid.uuid4().hex[:8]}",
                        S3Config(moto.endpoint, "bench", "bench", "us-east-1", create_bucket=True),
                    )
                )
            if "azure" in wanted:
                azurite = start_azurite(workdir=tmp)
                servers.append(azurite)
                stores.append(
                    Store(
                        "azure",
                        f"az://bench-{uuid.uuid4().hex[:8]}",
                        AzureConfig.emulator(azurite.endpoint, create_container=True),
                    )
                )
            for store in stores:
                if store.name != "local" or "local" in wanted:
                    print(f"{store.name}: insert", flush=True)
                    bench_insert(store, args.runs)
                    print(f"{store.name}: merge", flush=True)
                    bench_merge(store, args.runs, args.rows)
                    print(f"{store.name}: count", flush=True)
                    bench_count(store, args.runs, args.rows)
            report([s for s in stores if s.figures], args.rows)
        finally:
            for server in servers:
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
