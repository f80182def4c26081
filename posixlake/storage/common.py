"""URIs, errors and option helpers shared by every storage backend."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol
from urllib.parse import urlsplit

from posixlake.errors import AuthenticationError, InvalidOperation, NotFound, StorageError

__all__ = [
    "AZURE_SCHEMES",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_RETRY_TIMEOUT",
    "S3_SCHEMES",
    "BucketNotFound",
    "ObjectLocation",
    "StorageAuthenticationError",
    "StorageConfig",
    "check_timeouts",
    "client_options",
    "env_value",
    "flag",
    "is_local",
    "normalize_uri",
    "parse_uri",
    "split_options",
    "table_uri",
]


S3_SCHEMES: Final = frozenset({"s3", "s3a"})
AZURE_SCHEMES: Final = frozenset({"az", "azure", "abfs", "abfss"})

DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_MAX_RETRIES: Final = 3
DEFAULT_RETRY_TIMEOUT: Final = 30.0

_TRUE: Final = frozenset({"1", "true", "yes", "on", "y", "t"})
_FALSE: Final = frozenset({"0", "false", "no", "off", "n", "f", ""})


class StorageConfig(Protocol):
    """A storage configuration that delta-rs can use."""

    def storage_options(self) -> dict[str, str]:
        """Return delta-rs / object_store options."""
        ...


class BucketNotFound(NotFound, StorageError):
    """The S3 bucket or Azure container does not exist (and was not to be created)."""


class StorageAuthenticationError(AuthenticationError, StorageError):
    """The object store rejected (or could not find) the credentials."""


# -- URIs ------------------------------------------------------------------------------


def is_local(uri: str) -> bool:
    """Return whether ``uri`` is a local path (or ``file://`` URI)."""
    return "://" not in uri or uri.startswith("file://")


def normalize_uri(path: str | os.PathLike[str]) -> str:
    """Return an absolute local path or the URI unchanged (without a trailing slash)."""
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text[len("file://") :]
    if is_local(text):
        return os.path.abspath(os.path.expanduser(text))
    return text.rstrip("/")


_PERCENT_ESCAPE: Final = re.compile(r"%[0-9A-Fa-f]{2}")


def table_uri(path: str | os.PathLike[str]) -> str:
    """Return :func:`normalize_uri` of a table's location.

    Raises:
        InvalidOperation: a local path holding a ``%XX`` escape: delta-rs writes a table's
            first commit at the literal path and then reads it percent-decoded (``a%20b``
            as ``a b``), so such a table could be made half and never opened.
    """
    uri = normalize_uri(path)
    if is_local(uri) and _PERCENT_ESCAPE.search(uri):
        raise InvalidOperation(
            f"{uri}: a table cannot live at a local path holding a %XX escape (delta-rs "
            "reads the path percent-decoded, '%20' as ' '): use a directory name without one"
        )
    return uri


@dataclass(frozen=True)
class ObjectLocation:
    """A table's place in an object store.

    Attributes:
        kind: ``"s3"`` or ``"azure"``.
        bucket: the S3 bucket or Azure container.
        prefix: the key prefix of the table, without leading or trailing ``/`` ("" at the root).
        account: the Azure account named in an ``abfs[s]://container@account...`` URI.
    """

    kind: Literal["s3", "azure"]
    bucket: str
    prefix: str
    account: str | None = None

    def key(self, relative: str) -> str:
        """Return the object key of ``relative`` (a path inside the table)."""
        rel = relative.lstrip("/")
        return f"{self.prefix}/{rel}" if self.prefix else rel

    @property
    def dir_prefix(self) -> str:
        """The prefix to list the table's objects with (ends in ``/`` unless at the root)."""
        return f"{self.prefix}/" if self.prefix else ""


def parse_uri(uri: str) -> ObjectLocation | None:
    """Return where ``uri`` points in S3 or Azure, or None for a local path or other scheme.

    Accepts ``s3://bucket/prefix``, ``s3a://...``, ``az://container/prefix``,
    ``azure://...`` and ``abfs[s]://container@account.dfs.core.windows.net/prefix``.

    Raises:
        InvalidOperation: an S3 or Azure URI without a bucket or container.
    """
    if is_local(uri):
        return None
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    prefix = parts.path.strip("/")
    if scheme in S3_SCHEMES:
        if not parts.netloc:
            raise InvalidOperation(f"{uri}: an S3 URI needs a bucket (s3://bucket/path)")
        return ObjectLocation("s3", parts.netloc, prefix)
    if scheme in AZURE_SCHEMES:
        container, at, host = parts.netloc.partition("@")
        if not container:
            raise InvalidOperation(
                f"{uri}: an Azure URI needs a container (az://container/path or "
                "abfss://container@account.dfs.core.windows.net/path)"
            )
        account = host.split(".", 1)[0] if at and host else None
        return ObjectLocation("azure", container, prefix, account or None)
    return None


# -- configuration helpers ---------------------------------------------------------------


def flag(value: Any) -> bool:
    """Return a storage option value as a bool.

    Raises:
        InvalidOperation: not a boolean spelling.
    """
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidOperation(f"not a boolean storage option value: {value!r}")


def env_value(*names: str) -> str | None:
    """Return the first non-empty environment variable of ``names``, or None."""
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _millis(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def client_options(
    connect_timeout: float, timeout: float | None, max_retries: int, retry_timeout: float
) -> dict[str, str]:
    """object_store client options that bound how long an unreachable endpoint can stall."""
    opts = {
        "connect_timeout": _millis(connect_timeout),
        "max_retries": str(max_retries),
        "retry_timeout": _millis(retry_timeout),
    }
    if timeout is not None:
        opts["timeout"] = _millis(timeout)
    return opts


def check_timeouts(connect_timeout: float, timeout: float | None, max_retries: int) -> None:
    """Check timeout and retry settings.

    Raises:
        InvalidOperation: a non-positive timeout or a negative or non-int ``max_retries``.
    """
    if not connect_timeout > 0 or (timeout is not None and not timeout > 0):
        raise InvalidOperation("storage timeouts must be positive numbers of seconds")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise InvalidOperation("max_retries must be a non-negative integer")


def split_options(
    options: Mapping[str, Any], aliases: Mapping[str, tuple[str, ...]]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Split delta-rs options into known fields (by alias, any case) and the rest."""
    lookup = {alias.lower(): name for name, names in aliases.items() for alias in names}
    known: dict[str, Any] = {}
    rest: dict[str, str] = {}
    for key, value in options.items():
        name = lookup.get(str(key).lower())
        if name is None:
            rest[str(key)] = str(value)
        elif value is not None and value != "":
            known[name] = value
    return known, rest
