"""Which object-store configuration a URI uses, and the delta-rs storage options it gives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posixlake.errors import InvalidOperation
from posixlake.storage.azure import AzureConfig
from posixlake.storage.common import StorageConfig, parse_uri
from posixlake.storage.s3 import S3Config

__all__ = [
    "ObjectStoreConfig",
    "config_for",
    "storage_options_for",
]


ObjectStoreConfig = S3Config | AzureConfig


def config_for(
    uri: str, storage: StorageConfig | Mapping[str, Any] | None
) -> ObjectStoreConfig | None:
    """Return the S3 or Azure config for ``uri`` (None for a local path or another scheme).

    Raises:
        InvalidOperation: a config of the wrong kind for the URI (S3 config, Azure URI).
    """
    loc = parse_uri(uri)
    if loc is None:
        return None
    if loc.kind == "s3":
        if isinstance(storage, AzureConfig):
            raise InvalidOperation(f"{uri} is an S3 URI but the storage is an AzureConfig")
        if isinstance(storage, S3Config):
            return storage.resolved()
        if storage is None:
            return S3Config.from_env()
        raw = storage if isinstance(storage, Mapping) else storage.storage_options()
        return S3Config.from_options(raw).resolved()
    if isinstance(storage, S3Config):
        raise InvalidOperation(f"{uri} is an Azure URI but the storage is an S3Config")
    if isinstance(storage, AzureConfig):
        return storage.for_uri(uri).resolved()
    if storage is None:
        return AzureConfig.from_env().for_uri(uri).resolved()
    raw = storage if isinstance(storage, Mapping) else storage.storage_options()
    return AzureConfig.from_options(raw).for_uri(uri).resolved()


def storage_options_for(
    uri: str, storage: StorageConfig | Mapping[str, Any] | None
) -> dict[str, str] | None:
    """Return delta-rs storage options for ``uri`` from a config, a mapping or nothing.

    For S3 and Azure URIs the options always carry bounded timeouts and retries, and
    with ``storage=None`` credentials come from the environment.
    """
    config = config_for(uri, storage)
    if config is not None:
        return config.storage_options()
    if storage is None:
        return None
    if isinstance(storage, Mapping):
        return {str(k): str(v) for k, v in storage.items()}
    opts: Any = storage.storage_options()
    return dict(opts)
