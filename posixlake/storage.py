"""Where tables live: local paths, S3 and Azure Blob Storage.

``storage`` arguments of DatabaseOps accept ``None`` (local path, or credentials from the
standard environment variables for object stores), a mapping of delta-rs storage options,
or a config object with a ``storage_options()`` method.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["StorageConfig", "is_local", "normalize_uri", "storage_options_for"]


class StorageConfig(Protocol):
    """A storage configuration that delta-rs can use."""

    def storage_options(self) -> dict[str, str]:
        """Return delta-rs / object_store options."""
        ...


def is_local(uri: str) -> bool:
    """Return whether ``uri`` is a local path (or ``file://`` URI)."""
    return "://" not in uri or uri.startswith("file://")


def normalize_uri(path: str | os.PathLike[str]) -> str:
    """Return an absolute local path or the URI unchanged."""
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text[len("file://") :]
    if is_local(text):
        return os.path.abspath(os.path.expanduser(text))
    return text.rstrip("/")


def storage_options_for(
    uri: str, storage: StorageConfig | Mapping[str, str] | None
) -> dict[str, str] | None:
    """Return delta-rs storage options for ``uri`` from a config, a mapping or nothing."""
    if storage is None:
        return None
    if isinstance(storage, Mapping):
        return {str(k): str(v) for k, v in storage.items()}
    opts: Any = storage.storage_options()
    return dict(opts)
