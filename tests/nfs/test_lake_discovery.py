"""Lake discovery on S3 (moto_server) and Azure (Azurite): one delimiter listing per
directory down to the tables, never a listing of a table's data files or log.

The requests are counted by a small forwarding HTTP proxy run as a child process (the
delta-rs object store blocks with the GIL held, so the proxy cannot be a thread here)
between the discovery and the real server.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from nfs.lake.discovery import discover_tables, is_table
from posixlake import AzureConfig, DatabaseOps, S3Config
from posixlake.storage import storage_options_for
from tests.storage.servers import LocalServer

_PROXY = r"""
import http.client, http.server, sys, urllib.parse
target = urllib.parse.urlparse(sys.argv[1])
log = open(sys.argv[2], "a", buffering=1)
class Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def forward(self):
        log.write(f"{self.command} {self.path}\n")
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
        conn.request(self.command, self.path, body, dict(self.headers.items()))
        reply = conn.getresponse()
        data = reply.read()
        self.send_response(reply.status)
        for k, v in reply.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = forward
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
print(server.server_port, flush=True)
server.serve_forever()
"""


@dataclass
class Proxy:
    endpoint: str
    log: Path

    def requests(self) -> list[tuple[str, dict[str, str]]]:
        """The GETs forwarded so far: (path, query parameters)."""
        out = []
        for line in self.log.read_text().splitlines():
            method, _, target = line.partition(" ")
            if method == "GET":
                url = urllib.parse.urlparse(target)
                out.append((url.path, dict(urllib.parse.parse_qsl(url.query))))
        return out

    def clear(self) -> None:
        self.log.write_text("")


@pytest.fixture(
    params=[
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def backend(request: pytest.FixtureRequest) -> tuple[Literal["s3", "azure"], LocalServer]:
    server: LocalServer = request.getfixturevalue(
        "moto_server" if request.param == "s3" else "azurite_server"
    )
    return request.param, server


@pytest.fixture
def proxy(backend: tuple[str, LocalServer], tmp_path: Path) -> Iterator[Proxy]:
    _, server = backend
    log = tmp_path / "requests.log"
    log.write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROXY, server.endpoint, str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        path = urllib.parse.urlparse(server.endpoint).path
        yield Proxy(f"http://127.0.0.1:{port}{path}", log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def _config(kind: str, endpoint: str) -> Any:
    if kind == "s3":
        return S3Config(endpoint, "testing", "testing", "us-east-1")
    return AzureConfig.emulator(endpoint)


def _bucket(kind: str, endpoint: str) -> str:
    name = f"lake{uuid.uuid4().hex[:12]}"
    if kind == "s3":
        import boto3

        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=name)
    else:
        from azure.storage.blob import BlobServiceClient

        from posixlake.storage import EMULATOR_ACCOUNT, EMULATOR_KEY

        BlobServiceClient(
            account_url=endpoint,
            credential={"account_name": EMULATOR_ACCOUNT, "account_key": EMULATOR_KEY},
        ).create_container(name)
    return name


def _listed_prefix(kind: str, query: dict[str, str]) -> str | None:
    """The prefix a GET lists (None: not a listing)."""
    if kind == "s3" and query.get("list-type") == "2":
        return query.get("prefix", "")
    if kind == "azure" and query.get("comp") == "list":
        return query.get("prefix", "")
    return None


def test_object_store_discovery_lists_directories_not_data_files(
    backend: tuple[Literal["s3", "azure"], LocalServer], proxy: Proxy
) -> None:
    kind, server = backend
    bucket = _bucket(kind, server.endpoint)
    scheme = "s3" if kind == "s3" else "az"
    direct = _config(kind, server.endpoint)

    def table(path: str, inserts: int) -> None:
        with DatabaseOps.create(
            f"{scheme}://{bucket}/lake/{path}", {"id": "Int64"}, storage=direct, engine="local"
        ) as db:
            for i in range(inserts):
                db.insert([{"id": i}])

    table("sales", 6)  # data files at the table's top level
    table("ops/events", 1)
    table("ops/deep/logs", 1)
    table("sales/inner", 1)  # inside another table: part of its files, not shown
    table("_hidden/t", 1)
    root = f"{scheme}://{bucket}/lake"
    options = storage_options_for(root, _config(kind, proxy.endpoint))

    proxy.clear()
    assert discover_tables(root, options) == ["ops/deep/logs", "ops/events", "sales"]
    first = proxy.requests()
    prefix = "lake/"
    listings = [(q, _listed_prefix(kind, q)) for _, q in first]
    assert all(p is not None for _, p in listings), first  # nothing but listings
    full = sorted(p for q, p in listings if p is not None and q.get("delimiter") == "/")
    probes = sorted(p for q, p in listings if p is not None and q.get("delimiter") != "/")
    # one delimiter listing per directory that is not a table ...
    assert full == [prefix, prefix + "ops/", prefix + "ops/deep/"]
    # ... and one probe of _delta_log/ per directory found; a table is never listed
    assert probes == [
        prefix + d + "/_delta_log/"
        for d in ("ops", "ops/deep", "ops/deep/logs", "ops/events", "sales")
    ]
    # the cost does not follow the data files: more of them, the same requests
    table_uri = f"{scheme}://{bucket}/lake/sales"
    with DatabaseOps.open(table_uri, storage=direct, engine="local") as db:
        for i in range(6):
            db.insert([{"id": 100 + i}])
    proxy.clear()
    assert discover_tables(root, options) == ["ops/deep/logs", "ops/events", "sales"]
    assert sorted(str(q) for _, q in proxy.requests()) == sorted(str(q) for _, q in first)
    # the CLI's test of whether ROOT is a table or a lake (a probe of _delta_log/)
    assert is_table(table_uri, options)
    assert not is_table(root, options) and not is_table(f"{root}/ops", options)
