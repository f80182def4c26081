"""Checks of an object-store location before delta-rs touches it, and what a table stores."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from posixlake.errors import InvalidOperation
from posixlake.storage.azure import azure_call, azure_service_client, prepare_azure
from posixlake.storage.common import StorageConfig, parse_uri
from posixlake.storage.config import config_for
from posixlake.storage.s3 import S3Config, prepare_s3, s3_call, s3_client

__all__ = [
    "StorageUsage",
    "list_objects",
    "prepare",
    "usage",
]


def prepare(
    uri: str,
    storage: StorageConfig | Mapping[str, Any] | None,
    *,
    create: bool,
    create_bucket: bool | None = None,
) -> None:
    """Check an object-store location before delta-rs touches it.

    Lists at most one object under the table prefix, which proves within a bounded time
    (short connect timeout, few retries) that the endpoint answers, that the
    credentials are accepted and that the bucket or container exists. With ``create``
    and ``create_bucket`` (or the config's ``create_bucket`` / ``create_container``) a
    missing bucket or container is created. Nothing is written otherwise. A local path
    or another scheme is left alone.

    Args:
        uri: the table URI.
        storage: the ``storage`` argument given to DatabaseOps.
        create: whether a table is about to be created.
        create_bucket: create a missing bucket/container (None: as the config says).

    Raises:
        NetworkError: the endpoint cannot be reached (the message names it).
        StorageAuthenticationError: credentials are missing or rejected.
        PermissionDenied: the credentials may not list the bucket or container.
        BucketNotFound: the bucket or container does not exist and is not to be created.
    """
    loc = parse_uri(uri)
    config = config_for(uri, storage)
    if loc is None or config is None:
        return
    if isinstance(config, S3Config):
        wanted = config.create_bucket if create_bucket is None else create_bucket
        prepare_s3(loc, config, create=create and wanted)
    else:
        wanted = config.create_container if create_bucket is None else create_bucket
        prepare_azure(loc, config, create=create and wanted)


# -- usage -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StorageUsage:
    """What a table stores, by listing (active, superseded and log files alike).

    Attributes:
        objects: every object under the table prefix.
        bytes: their total size.
        log_objects: objects under ``_delta_log/``.
        log_bytes: their total size.
    """

    objects: int
    bytes: int
    log_objects: int
    log_bytes: int


def list_objects(
    uri: str, storage: StorageConfig | Mapping[str, Any] | None = None
) -> Iterator[tuple[str, int]]:
    """Yield ``(path relative to the table, size)`` of every object under an object-store table.

    Raises:
        InvalidOperation: ``uri`` is not an S3 or Azure URI.
        NetworkError, StorageAuthenticationError, PermissionDenied, BucketNotFound: as in
            :func:`prepare`.
    """
    loc = parse_uri(uri)
    config = config_for(uri, storage)
    if loc is None or config is None:
        raise InvalidOperation(f"{uri} is not an S3 or Azure location")
    cut = len(loc.dir_prefix)
    if isinstance(config, S3Config):
        client = s3_client(config)
        pages = s3_call(
            config,
            loc.bucket,
            f"list {uri}",
            lambda: iter(
                client.get_paginator("list_objects_v2").paginate(
                    Bucket=loc.bucket, Prefix=loc.dir_prefix
                )
            ),
        )
        while True:
            page = s3_call(config, loc.bucket, f"list {uri}", lambda: next(pages, None))
            if page is None:
                return
            for obj in page.get("Contents", []):
                yield str(obj["Key"])[cut:], int(obj["Size"])
    else:
        container = azure_service_client(config).get_container_client(loc.bucket)
        blobs = azure_call(
            config,
            loc.bucket,
            f"list {uri}",
            lambda: iter(container.list_blobs(name_starts_with=loc.dir_prefix)),
        )
        while True:
            blob = azure_call(config, loc.bucket, f"list {uri}", lambda: next(blobs, None))
            if blob is None:
                return
            yield str(blob.name)[cut:], int(blob.size)


def usage(uri: str, storage: StorageConfig | Mapping[str, Any] | None = None) -> StorageUsage:
    """Return how many objects and bytes an object-store table stores (by listing).

    Raises:
        InvalidOperation: ``uri`` is not an S3 or Azure URI.
    """
    objects = total = log_objects = log_bytes = 0
    for path, size in list_objects(uri, storage):
        objects += 1
        total += size
        if path.startswith("_delta_log/"):
            log_objects += 1
            log_bytes += size
    return StorageUsage(objects, total, log_objects, log_bytes)
