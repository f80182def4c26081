"""The posixlake demo: create a table, insert, merge, delete, time-travel, print the results.

Run it with ``scripts/demo.sh`` (installs everything first) or ``python scripts/demo.py``.
``--engine local`` runs without Spark; the default is the Spark engine.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from posixlake import DatabaseOps, Field, Schema


def main() -> None:
    """Run the demo in a temporary directory (or ``--path``)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default=None, help="spark (default) or local")
    parser.add_argument("--path", default=None, help="where to create the table (default: a temp dir)")
    args = parser.parse_args()
    root = Path(args.path) if args.path else Path(tempfile.mkdtemp(prefix="posixlake-demo-"))
    path = root / "people"

    schema = Schema(
        [Field("id", "Int64", nullable=False), Field("name", "String"), Field("age", "Int32"), Field("city", "String")],
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
        print(f"\nmerge: {metrics.rows_inserted} inserted, {metrics.rows_updated} updated, "
              f"{metrics.rows_deleted} deleted in one commit -> version {db.version}")
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


if __name__ == "__main__":
    main()
