"""The end-to-end checks shared by scripts/test_python_s3.py and scripts/test_python_azure.py.

Each check prints ``PASS <name>`` or ``FAIL <name>: <reason>``; :func:`run_checks`
returns how many failed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a checkout: posixlake and tests.storage.servers
    sys.path.insert(0, str(REPO))

from posixlake import DatabaseOps, Field, Schema  # noqa: E402
from posixlake.errors import PosixLakeError  # noqa: E402
from posixlake.storage import usage  # noqa: E402

SCHEMA = Schema(
    [Field("id", "Int64", False), Field("name", "String"), Field("score", "Float64")],
    primary_key="id",
)
ROWS = [
    {"id": 1, "name": "ann", "score": 1.5},
    {"id": 2, "name": "bob", "score": None},
    {"id": 3, "name": "cy", "score": -2.0},
]


class CheckFailed(AssertionError):
    """A check's expectation did not hold."""


def expect(condition: bool, message: str) -> None:
    """Raise CheckFailed with ``message`` unless ``condition``."""
    if not condition:
        raise CheckFailed(message)


def run_checks(uri: str, storage: Any, *, engine: str, create_bucket: bool) -> tuple[int, bool]:
    """Run the checks against a new table at ``uri``.

    Returns:
        (the number of failed checks, whether the table was created)
    """
    failures = 0
    state: dict[str, Any] = {}

    def check(name: str, fn: Callable[[], str | None]) -> bool:
        nonlocal failures
        started = time.perf_counter()
        try:
            detail = fn()
        except (PosixLakeError, CheckFailed) as err:
            # Anything else is a bug: it propagates, with its traceback and exit status 1.
            failures += 1
            print(f"FAIL {name}: {type(err).__name__}: {err}", flush=True)
            return False
        ms = (time.perf_counter() - started) * 1000
        print(f"PASS {name} ({ms:.0f} ms){': ' + detail if detail else ''}", flush=True)
        return True

    def create() -> str:
        state["db"] = DatabaseOps.create(
            uri, SCHEMA, storage=storage, engine=engine, create_bucket=create_bucket
        )
        return uri

    def health_empty() -> str:
        h = state["db"].health_check()
        expect(h.healthy and h.version == 0 and h.active_files == 0, f"unexpected {h}")
        return f"version {h.version}, {h.active_files} files"

    def insert_query() -> str:
        db = state["db"]
        expect(db.insert(ROWS) == 3, "insert did not report 3 rows")
        got = db.query("SELECT * FROM data ORDER BY id").to_pylist()
        expect(got == ROWS, f"query returned {got}")
        return "3 rows"

    def reopen() -> str:
        db = DatabaseOps.open(uri, storage=storage, engine=engine)
        got = db.query("SELECT * FROM data ORDER BY id").to_pylist()
        expect(got == ROWS, f"reopened table returned {got}")
        expect(db.primary_key() == "id", f"primary key {db.primary_key()}")
        db.insert({"id": 4, "name": "dee", "score": 4.0})
        state["db"] = DatabaseOps.open(uri, storage=storage, engine=engine)
        n = state["db"].query("SELECT count(*) FROM data").scalar()
        expect(n == 4, f"after reopen and insert: {n} rows")
        return f"version {state['db'].version}"

    def merge() -> str:
        db = state["db"]
        m = db.merge(
            [
                {"id": 1, "name": "ANN", "_op": "UPDATE"},
                {"id": 2, "_op": "DELETE"},
                {"id": 5, "name": "eve", "score": 5.0, "_op": "INSERT"},
            ]
        )
        expect((m.rows_inserted, m.rows_updated, m.rows_deleted) == (1, 1, 1), f"{m}")
        got = DatabaseOps.open(uri, storage=storage, engine=engine).query(
            "SELECT id, name FROM data ORDER BY id"
        )
        ids = [(r["id"], r["name"]) for r in got.to_pylist()]
        expect(ids == [(1, "ANN"), (3, "cy"), (4, "dee"), (5, "eve")], f"after merge: {ids}")
        return f"version {m.version}"

    def time_travel() -> str:
        db = state["db"]
        n = db.query("SELECT count(*) FROM data", version=1).scalar()
        expect(n == 3, f"version 1 has {n} rows")
        expect(len(db.history()) == db.version + 1, "history length")
        return f"{len(db.history())} commits"

    def health_and_usage() -> str:
        db = state["db"]
        h = db.health_check()
        expect(h.healthy and h.rows == 4 and h.active_files >= 1, f"unexpected {h}")
        u = usage(uri, storage)
        expect(u.objects >= h.active_files and u.log_objects == h.version + 1, f"{u} vs {h}")
        return f"{h.active_files} active files / {h.active_bytes} B; {u.objects} objects stored"

    steps: list[tuple[str, Callable[[], str | None]]] = [
        ("create", create),
        ("health (empty)", health_empty),
        ("insert + query", insert_query),
        ("reopen + insert", reopen),
        ("merge", merge),
        ("time travel + history", time_travel),
        ("health + usage", health_and_usage),
    ]
    for name, fn in steps:
        if not check(name, fn) and name == "create":
            return failures, False  # nothing else can work
    return failures, True


def cleanup(uri: str, storage: Any) -> None:
    """Delete every object under the table URI."""
    from posixlake.storage import open_store, storage_options_for

    store = open_store(uri, storage_options_for(uri, storage))
    removed = store.delete_prefix()
    print(f"cleanup: removed {removed} objects under {uri}", flush=True)
