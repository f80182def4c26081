"""The storage flags against real object stores: moto_server (S3) and Azurite (Azure)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, rows
from tests.storage.servers import LocalServer


@pytest.fixture(
    params=[
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def remote(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, list[str]]:
    """A fresh bucket URI and the flags that reach it (secrets only in the environment)."""
    name = f"cli-{uuid.uuid4().hex[:12]}"
    if request.param == "s3":
        server: LocalServer = request.getfixturevalue("moto_server")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        return f"s3://{name}", ["--s3-endpoint", server.endpoint, "--s3-region", "us-east-1"]
    server = request.getfixturevalue("azurite_server")
    return f"az://{name}", ["--azure-emulator", "--azure-endpoint", server.endpoint]


def test_table_on_an_object_store(run: Cli, remote: tuple[str, list[str]], tmp_path: Path) -> None:
    bucket, flags = remote
    table = f"{bucket}/sales"
    run.fails(1, "create", table, "--schema", "id:Int64, item:String", *flags)
    run.ok(
        "create", table, "--schema", "id:Int64, item:String", "-k", "id", "--create-bucket", *flags
    )
    run.ok(
        "insert",
        table,
        "--engine",
        "local",
        *flags,
        input='[{"id": 1, "item": "a"}, {"id": 2, "item": "b"}]',
    )
    out = run.ok(
        "query", table, "SELECT * FROM data ORDER BY id", "--json", "--engine", "local", *flags
    ).stdout
    assert json.loads(out) == [{"id": 1, "item": "a"}, {"id": 2, "item": "b"}]
    info = json.loads(run.ok("info", table, "--json", *flags).stdout)
    assert info["table"] == table and info["rows"] == 2 and info["version"] == 1
    run.ok("backup", table, f"{bucket}/backups/full", *flags)
    assert (
        json.loads(run.ok("verify", f"{bucket}/backups/full", "--json", *flags).stdout)["ok"]
        is True
    )
    local = str(tmp_path / "restored")
    run.ok("restore", f"{bucket}/backups/full", local, *flags)
    assert rows(local) == [{"id": 1, "item": "a"}, {"id": 2, "item": "b"}]


def test_missing_bucket_is_an_operation_error(run: Cli, remote: tuple[str, list[str]]) -> None:
    bucket, flags = remote
    run.fails(1, "info", f"{bucket}/none", *flags)


def test_bad_endpoint_is_a_usage_error(run: Cli) -> None:
    run.fails(2, "info", "s3://bucket/t", "--s3-endpoint", "ftp://example.com")
