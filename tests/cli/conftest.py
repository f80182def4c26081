"""Fixtures of the CLI tests: click's CliRunner over real tables in tmp_path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import cli
from posixlake import DatabaseOps

ROWS = [
    {"id": 1, "item": "apple", "qty": 3},
    {"id": 2, "item": "pear", "qty": 5},
    {"id": 3, "item": "fig", "qty": None},
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the user's environment out of the tests."""
    for name in (
        "POSIXLAKE_ENGINE",
        "POSIXLAKE_USER",
        "POSIXLAKE_PASSWORD",
        "POSIXLAKE_SPARK_MASTER",
        "POSIXLAKE_SPARK_REMOTE",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ENDPOINT",
    ):
        monkeypatch.delenv(name, raising=False)


class Cli:
    """Runs ``posixlake`` in-process with CliRunner (stdout and stderr apart)."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(
        self, *args: str, input: str | bytes | None = None, env: dict[str, str] | None = None
    ) -> Result:
        """Invoke the command line; exceptions other than click's propagate."""
        return self.runner.invoke(
            cli, list(args), input=input, env=env, catch_exceptions=False, prog_name="posixlake"
        )

    def ok(self, *args: str, input: str | bytes | None = None) -> Result:
        """Invoke and assert exit 0."""
        result = self(*args, input=input)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
        return result

    def fails(self, code: int, *args: str, input: str | bytes | None = None) -> Result:
        """Invoke and assert exit ``code`` with a one-line error and no traceback."""
        result = self(*args, input=input)
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        if code == 1:
            # one error line, last (a progress label may come before it off a terminal)
            lines = result.stderr.strip().splitlines()
            assert lines and lines[-1].startswith("Error: "), result.stderr
            assert [ln for ln in lines if ln.startswith("Error")] == lines[-1:], result.stderr
            labels = ("Importing ", "Backing up ", "Restoring ", "Verifying ", "Warning: ")
            assert all(ln.startswith(labels) for ln in lines[:-1]), result.stderr
        return result


@pytest.fixture
def run() -> Cli:
    """The ``posixlake`` command, run in-process."""
    return Cli()


@pytest.fixture
def table(tmp_path: Path) -> str:
    """A table (id Int64 primary key, item String NOT NULL, qty Int32) with three rows."""
    path = str(tmp_path / "sales")
    with DatabaseOps.create(
        path,
        [("id", "Int64"), ("item", "String", False), ("qty", "Int32")],
        primary_key="id",
        engine="local",
    ) as db:
        db.insert(ROWS)
    return path


def rows(path: str, sql: str = "SELECT * FROM data ORDER BY id") -> list[dict[str, object]]:
    """Read the table through the Python API."""
    with DatabaseOps.open(path, engine="local") as db:
        return db.query(sql).to_pylist()


def version(path: str) -> int:
    """The table's latest version."""
    with DatabaseOps.open(path, engine="local") as db:
        return db.version


def unchanged(path: str, before_version: int, before_rows: Sequence[dict[str, object]]) -> None:
    """Assert that a failed write committed nothing."""
    assert version(path) == before_version
    assert rows(path) == list(before_rows)
