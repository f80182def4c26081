"""A lake root of many small tables: listing it, and opening one table on first use.

Run:  python benchmarks/bench_lake.py [--tables 1000] [--runs 20] [--dir DIR] [--no-libnfs]
      python benchmarks/bench_lake.py --s3 [--tables 50] [--files 10] [--runs 5]

Makes ``--tables`` small Delta tables (3 rows each, written with delta-rs directly; half
of them under ten prefixes ``p0/`` .. ``p9/``) under one local root, then measures
(median and p90 over ``--runs``):

1. discovery: one listing of the root for ``_delta_log/`` directories (what the lake pays
   once per listing TTL, 0.5 s by default, when a call comes);
2. warm ``ls`` in process: READDIR of the lake root plus GETATTR of every entry (what
   READDIRPLUS does), through ``LakeFs`` with its listing cached;
3. warm ``nfs-ls`` of the root through ``NfsServer`` (libnfs-utils; a process start each);
4. first use of one table: LOOKUP into it and a READ of its data.csv (opens the table:
   its Delta log and the first rendering), then the same READ warm.

Listing opens no table (the count of opened tables is printed). These are measurements,
not tests: nothing here asserts a time.

``--s3``: the discovery of a lake on S3 (a moto_server started for the run, on this
machine: requests cost a local round trip, not S3's): ``--tables`` tables of one data
file, then the same after ``--files`` more data files in every table. Discovery lists
each directory down to the tables with a delimiter and probes ``_delta_log/`` once per
directory: the same requests before and after (tests/nfs/test_lake_discovery.py counts
them). moto_server itself filters every key of the bucket on each listing request, so its
times grow with the objects anyway (measured on this 2-core machine, 50 tables: 345-380 ms
with one data file a table, 750-820 ms with 11, and one recursive listing of the 1,100
objects, what discovery did before, 450-680 ms); on S3, whose listings are indexed by
prefix, a request's cost does not depend on the keys outside its prefix.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from nfs.lake.discovery import discover_tables
from nfs.lake.lakefs import LakeFs
from nfs.lake.opening import tablefs_opener
from nfs.protocol.rpc import CallContext
from nfs.protocol.server import NfsServer
from nfs.protocol.vfs import FileId
from posixlake.storage import open_store

ROOT_CTX = CallContext.local()


def make_lake(root: Path, n: int) -> None:
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    for i in range(n):
        rel = f"p{i % 10}/t{i:05d}" if i % 2 else f"t{i:05d}"
        write_deltalake(str(root / rel), data)


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    """Median and p90 of ``runs`` calls, in milliseconds."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.9))]


def ls(lake: LakeFs) -> int:
    root = lake.root_dir()
    count, after = 0, 0
    while True:
        page = lake.readdir(root, after=after, max_entries=512, ctx=ROOT_CTX)
        for entry in page.entries:
            lake.getattr(entry.fileid)
            count += 1
        if page.eof or not page.entries:
            return count
        after = page.entries[-1].cookie


def read_all(lake: LakeFs, fid: FileId) -> int:
    data, _ = lake.read(fid, 0, 1 << 20, ROOT_CTX)
    return len(data)


def bench_s3(tables: int, files: int, runs: int) -> None:
    """Discovery of a lake on moto_server, before and after more data files."""
    from tests.storage.servers import start_moto

    data = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    with start_moto() as server:
        import boto3

        boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket="bench-lake")
        options = {
            "AWS_ENDPOINT_URL": server.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
            "conditional_put": "etag",
        }
        root = "s3://bench-lake/lake"
        paths = [
            f"{root}/p{i % 10}/t{i:05d}" if i % 2 else f"{root}/t{i:05d}" for i in range(tables)
        ]
        start = time.perf_counter()
        for uri in paths:
            write_deltalake(uri, data, storage_options=options)
        print(f"made {tables} tables on moto_server in {time.perf_counter() - start:.1f} s")
        found = discover_tables(root, options)
        assert len(found) == tables, found
        med, p90 = timed(lambda: discover_tables(root, options), runs)
        print(f"s3 discovery, 1 data file a table:        median {med:7.2f} ms  p90 {p90:7.2f} ms")
        for uri in paths:
            for _ in range(files):
                write_deltalake(uri, data, storage_options=options, mode="append")
        med, p90 = timed(lambda: discover_tables(root, options), runs)
        print(
            f"s3 discovery, {1 + files} data files a table:       "
            f"median {med:7.2f} ms  p90 {p90:7.2f} ms"
        )
        store = open_store(root, options)
        objects = sum(1 for _ in store.list())
        med, p90 = timed(lambda: sum(1 for _ in store.list()), runs)
        print(
            f"(for comparison, one recursive listing of all {objects} objects, what discovery "
            f"did before: median {med:7.2f} ms  p90 {p90:7.2f} ms)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--dir", type=Path, default=None, help="where to make the lake (a temp dir)")
    ap.add_argument("--no-libnfs", action="store_true", help="skip the nfs-ls measurement")
    ap.add_argument("--s3", action="store_true", help="discovery on moto_server instead")
    ap.add_argument("--files", type=int, default=10, help="--s3: data files added per table")
    args = ap.parse_args()
    if args.s3:
        bench_s3(args.tables, args.files, args.runs)
        return
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-lake-"))
    root = work / "lake"
    try:
        start = time.perf_counter()
        make_lake(root, args.tables)
        print(f"made {args.tables} tables in {time.perf_counter() - start:.1f} s under {root}")

        med, p90 = timed(lambda: discover_tables(str(root)), max(3, args.runs // 4))
        print(f"discovery (one listing of the root):      median {med:7.2f} ms  p90 {p90:7.2f} ms")

        state = work / "state"
        opener = tablefs_opener(
            str(root), state_dir=state, engine={"engine": "local"}, tablefs={"idle_timer": False}
        )
        lake = LakeFs(str(root), opener, state_dir=state, listing_ttl=3600.0)
        entries = ls(lake)  # the first listing
        med, p90 = timed(lambda: ls(lake), args.runs)
        print(
            f"warm ls in process ({entries} entries, READDIR + GETATTR each): "
            f"median {med:7.2f} ms  p90 {p90:7.2f} ms  (tables opened: {lake.opened})"
        )

        if not args.no_libnfs and shutil.which("nfs-ls"):
            with NfsServer(lake) as server:
                url = server.nfs_url("/")

                def nfs_ls() -> None:
                    subprocess.run(["nfs-ls", url], capture_output=True, check=True)

                nfs_ls()
                med, p90 = timed(nfs_ls, args.runs)
                print(
                    f"warm nfs-ls of the root (libnfs):         median {med:7.2f} ms  p90 {p90:7.2f} ms"
                )
            lake = LakeFs(str(root), opener, state_dir=state, listing_ttl=3600.0)
        table = lake.lookup(lake.root_dir(), "t00000", ROOT_CTX)
        start = time.perf_counter()
        csv = lake.lookup(lake.lookup(table, "data", ROOT_CTX), "data.csv", ROOT_CTX)
        size = read_all(lake, csv)
        first = (time.perf_counter() - start) * 1000
        med, p90 = timed(lambda: read_all(lake, csv), args.runs)
        print(f"first use of one table (open + read {size} B): {first:7.2f} ms")
        print(f"the same read, warm:                      median {med:7.2f} ms  p90 {p90:7.2f} ms")
        lake.close()
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
