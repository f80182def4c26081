"""optimize, zorder, vacuum, health, metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posixlake import DatabaseOps
from tests.cli.conftest import ROWS, Cli, rows, unchanged, version


@pytest.fixture
def fragmented(table: str) -> str:
    """The sales table with four more single-row files (five files in all)."""
    with DatabaseOps.open(table, engine="local") as db:
        for i in range(4, 8):
            db.insert({"id": i, "item": f"item{i}", "qty": i})
    return table


def test_optimize(run: Cli, fragmented: str) -> None:
    before = rows(fragmented)
    out = run.ok("optimize", fragmented).stdout
    assert out == "Compacted: 5 files rewritten into 1 (version 6)\n"
    assert rows(fragmented) == before
    assert run.ok("optimize", fragmented).stdout == "Nothing to compact: the table is unchanged\n"
    assert version(fragmented) == 6


def test_optimize_json_and_target_size(run: Cli, fragmented: str) -> None:
    out = json.loads(run.ok("optimize", fragmented, "--target-size", "64MiB", "--json").stdout)
    assert out == {"files_added": 1, "files_removed": 5, "partitions_optimized": 1, "version": 6}


@pytest.mark.parametrize("size", ["0", "-5", "lots", "12XB"])
def test_optimize_bad_target_size(run: Cli, table: str, size: str) -> None:
    run.fails(2, "optimize", table, "--target-size", size)
    assert version(table) == 1


def test_zorder(run: Cli, fragmented: str) -> None:
    before = rows(fragmented)
    out = run.ok("zorder", fragmented, "qty", "id").stdout
    assert out == "Z-ordered: 5 files rewritten into 1 (version 6)\n"
    assert rows(fragmented) == before


def test_zorder_comma_separated_json(run: Cli, fragmented: str) -> None:
    out = json.loads(run.ok("zorder", fragmented, "qty,id", "--json").stdout)
    assert out["files_removed"] == 5 and out["version"] == 6


def test_zorder_bad_columns(run: Cli, table: str) -> None:
    run.fails(2, "zorder", table)
    assert "colour" in run.fails(1, "zorder", table, "colour").stderr
    unchanged(table, 1, ROWS)


def test_vacuum_respects_the_retention(run: Cli, fragmented: str) -> None:
    run.ok("optimize", fragmented)
    assert run.ok("vacuum", fragmented, "--dry-run").stdout == "Would delete 0 files\n"
    result = run.fails(1, "vacuum", fragmented, "--retention-hours", "0")
    assert "retention" in result.stderr


def test_vacuum_dry_run_then_delete(run: Cli, fragmented: str) -> None:
    run.ok("optimize", fragmented)
    flags = ("--retention-hours", "0", "--no-enforce-retention")
    dry = run.ok("vacuum", fragmented, *flags, "--dry-run").stdout.splitlines()
    assert dry[0] == "Would delete 5 files"
    assert all(line.startswith("  part-") for line in dry[1:]) and len(dry) == 6
    out = json.loads(run.ok("vacuum", fragmented, *flags, "--json").stdout)
    assert out["dry_run"] is False and out["files_deleted"] == 5 and len(out["files"]) == 5
    assert len(rows(fragmented)) == 7


def test_vacuum_bad_retention(run: Cli, table: str) -> None:
    run.fails(2, "vacuum", table, "--retention-hours", "-1")


def test_health(run: Cli, table: str) -> None:
    out = run.ok("health", table).stdout
    assert out.startswith("healthy: version 1, 3 rows, 1 file (")
    assert out.rstrip().endswith(f"at {table}")
    status = json.loads(run.ok("health", table, "--json").stdout)
    assert status["healthy"] is True and status["rows"] == 3 and status["active_files"] == 1


def test_health_of_a_missing_table_exits_1(run: Cli, tmp_path: Path) -> None:
    path = str(tmp_path / "none")
    result = run("health", path)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("unhealthy: no table at")
    result = run("health", path, "--json")
    assert result.exit_code == 1
    status = json.loads(result.stdout)
    assert status["healthy"] is False and status["status"] == "unhealthy" and status["message"]


def test_metrics(run: Cli, fragmented: str) -> None:
    out = run.ok("metrics", fragmented, "--where", "id >= 6").stdout
    assert "Files:        5 (" in out
    assert "Rows:         7" in out
    assert "Files to scan: 2 (" in out and "skipped 3 (60%)" in out


def test_metrics_json(run: Cli, fragmented: str) -> None:
    out = json.loads(run.ok("metrics", fragmented, "--json", "-w", "id = 1").stdout)
    assert out["version"] == 5 and out["total_files"] == 5 and out["total_rows"] == 7
    assert out["files_to_scan"] == 1 and out["files_skipped"] == 4 and out["skip_ratio"] == 0.8
    assert out["predicate"] == "id = 1"


def test_metrics_bad_predicate(run: Cli, table: str) -> None:
    run.fails(1, "metrics", table, "--where", "id = = 1")


@pytest.mark.parametrize("command", ["optimize", "vacuum", "metrics"])
def test_missing_table(run: Cli, tmp_path: Path, command: str) -> None:
    run.fails(1, command, str(tmp_path / "none"))


def test_metrics_json_reports_operations_and_slos(run: Cli, fragmented: str) -> None:
    out = json.loads(run.ok("metrics", fragmented, "--json", "--probe", "7").stdout)
    ops = out["operations"]
    for name in ("errors", "commit_conflicts", "commit_retries", "commits_given_up"):
        assert ops[name] == 0
    assert ops["latency_ms"]["health"]["count"] == 7
    assert ops["latency_ms"]["query"]["count"] >= 7
    for op in ("health", "query"):
        p = ops["latency_ms"][op]
        assert 0 < p["p50"] <= p["p90"] <= p["p99"] <= p["max"]
    assert out["slo"]["health_p50"]["bound_ms"] == 5.0
    assert out["slo"]["health_p50"]["ok"] in (True, False)
    assert out["slo"]["insert_p50"]["ok"] is None  # a read-only probe measures no insert


def test_metrics_without_probe_times_nothing(run: Cli, fragmented: str) -> None:
    out = json.loads(run.ok("metrics", fragmented, "--json", "--probe", "0").stdout)
    assert "health" not in out["operations"]["latency_ms"]
    assert out["slo"]["point_query_p50"]["ok"] is None
