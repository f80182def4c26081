"""The CLI prints true row counts for other writers' tables (files without statistics)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Cli
from tests.posixlake.interop_tables import no_stats_partitioned


def test_delete_by_partition_predicate_prints_the_true_count(run: Cli, tmp_path: Path) -> None:
    uri = no_stats_partitioned(tmp_path)
    out = run.ok("delete", uri, "--where", "day IS NOT NULL", "--engine", "local").stdout
    assert out == "Deleted 7 rows (version 1)\n"
