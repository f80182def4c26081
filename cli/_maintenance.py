"""Maintenance commands: optimize, zorder, vacuum, health, metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import click

from cli._common import (
    ByteSize,
    echo_json,
    engine_accepted,
    get_options,
    human_bytes,
    json_option,
    open_table,
    plural,
    split_columns,
    storage_options,
    table_argument,
    to_jsonable,
    user_option,
)
from posixlake import DatabaseOps
from posixlake.errors import PosixLakeError
from posixlake.types import HealthStatus, Metrics, OptimizeResult

__all__ = ["COMMANDS"]

_TARGET_SIZE_HELP: Final = "Target file size (e.g. 128MiB; delta-rs default 100 MiB)."


def _report_optimize(verb: str, done: str, result: OptimizeResult) -> None:
    if get_options().json:
        echo_json(result)
    elif result.version is None or (result.files_added == 0 and result.files_removed == 0):
        click.echo(f"Nothing to {verb}: the table is unchanged")
    else:
        click.echo(
            f"{done}: {plural(result.files_removed, 'file')} rewritten into "
            f"{result.files_added:,} (version {result.version})"
        )


@click.command()
@table_argument
@click.option("--target-size", type=ByteSize(), help=_TARGET_SIZE_HELP)
@engine_accepted
@storage_options
@user_option
@json_option
def optimize(table: str, target_size: int | None) -> None:
    """Compact small files into larger ones, in one commit.

    \b
    Example:
      posixlake optimize /data/sales --target-size 256MiB
    """
    with open_table(table) as db:
        result = db.optimize.compact(target_size=target_size)
    _report_optimize("compact", "Compacted", result)


@click.command()
@table_argument
@click.argument("columns", nargs=-1, required=True, metavar="COLUMN...")
@click.option("--target-size", type=ByteSize(), help=_TARGET_SIZE_HELP)
@engine_accepted
@storage_options
@user_option
@json_option
def zorder(table: str, columns: tuple[str, ...], target_size: int | None) -> None:
    """Cluster files by a Z-order curve over COLUMNs (data skipping).

    \b
    Example:
      posixlake zorder /data/events user_id ts
      posixlake metrics /data/events --where 'user_id = 42'   # see the files skipped
    """
    with open_table(table) as db:
        result = db.optimize.z_order(split_columns(columns), target_size=target_size)
    _report_optimize("z-order", "Z-ordered", result)


@click.command()
@table_argument
@click.option(
    "--retention-hours",
    type=click.IntRange(min=0),
    help="Keep files that versions of the last N hours need (default: the table's, 168).",
)
@click.option("--dry-run", "-n", is_flag=True, help="Only list the files that would be deleted.")
@click.option(
    "--enforce-retention/--no-enforce-retention",
    default=True,
    show_default=True,
    help="Refuse a retention shorter than the table's minimum (7 days by default). "
    "Time travel to versions older than the retention stops working.",
)
@engine_accepted
@storage_options
@user_option
@json_option
def vacuum(table: str, retention_hours: int | None, dry_run: bool, enforce_retention: bool) -> None:
    """Delete data files that no version in the retention period needs.

    \b
    Examples:
      posixlake vacuum /data/sales --dry-run
      posixlake vacuum /data/sales --retention-hours 0 --no-enforce-retention
    """
    with open_table(table) as db:
        result = db.vacuum(
            retention_hours, dry_run=dry_run, enforce_retention_duration=enforce_retention
        )
    if get_options().json:
        echo_json(
            {
                "dry_run": result.dry_run,
                "files_deleted": result.files_deleted,
                "files": result.files,
            }
        )
        return
    verb = "Would delete" if dry_run else "Deleted"
    click.echo(f"{verb} {plural(result.files_deleted, 'file')}")
    for name in result.files:
        click.echo(f"  {name}")


@click.command()
@table_argument
@engine_accepted
@storage_options
@user_option
@json_option
def health(table: str) -> None:
    """Check that a table can be read; exit 1 when it cannot.

    \b
    Example:
      posixlake health /data/sales && echo ok
    """
    try:
        with open_table(table) as db:
            status = db.health_check()
    except PosixLakeError as err:
        status = HealthStatus("unhealthy", -1, 0, 0, 0, table, message=str(err))
    if get_options().json:
        echo_json({**_health_dict(status), "healthy": status.healthy})
    elif status.healthy:
        click.echo(
            f"healthy: version {status.version}, {plural(status.rows, 'row')}, "
            f"{plural(status.active_files, 'file')} ({human_bytes(status.active_bytes)}) "
            f"at {status.location}"
        )
    if not status.healthy:
        if not get_options().json:
            click.echo(f"unhealthy: {' '.join(status.message.split())}", err=True)
        raise click.exceptions.Exit(1)


def _health_dict(status: HealthStatus) -> dict[str, object]:
    return {
        "status": status.status,
        "version": status.version,
        "active_files": status.active_files,
        "active_bytes": status.active_bytes,
        "rows": status.rows,
        "location": status.location,
        "message": status.message,
    }


@click.command()
@table_argument
@click.option(
    "--where",
    "-w",
    "where",
    metavar="PREDICATE",
    help="Also count the files a query with this predicate would skip.",
)
@click.option(
    "--probe",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Time this many point queries and health checks (0: none); read-only.",
)
@engine_accepted
@storage_options
@user_option
@json_option
def metrics(table: str, where: str | None, probe: int) -> None:
    """Show files, rows, data skipping and operation metrics (SLOs).

    The operation metrics (errors, commit conflicts and retries, latency percentiles)
    are this process's. The probe times its own point queries (by primary key, after a
    warm-up) and health checks against the SLOs (point query p50 < 10 ms, health p50
    < 5 ms): synthetic calls on this machine, as busy as it is now. Insert latency is
    measured by writers (``DatabaseOps.get_metrics()``, ``benchmarks/bench_slo.py``).

    \b
    Examples:
      posixlake metrics /data/events
      posixlake metrics /data/events --where 'user_id = 42' --json
      posixlake metrics /data/events --probe 100 --json | jq .slo
    """
    with open_table(table) as db:
        stats = db.get_data_skipping_stats(where)
        version = db.version
        probed = run_probe(db, probe)
        ops = db.get_metrics()
    slo = slo_report(ops, probed)
    if get_options().json:
        echo_json(
            {
                "version": version,
                **to_jsonable(stats),
                "skip_ratio": stats.skip_ratio,
                "operations": to_jsonable(ops),
                "slo": slo,
            }
        )
        return
    click.echo(f"Version:      {version}")
    click.echo(f"Files:        {stats.total_files:,} ({human_bytes(stats.total_bytes)})")
    click.echo(f"Rows:         {stats.total_rows:,}")
    avg = stats.total_bytes // stats.total_files if stats.total_files else 0
    click.echo(f"Avg file:     {human_bytes(avg)}")
    if where is not None:
        click.echo(f"Predicate:    {where}")
        click.echo(
            f"Files to scan: {stats.files_to_scan:,} ({human_bytes(stats.bytes_to_scan)}), "
            f"skipped {stats.files_skipped:,} ({stats.skip_ratio:.0%})"
        )
    click.echo(
        f"Errors:       {ops.errors:,}; commit conflicts {ops.commit_conflicts:,}, "
        f"retries {ops.commit_retries:,}, given up {ops.commits_given_up:,}"
    )
    for op, p in ops.latency_ms.items():
        click.echo(
            f"Latency {op + ':':<8} p50 {p.p50:.2f} ms, p90 {p.p90:.2f} ms, "
            f"p99 {p.p99:.2f} ms, max {p.max:.2f} ms ({p.count:,} calls)"
        )
    if probe:
        what = (
            f"{probe} point queries ({probed.point_query}) and "
            if probed.point_query
            else "no point query (no single-column primary key), "
        )
        click.echo(
            f"Probe:        {what}{probe} health checks, timed in this process "
            "(--probe 0: none); the SLOs below are judged on these calls"
        )
    for name, check in slo.items():
        state = "n/a" if check["ok"] is None else ("met" if check["ok"] else "not met")
        click.echo(f"SLO {name}: {state} ({check['detail']})")


#: the SLOs of the original project that these metrics check: operation -> p50 bound, ms
SLO_P50_MS: Final[dict[str, tuple[str, float]]] = {
    "point_query_p50": ("query", 10.0),
    "insert_p50": ("insert", 50.0),
    "health_p50": ("health", 5.0),
}


@dataclass(frozen=True)
class Probe:
    """What ``metrics --probe N`` timed: its own calls, apart from the handle's counters.

    Attributes:
        point_query: the query timed as a point query (None: the table has no
            single-column primary key, so there is no point query to time).
        samples_ms: operation (``query``, ``health``) -> the probe's latencies.
    """

    point_query: str | None
    samples_ms: dict[str, list[float]]


def run_probe(
    db: DatabaseOps, count: int, *, clock: Callable[[], float] = time.perf_counter
) -> Probe:
    """Time ``count`` point queries and health checks on ``db`` (read-only).

    The lookup of a key to query and one warm-up query are not timed, so the samples are
    the probe's point queries alone.
    """
    samples: dict[str, list[float]] = {"query": [], "health": []}
    if count <= 0:
        return Probe(None, samples)
    point = _point_query(db)
    if point is not None:
        db.query(point)  # warm-up: not a sample
    for _ in range(count):
        if point is not None:
            started = clock()
            db.query(point)
            samples["query"].append((clock() - started) * 1000)
        started = clock()
        db.health_check()
        samples["health"].append((clock() - started) * 1000)
    return Probe(point, samples)


def _point_query(db: DatabaseOps) -> str | None:
    """Return a query for one row by primary key (the first key value), or None."""
    key = db.key_columns
    if len(key) == 1:
        name = '"' + key[0].replace('"', '""') + '"'
        first = db.query(f"SELECT {name} FROM data LIMIT 1").fetchone()
        if first is not None and isinstance(first[0], int) and not isinstance(first[0], bool):
            return f"SELECT * FROM data WHERE {name} = {first[0]}"
        if first is not None and isinstance(first[0], str):
            literal = "'" + first[0].replace("'", "''") + "'"
            return f"SELECT * FROM data WHERE {name} = {literal}"
    return None


def slo_report(ops: Metrics, probe: Probe | None = None) -> dict[str, dict[str, Any]]:
    """Check the latencies against the SLOs; ``ok`` is None where nothing was measured.

    Query and health latencies are the probe's own calls (when it ran); the insert SLO
    is judged from the handle's counters (a read-only probe measures none).
    """
    import statistics

    out: dict[str, dict[str, Any]] = {}
    for name, (op, bound) in SLO_P50_MS.items():
        samples = probe.samples_ms.get(op) if probe is not None else None
        if samples:
            p50, count, what = statistics.median(samples), len(samples), "probe calls"
        else:
            p = ops.latency_ms.get(op) if op == "insert" else None
            if p is None or not p.count:
                why = f"no {op} measured"
                if op == "query" and probe is not None and probe.samples_ms.get("health"):
                    why = "no single-column primary key: no point query to time"
                out[name] = {"ok": None, "bound_ms": bound, "detail": why}
                continue
            p50, count, what = p.p50, p.count, "calls"
        ok = p50 < bound
        sign = "<" if ok else ">="
        out[name] = {
            "ok": ok,
            "bound_ms": bound,
            "p50_ms": p50,
            "detail": f"p50 {p50:.2f} ms {sign} {bound:g} ms over {count} {what}",
        }
    lost = ops.commits_given_up
    out["zero_committed_data_loss"] = {
        "ok": None if not ops.commits else ops.errors == 0,
        "detail": (
            f"{ops.errors} failed operation(s), {lost} write(s) gave up on conflicts, "
            f"{ops.buffered_rows} row(s) buffered; an acknowledged write is committed "
            "(see docs/operations.md)"
        ),
    }
    return out


COMMANDS: Final[list[click.Command]] = [optimize, zorder, vacuum, health, metrics]
