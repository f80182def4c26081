"""The installed ``posixlake`` console script, run as a real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

EXE = shutil.which("posixlake")

pytestmark = pytest.mark.skipif(EXE is None, reason="the posixlake entry point is not installed")


def posixlake(
    *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed command and wait for it."""
    assert EXE is not None
    base = {k: v for k, v in os.environ.items() if not k.startswith("POSIXLAKE_")}
    return subprocess.run(
        [EXE, *args],
        input=input,
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=120,
        check=False,
    )


def test_round_trip_through_the_installed_command(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    created = posixlake("create", path, "--schema", "id:Int64, name:String", "--primary-key", "id")
    assert created.returncode == 0, created.stderr
    inserted = posixlake(
        "insert",
        path,
        input='{"id": 1, "name": "ann"}\n{"id": 2, "name": "bob"}\n',
        env={"POSIXLAKE_ENGINE": "local"},
    )
    assert (inserted.returncode, inserted.stdout) == (0, "Inserted 2 rows (version 1)\n"), (
        inserted.stderr
    )
    query = posixlake(
        "query", path, "SELECT name FROM data ORDER BY id", "--json", "--engine", "local"
    )
    assert query.returncode == 0, query.stderr
    assert json.loads(query.stdout) == [{"name": "ann"}, {"name": "bob"}]


def test_operation_error_exits_1_with_one_line(tmp_path: Path) -> None:
    result = posixlake("query", str(tmp_path / "none"), "SELECT 1", "--engine", "local")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: no table at")


def test_bad_input_exits_1_without_traceback(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    assert posixlake("create", path, "--schema", "id:Int64 NOT NULL").returncode == 0
    result = posixlake("insert", path, "--engine", "local", input='[{"id": null}]')
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and result.stderr.startswith("Error: ")


def test_usage_error_exits_2() -> None:
    result = posixlake("query", "--format", "xml")
    assert result.returncode == 2
    assert "Usage: posixlake query" in result.stderr


def test_help_and_version() -> None:
    assert posixlake("--help").returncode == 0
    result = posixlake("--version")
    assert result.returncode == 0 and result.stdout.startswith("posixlake, version ")


def test_shell_completion_scripts() -> None:
    for shell in ("bash", "zsh", "fish"):
        result = posixlake(env={"_POSIXLAKE_COMPLETE": f"{shell}_source"})
        assert result.returncode == 0 and "_POSIXLAKE_COMPLETE" in result.stdout, shell
    result = posixlake(
        env={
            "_POSIXLAKE_COMPLETE": "bash_complete",
            "COMP_WORDS": "posixlake hea",
            "COMP_CWORD": "1",
        }
    )
    assert result.stdout.splitlines() == ["plain,health"]


def test_closed_stdout_is_not_a_traceback(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    assert posixlake("create", path, "--schema", "id:Int64").returncode == 0
    rows = "\n".join(json.dumps({"id": i}) for i in range(50_000))
    assert posixlake("insert", path, "--engine", "local", input=rows).returncode == 0
    assert EXE is not None
    proc = subprocess.Popen(
        [EXE, "query", path, "SELECT * FROM data ORDER BY id", "--engine", "local", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        head = proc.stdout.read(10)
        proc.stdout.close()
        err = proc.stderr.read()
    finally:
        proc.stdout.close()
        proc.stderr.close()
        code = proc.wait(timeout=60)
    assert head == b'[{"id": 0}'
    assert code in (0, 1)
    assert b"Traceback" not in err
