"""Where tables live: local paths, S3 (and S3-compatible servers) and Azure Blob Storage.

``storage`` arguments of DatabaseOps accept ``None`` (a local path, or for object stores
credentials from the standard environment variables), an :class:`S3Config`, an
:class:`AzureConfig`, a mapping of delta-rs storage options, or any object with a
``storage_options()`` method.

Table I/O goes through delta-rs' object store. This module does what delta-rs does not,
with boto3 and azure-storage-blob: :func:`prepare` checks up front, within a bounded time,
that the endpoint answers, that the credentials are accepted and that the bucket or
container exists (creating it when asked); :func:`usage` lists what a table stores.
boto3 and Azure SDK errors are translated here, once. Byte-level file access for the
security and backup code (:class:`ObjectStore`, :func:`open_store`) lives here too.

Modules, by backend: :mod:`~posixlake.storage.common` (URIs, errors, option helpers),
:mod:`~posixlake.storage.files` (the :class:`ObjectStore` protocol and :func:`open_store`),
:mod:`~posixlake.storage.local`, :mod:`~posixlake.storage.s3`,
:mod:`~posixlake.storage.azure`, :mod:`~posixlake.storage.config` (which configuration a
URI uses) and :mod:`~posixlake.storage.prepare` (location checks and usage).

Concurrent writers: delta-rs (1.x) commits a version by writing its log file with a
conditional PUT (``If-None-Match: *``). AWS S3, MinIO, Cloudflare R2, moto and Azure
honour it, so two writers can never both create version N: the loser gets a commit
conflict, which delta-rs and :class:`~posixlake.delta.DeltaLog` retry on the new
version. No DynamoDB lock table is needed (delta-rs 1.x no longer supports one) and
``AWS_S3_ALLOW_UNSAFE_RENAME`` is never needed. An S3-compatible server without
conditional PUT support fails the first commit with a clear error instead of losing data.
"""

from posixlake.storage.arrowfs import table_filesystem
from posixlake.storage.azure import (
    EMULATOR_ACCOUNT,
    EMULATOR_KEY,
    EMULATOR_URL,
    AzureConfig,
    AzureStore,
    azure_call,
    azure_error,
    azure_service_client,
)
from posixlake.storage.common import (
    AZURE_SCHEMES,
    S3_SCHEMES,
    BucketNotFound,
    ObjectLocation,
    StorageAuthenticationError,
    StorageConfig,
    is_local,
    normalize_uri,
    parse_uri,
    table_uri,
)
from posixlake.storage.config import ObjectStoreConfig, config_for, storage_options_for
from posixlake.storage.files import (
    CHUNK_SIZE,
    TEMP_MARK,
    FileEntry,
    ObjectStore,
    StoreFactory,
    check_key,
    join_uri,
)
from posixlake.storage.local import LocalStore, fsync_dir
from posixlake.storage.opening import copy_file, open_store, register_scheme
from posixlake.storage.prepare import StorageUsage, list_objects, prepare, usage
from posixlake.storage.s3 import S3Config, S3Store, s3_call, s3_client, s3_error

__all__ = [
    "AZURE_SCHEMES",
    "CHUNK_SIZE",
    "EMULATOR_ACCOUNT",
    "EMULATOR_KEY",
    "EMULATOR_URL",
    "S3_SCHEMES",
    "TEMP_MARK",
    "AzureConfig",
    "AzureStore",
    "BucketNotFound",
    "FileEntry",
    "LocalStore",
    "ObjectLocation",
    "ObjectStore",
    "ObjectStoreConfig",
    "S3Config",
    "S3Store",
    "StorageAuthenticationError",
    "StorageConfig",
    "StorageUsage",
    "StoreFactory",
    "azure_call",
    "azure_error",
    "azure_service_client",
    "check_key",
    "config_for",
    "copy_file",
    "fsync_dir",
    "is_local",
    "join_uri",
    "list_objects",
    "normalize_uri",
    "open_store",
    "parse_uri",
    "prepare",
    "register_scheme",
    "s3_call",
    "s3_client",
    "s3_error",
    "storage_options_for",
    "table_filesystem",
    "table_uri",
    "usage",
]
