"""Small things a daily user meets: logins from the environment and without a terminal,
--engine on every command, what metrics' SLO lines claim."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli._maintenance import Probe, run_probe, slo_report
from posixlake import DatabaseOps
from tests.cli.conftest import Cli

ROOT = Path(__file__).resolve().parents[2]
ADMIN_PW = "admin-secret-1"


@pytest.fixture
def secured(run: Cli, table: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("POSIXLAKE_NEW_PASSWORD", ADMIN_PW)
    run.ok("users", "enable", table, "--user", "admin")
    monkeypatch.delenv("POSIXLAKE_NEW_PASSWORD")
    return table


def test_exported_user_does_not_prompt_for_a_table_without_users(run: Cli, table: str) -> None:
    result = run("info", table, "--json", env={"POSIXLAKE_USER": "bob"})
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""  # no prompt, and no warning about a user nobody typed
    assert json.loads(result.stdout)["rows"] == 3
    # typed on the command line, the user is told it is not used
    result = run("info", table, "--user", "bob")
    assert result.stderr == f"Warning: {table} has no users; --user bob is not used\n"


def test_exported_user_still_logs_in_where_there_are_users(run: Cli, secured: str) -> None:
    result = run("info", secured, "--json", env={"POSIXLAKE_USER": "admin"}, input=f"{ADMIN_PW}\n")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == "Password for admin: \n"


def _posixlake(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the command in a new session (no controlling terminal) with stdin closed."""
    return subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
        timeout=120,
        check=False,
    )


def test_no_terminal_means_a_clear_error_not_a_prompt(secured: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSIXLAKE_")}
    result = _posixlake("info", secured, "--user", "admin", env=env)
    assert result.returncode == 1
    assert "GetPassWarning" not in result.stderr and "Aborted!" not in result.stderr
    assert "may be echoed" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "Error: password for admin is needed and there is no terminal to ask on: "
        "set $POSIXLAKE_PASSWORD"
    )
    # a password piped on stdin is read, without getpass' warning
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "info", secured, "-u", "admin"],
        input=f"{ADMIN_PW}\n",
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "Password for admin: \n"


@pytest.mark.parametrize(
    "args",
    [
        ["backup", "{table}", "{dest}"],
        ["verify", "{dest}"],
        ["info", "{table}"],
        ["history", "{table}"],
        ["vacuum", "{table}", "--dry-run"],
        ["health", "{table}"],
        ["rollback", "{table}", "--version", "1"],
    ],
)
def test_every_command_takes_engine(run: Cli, table: str, tmp_path: Path, args: list[str]) -> None:
    dest = str(tmp_path / "backup")
    if args[0] == "verify":
        run.ok("backup", table, dest)
    argv = [a.format(table=table, dest=dest) for a in args]
    run.ok(*argv, "--engine", "local")
    assert "Invalid value" in run.fails(2, *argv, "--engine", "duckdb").stderr


# -- metrics: the SLO lines say what was measured ------------------------------------------


def test_slo_report_judges_the_probe_samples(tmp_path: Path) -> None:
    with DatabaseOps.create(
        tmp_path / "t", {"id": "Int64"}, primary_key="id", engine="local"
    ) as db:
        db.insert([{"id": 1}, {"id": 2}])
        ticks = iter(float(t) for t in range(10_000))
        # each timed call takes 12 ms on this clock: over the 10 ms point-query bound
        probe = run_probe(db, 3, clock=lambda: next(ticks) * 0.012)
        ops = db.get_metrics()
    assert probe.point_query == 'SELECT * FROM data WHERE "id" = 1'
    assert probe.samples_ms["query"] == pytest.approx([12.0, 12.0, 12.0])
    slo = slo_report(ops, probe)
    assert slo["point_query_p50"]["ok"] is False
    assert slo["point_query_p50"]["detail"] == "p50 12.00 ms >= 10 ms over 3 probe calls"
    assert slo["health_p50"]["ok"] is False  # 12 ms >= 5 ms
    fast = Probe(probe.point_query, {"query": [1.0, 2.0, 30.0], "health": [1.0]})
    assert slo_report(ops, fast)["point_query_p50"]["detail"] == (
        "p50 2.00 ms < 10 ms over 3 probe calls"
    )
    assert slo_report(ops, None)["point_query_p50"]["ok"] is None


def test_metrics_text_names_the_probe(run: Cli, table: str) -> None:
    out = run.ok("metrics", table, "--where", "id = 1", "--probe", "3").stdout
    probe = next(ln for ln in out.splitlines() if ln.startswith("Probe:"))
    assert '3 point queries (SELECT * FROM data WHERE "id" = 1) and 3 health checks' in probe
    for line in (ln for ln in out.splitlines() if ln.startswith("SLO ")):
        m = re.search(r": (met|not met) \(p50 ([\d.]+) ms (<|>=) ([\d.]+) ms", line)
        if m is None:
            assert ": n/a (" in line
            continue
        state, p50, sign, bound = m.groups()
        assert (float(p50) < float(bound)) == (sign == "<") == (state == "met")
    assert "MISSED" not in out


def test_metrics_without_a_key_times_no_point_query(run: Cli, tmp_path: Path) -> None:
    path = str(tmp_path / "nokey")
    run.ok("create", path, "--schema", "a:Int64")
    out = json.loads(run.ok("metrics", path, "--probe", "2", "--json").stdout)
    assert out["slo"]["point_query_p50"] == {
        "ok": None,
        "bound_ms": 10.0,
        "detail": "no single-column primary key: no point query to time",
    }
