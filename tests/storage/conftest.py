"""Fixtures of the object-store suite: real moto_server (S3) and Azurite servers.

Servers start once per session on free local ports and are stopped by PID at the end.
A test needing a server skips, with the reason shown by ``-ra``, only when the server
program is not installed at all. ``lake`` gives each test a fresh bucket (S3) or
container (Azure), and runs the test once per backend.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from posixlake import AzureConfig, S3Config
from tests.storage.servers import (
    LocalServer,
    ServerUnavailable,
    make_iam_user,
    start_moto,
)

S3_KEY = "testing"
S3_SECRET = "testing"
REGION = "us-east-1"


@pytest.fixture(scope="session")
def moto_auth() -> Iterator[tuple[LocalServer, str, str]]:
    """A moto_server that checks credentials, and the key id and secret of a valid user."""
    try:
        server = start_moto(env={"INITIAL_NO_AUTH_ACTION_COUNT": "3"})
    except ServerUnavailable as err:
        pytest.skip(str(err))
    with server:
        key, secret = make_iam_user(server.endpoint)
        yield server, key, secret


def bucket_name() -> str:
    """Return a fresh bucket / container name (valid for both S3 and Azure)."""
    return f"pl-{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class Lake:
    """A fresh, empty bucket or container on a local server."""

    kind: Literal["s3", "azure"]
    endpoint: str
    bucket: str

    @property
    def scheme(self) -> str:
        """``s3`` or ``az``."""
        return "s3" if self.kind == "s3" else "az"

    def uri(self, name: str = "tbl") -> str:
        """Return the URI of a table ``name`` in this bucket."""
        return f"{self.scheme}://{self.bucket}/{name}"

    def config(self, **kw: Any) -> S3Config | AzureConfig:
        """Return a storage config for this server."""
        if self.kind == "s3":
            return S3Config(self.endpoint, S3_KEY, S3_SECRET, REGION, **kw)
        return AzureConfig.emulator(self.endpoint, **kw)

    def object_keys(self, prefix: str = "") -> list[str]:
        """List every object key under ``prefix`` with the SDK directly (sorted)."""
        if self.kind == "s3":
            client = s3(self.endpoint)
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            return sorted(str(o["Key"]) for p in pages for o in p.get("Contents", []))
        container = azure(self.endpoint).get_container_client(self.bucket)
        return sorted(str(b.name) for b in container.list_blobs(name_starts_with=prefix))

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Return key -> size of every object under ``prefix`` (SDK directly)."""
        if self.kind == "s3":
            client = s3(self.endpoint)
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            return {str(o["Key"]): int(o["Size"]) for p in pages for o in p.get("Contents", [])}
        container = azure(self.endpoint).get_container_client(self.bucket)
        return {str(b.name): int(b.size) for b in container.list_blobs(name_starts_with=prefix)}


def s3(endpoint: str) -> Any:
    """Return a plain boto3 S3 client for a moto endpoint."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name=REGION,
    )


def azure(endpoint: str) -> Any:
    """Return a plain BlobServiceClient for an Azurite endpoint."""
    from azure.storage.blob import BlobServiceClient

    from posixlake.storage import EMULATOR_ACCOUNT, EMULATOR_KEY

    return BlobServiceClient(
        account_url=endpoint,
        credential={"account_name": EMULATOR_ACCOUNT, "account_key": EMULATOR_KEY},
    )


def bucket_exists(kind: str, endpoint: str, bucket: str) -> bool:
    """Return whether a bucket / container exists (SDK directly)."""
    if kind == "s3":
        names = [b["Name"] for b in s3(endpoint).list_buckets().get("Buckets", [])]
        return bucket in names
    return bool(azure(endpoint).get_container_client(bucket).exists())


def make_bucket(kind: str, endpoint: str) -> str:
    """Create a fresh bucket / container and return its name."""
    name = bucket_name()
    if kind == "s3":
        s3(endpoint).create_bucket(Bucket=name)
    else:
        azure(endpoint).create_container(name)
    return name


@pytest.fixture(
    params=[
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def backend(request: pytest.FixtureRequest) -> tuple[Literal["s3", "azure"], str]:
    """Each backend in turn: (kind, endpoint) of its running server."""
    if request.param == "s3":
        return "s3", request.getfixturevalue("moto_server").endpoint
    return "azure", request.getfixturevalue("azurite_server").endpoint


@pytest.fixture
def lake(backend: tuple[Literal["s3", "azure"], str]) -> Lake:
    """A fresh bucket (S3) or container (Azure), once per backend."""
    kind, endpoint = backend
    return Lake(kind, endpoint, make_bucket(kind, endpoint))
