"""The posixlake demo: create a table, insert, merge, delete, time-travel, then edit it as a file.

Run it with ``scripts/demo.sh`` (installs everything first) or ``python scripts/demo.py``.
``--engine local`` runs without Spark; the default is the Spark engine.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from posixlake import DatabaseOps, Field, Schema


def main() -> None:
    """Run the demo in a temporary directory (or ``--path``)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default=None, help="spark (default) or local")
    parser.add_argument(
        "--path", default=None, help="where to create the table (default: a temp dir)"
    )
    args = parser.parse_args()
    root = Path(args.path) if args.path else Path(tempfile.mkdtemp(prefix="posixlake-demo-"))
    path = root / "people"

    schema = Schema(
        [
            Field("id", "Int64", nullable=False),
            Field("name", "String"),
            Field("age", "Int32"),
            Field("city", "String"),
        ],
        primary_key="id",
    )
    with DatabaseOps.create(path, schema, engine=args.engine) as db:
        print(f"created {db.uri} (engine: {db.engine.name}), version {db.version}")

        db.insert(
            [
                {"id": 1, "name": "Alice", "age": 30, "city": "Lisbon"},
                {"id": 2, "name": "Bob", "age": 25, "city": "Oslo"},
                {"id": 3, "name": "Carol", "age": 41, "city": "Lima"},
            ]
        )
        print(f"\ninserted 3 rows -> version {db.version}")
        db.query("SELECT * FROM data ORDER BY id").show()

        metrics = db.merge(
            [
                {"_op": "UPDATE", "id": 2, "age": 26},
                {"_op": "DELETE", "id": 3},
                {"_op": "INSERT", "id": 4, "name": "Dan", "age": 35, "city": "Nairobi"},
            ]
        )
        print(
            f"\nmerge: {metrics.rows_inserted} inserted, {metrics.rows_updated} updated, "
            f"{metrics.rows_deleted} deleted in one commit -> version {db.version}"
        )
        db.query("SELECT * FROM data ORDER BY id").show()

        deleted = db.delete_rows_where("age > 30")
        print(f"\ndelete age > 30: {deleted} row(s) -> version {db.version}")
        db.query("SELECT * FROM data ORDER BY id").show()

        print("\ntime travel: the table at version 1")
        db.query("SELECT * FROM data ORDER BY id", version=1).show()

        print("\nhistory:")
        for commit in db.history():
            print(f"  v{commit.version}  {commit.timestamp:%Y-%m-%d %H:%M:%S}  {commit.operation}")
        print(f"\nhealth: {db.health_check()}")
        nfs_demo(db)


def nfs_demo(db: DatabaseOps) -> None:
    """Serve the table over NFSv3 and edit it as a CSV file: each edit is one Delta commit."""
    from nfs.protocol.server import NfsServer
    from nfs.table.tablefs import TableFs

    table = TableFs(db)
    with NfsServer(table, 0) as server:
        fs = table.paths  # the same calls a mounted share makes, in process
        print(f"\nNFSv3 server on 127.0.0.1:{server.port}; mount it with")
        print(
            f"  sudo mount -t nfs -o vers=3,proto=tcp,port={server.port},mountport={server.port},"
            f"mountproto=tcp,nolock,noacl 127.0.0.1:/ /mnt/posixlake"
        )
        print("\n$ ls /  and  cat /data/data.csv")
        print("  " + "  ".join(fs.readdir("/")))
        print(fs.read_file("/data/data.csv").decode(), end="")

        before = db.version
        size = fs.getattr("/data/data.csv").size
        fs.write_file("/data/data.csv", b"5,Erin,29,Quito\n", offset=size)  # echo >> data.csv
        print(
            f"\n$ echo '5,Erin,29,Quito' >> data.csv   -> one INSERT, version {before} -> {db.version}"
        )

        text = fs.read_file("/data/data.csv").decode().replace(",Oslo", ",Bergen")
        fs.write_file("/data/data.tmp", text.encode())  # sed -i writes a temp file ...
        fs.rename("/data/data.tmp", "/data/data.csv")  # ... and renames it over the table
        print(f"$ sed -i 's/,Oslo/,Bergen/' data.csv      -> one MERGE, version {db.version}")
        db.query("SELECT * FROM data ORDER BY id").show()

        if shutil.which("nfs-cat"):  # a real NFS client, when libnfs-utils is installed
            url = server.nfs_url("/data/data.csv")
            out = subprocess.run(
                ["nfs-cat", url], capture_output=True, text=True, timeout=30, check=False
            )
            print(f"\n$ nfs-cat {url}\n{out.stdout}", end="")


if __name__ == "__main__":
    main()
