"""Where tables live: local paths, S3 (and S3-compatible servers) and Azure Blob Storage.

``storage`` arguments of DatabaseOps accept ``None`` (a local path, or for object stores
credentials from the standard environment variables), an :class:`S3Config`, an
:class:`AzureConfig`, a mapping of delta-rs storage options, or any object with a
``storage_options()`` method.

Table I/O goes through delta-rs' object store. This module does what delta-rs does not,
with boto3 and azure-storage-blob: :func:`prepare` checks up front, within a bounded time,
that the endpoint answers, that the credentials are accepted and that the bucket or
container exists (creating it when asked); :func:`usage` lists what a table stores.
boto3 and Azure SDK errors are translated here, once.

Concurrent writers: delta-rs (1.x) commits a version by writing its log file with a
conditional PUT (``If-None-Match: *``). AWS S3, MinIO, Cloudflare R2, moto and Azure
honour it, so two writers can never both create version N: the loser gets a commit
conflict, which delta-rs and :class:`~posixlake.delta.DeltaLog` retry on the new
version. No DynamoDB lock table is needed (delta-rs 1.x no longer supports one) and
``AWS_S3_ALLOW_UNSAFE_RENAME`` is never needed. An S3-compatible server without
conditional PUT support fails the first commit with a clear error instead of losing data.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Final, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

from posixlake.errors import (
    AuthenticationError,
    InvalidOperation,
    NetworkError,
    NotFound,
    PermissionDenied,
    PosixLakeError,
    StorageError,
)

__all__ = [
    "AzureConfig",
    "BucketNotFound",
    "ObjectLocation",
    "S3Config",
    "StorageAuthenticationError",
    "StorageConfig",
    "StorageUsage",
    "azure_call",
    "azure_error",
    "azure_service_client",
    "config_for",
    "is_local",
    "list_objects",
    "normalize_uri",
    "parse_uri",
    "prepare",
    "s3_call",
    "s3_client",
    "s3_error",
    "storage_options_for",
    "usage",
]

logger = logging.getLogger(__name__)

S3_SCHEMES: Final = frozenset({"s3", "s3a"})
AZURE_SCHEMES: Final = frozenset({"az", "azure", "abfs", "abfss"})

#: Azurite's well-known development account (public, documented by Microsoft).
EMULATOR_ACCOUNT: Final = "devstoreaccount1"
EMULATOR_KEY: Final = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
EMULATOR_URL: Final = "http://127.0.0.1:10000"

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


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidOperation(f"not a boolean storage option value: {value!r}")


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _millis(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def _client_options(
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


def _check_timeouts(connect_timeout: float, timeout: float | None, max_retries: int) -> None:
    if not connect_timeout > 0 or (timeout is not None and not timeout > 0):
        raise InvalidOperation("storage timeouts must be positive numbers of seconds")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise InvalidOperation("max_retries must be a non-negative integer")


def _split_options(
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


# -- S3 ----------------------------------------------------------------------------------

_S3_ALIASES: Final[Mapping[str, tuple[str, ...]]] = {
    "endpoint": (
        "aws_endpoint_url",
        "aws_endpoint",
        "endpoint_url",
        "endpoint",
        "aws_endpoint_url_s3",
    ),
    "access_key_id": ("aws_access_key_id", "access_key_id"),
    "secret_access_key": ("aws_secret_access_key", "secret_access_key"),
    "session_token": ("aws_session_token", "session_token", "aws_token", "token"),
    "region": ("aws_region", "region", "aws_default_region"),
    "profile": ("aws_profile", "profile"),
    "allow_http": ("aws_allow_http", "allow_http"),
    "virtual_hosted_style": ("aws_virtual_hosted_style_request", "virtual_hosted_style_request"),
    "create_bucket": ("create_bucket",),
    # delta-rs 1.x has no DynamoDB log store and never needs unsafe renames: drop both.
    "_ignored": (
        "aws_s3_locking_provider",
        "aws_s3_allow_unsafe_rename",
        "delta_dynamo_table_name",
    ),
}


@dataclass(frozen=True)
class S3Config:
    """Where and how to reach S3 or an S3-compatible server (MinIO, moto, R2, ...).

    Fields left as None come from the standard environment variables when the options
    are built: ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` /
    ``AWS_DEFAULT_REGION``. Without keys there either, boto3 and delta-rs use their
    default chains (profiles, instance roles).

    Args:
        endpoint: e.g. ``http://127.0.0.1:9000`` for a local server (None: AWS itself).
        access_key_id: the access key.
        secret_access_key: the secret key (never shown in repr).
        region: the bucket region (``us-east-1`` when given nowhere).
        session_token: a temporary session token.
        profile: a named profile of ``~/.aws/config`` / ``~/.aws/credentials`` (also
            ``$AWS_PROFILE``), used when no keys are given.
        create_bucket: create a missing bucket when a table is created.
        allow_http: allow plain-HTTP endpoints (default: True for an ``http://`` endpoint).
        virtual_hosted_style: ``bucket.host`` addressing instead of path style.
        connect_timeout: seconds to wait for a TCP connection.
        timeout: seconds per request (None: delta-rs' default).
        max_retries: retries of a failed request.
        retry_timeout: seconds after which retries stop.
        options: more delta-rs / object_store options; they win over the fields.
    """

    endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    region: str | None = None
    _: KW_ONLY
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    create_bucket: bool = False
    allow_http: bool | None = None
    virtual_hosted_style: bool = False
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    timeout: float | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT
    options: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False)

    def __post_init__(self) -> None:
        _check_timeouts(self.connect_timeout, self.timeout, self.max_retries)
        if self.endpoint is not None and not urlsplit(self.endpoint).scheme.startswith("http"):
            raise InvalidOperation(
                f"S3 endpoint must be an http(s) URL, e.g. http://127.0.0.1:9000, not {self.endpoint!r}"
            )

    @classmethod
    def from_env(cls, **overrides: Any) -> S3Config:
        """Return a config from the environment variables, with ``overrides`` on top."""
        return cls(**overrides).resolved()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> S3Config:
        """Return a config from delta-rs storage options (any key spelling delta-rs accepts)."""
        known, rest = _split_options(options, _S3_ALIASES)
        known.pop("_ignored", None)
        for name in ("allow_http", "virtual_hosted_style", "create_bucket"):
            if name in known:
                known[name] = _flag(known[name])
        return cls(**known, options=rest)

    def resolved(self) -> S3Config:
        """Return this config with None fields filled from the environment."""
        return replace(
            self,
            endpoint=self.endpoint or _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            access_key_id=self.access_key_id or _env("AWS_ACCESS_KEY_ID"),
            secret_access_key=self.secret_access_key or _env("AWS_SECRET_ACCESS_KEY"),
            session_token=self.session_token or _env("AWS_SESSION_TOKEN"),
            profile=self.profile or _env("AWS_PROFILE"),
            region=self.region
            or _env("AWS_REGION", "AWS_DEFAULT_REGION")
            or _profile_region(self.profile or _env("AWS_PROFILE"))
            or "us-east-1",
        )

    @property
    def http_allowed(self) -> bool:
        """Whether plain HTTP is allowed (explicitly, or by an ``http://`` endpoint)."""
        if self.allow_http is not None:
            return self.allow_http
        return bool(self.endpoint and self.endpoint.lower().startswith("http://"))

    def describe(self) -> str:
        """Return where requests go, for messages (no secrets)."""
        return self.resolved().endpoint or f"AWS S3 ({self.resolved().region})"

    def storage_options(self) -> dict[str, str]:
        """Return delta-rs / object_store options (environment fallbacks applied)."""
        cfg = self.resolved()
        opts: dict[str, str] = {"AWS_REGION": cfg.region or "us-east-1"}
        if cfg.endpoint:
            opts["AWS_ENDPOINT_URL"] = cfg.endpoint
        if cfg.access_key_id:
            opts["AWS_ACCESS_KEY_ID"] = cfg.access_key_id
        if cfg.secret_access_key:
            opts["AWS_SECRET_ACCESS_KEY"] = cfg.secret_access_key
        if cfg.session_token:
            opts["AWS_SESSION_TOKEN"] = cfg.session_token
        if cfg.profile and not cfg.access_key_id:
            # delta-rs reads profiles only through $AWS_PROFILE: resolve them here, with
            # boto3, so that both libraries use the same keys.
            opts.update(_profile_credentials(cfg.profile))
        if cfg.http_allowed:
            opts["AWS_ALLOW_HTTP"] = "true"
        if cfg.virtual_hosted_style:
            opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "true"
        # Commits are conditional PUTs (If-None-Match): safe with concurrent writers.
        opts["conditional_put"] = "etag"
        opts.update(
            _client_options(cfg.connect_timeout, cfg.timeout, cfg.max_retries, cfg.retry_timeout)
        )
        opts.update(cfg.options)
        return opts


def _profile_session(profile: str) -> Any:
    import boto3
    from botocore.exceptions import ProfileNotFound

    try:
        return boto3.session.Session(profile_name=profile)
    except ProfileNotFound as err:
        raise StorageAuthenticationError(f"AWS profile {profile!r} not found: {err}") from err


def _profile_region(profile: str | None) -> str | None:
    if not profile:
        return None
    region: str | None = _profile_session(profile).region_name
    return region


def _profile_credentials(profile: str) -> dict[str, str]:
    """Return the delta-rs key options of an AWS profile (resolved now, by boto3)."""
    creds = _profile_session(profile).get_credentials()
    if creds is None:
        raise StorageAuthenticationError(f"AWS profile {profile!r} has no credentials")
    frozen = creds.get_frozen_credentials()
    opts = {"AWS_ACCESS_KEY_ID": frozen.access_key, "AWS_SECRET_ACCESS_KEY": frozen.secret_key}
    if frozen.token:
        opts["AWS_SESSION_TOKEN"] = frozen.token
    return opts


# -- Azure -------------------------------------------------------------------------------

_AZURE_ALIASES: Final[Mapping[str, tuple[str, ...]]] = {
    "account_name": ("azure_storage_account_name", "account_name", "azure_storage_account"),
    "account_key": (
        "azure_storage_account_key",
        "account_key",
        "azure_storage_access_key",
        "access_key",
        "azure_storage_master_key",
        "master_key",
        "azure_storage_key",
    ),
    "sas_token": ("azure_storage_sas_token", "sas_token", "azure_storage_sas_key", "sas_key"),
    "endpoint": ("azure_storage_endpoint", "azure_endpoint", "endpoint"),
    "use_emulator": ("azure_storage_use_emulator", "use_emulator"),
    "allow_http": ("azure_allow_http", "allow_http"),
    "create_container": ("create_container", "create_bucket"),
    "connection_string": ("azure_storage_connection_string", "connection_string"),
}


@dataclass(frozen=True)
class AzureConfig:
    """Where and how to reach Azure Blob Storage / ADLS Gen2 (or Azurite).

    Fields left as None come from the environment when the options are built:
    ``AZURE_STORAGE_CONNECTION_STRING``, ``AZURE_STORAGE_ACCOUNT_NAME`` (or
    ``AZURE_STORAGE_ACCOUNT``), ``AZURE_STORAGE_ACCOUNT_KEY`` (or ``AZURE_STORAGE_KEY``),
    ``AZURE_STORAGE_SAS_TOKEN``, ``AZURE_STORAGE_ENDPOINT``, ``AZURE_STORAGE_USE_EMULATOR``
    and ``AZURITE_BLOB_STORAGE_URL``. See also :meth:`from_connection_string` and
    :meth:`emulator`.

    Args:
        account_name: the storage account.
        account_key: a shared key (never shown in repr).
        endpoint: the blob endpoint; for Azurite ``http://127.0.0.1:10000/devstoreaccount1``
            (an endpoint without a path gets ``/<account>`` appended, Azurite's path style).
        sas_token: a SAS token instead of a key.
        use_emulator: Azurite defaults: its well-known account and key, and
            ``$AZURITE_BLOB_STORAGE_URL`` or ``http://127.0.0.1:10000`` as endpoint.
        create_container: create a missing container when a table is created.
        allow_http: allow plain-HTTP endpoints (default: True for an ``http://`` endpoint).
        connect_timeout, timeout, max_retries, retry_timeout: as in :class:`S3Config`.
        options: more delta-rs / object_store options; they win over the fields.
    """

    account_name: str | None = None
    account_key: str | None = field(default=None, repr=False)
    endpoint: str | None = None
    _: KW_ONLY
    sas_token: str | None = field(default=None, repr=False)
    use_emulator: bool = False
    create_container: bool = False
    allow_http: bool | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    timeout: float | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT
    options: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False)

    def __post_init__(self) -> None:
        _check_timeouts(self.connect_timeout, self.timeout, self.max_retries)
        if self.endpoint is not None and not urlsplit(self.endpoint).scheme.startswith("http"):
            raise InvalidOperation(
                f"Azure endpoint must be an http(s) URL, e.g. http://127.0.0.1:10000/devstoreaccount1, not {self.endpoint!r}"
            )

    @classmethod
    def emulator(cls, endpoint: str | None = None, **overrides: Any) -> AzureConfig:
        """Return a config for Azurite at ``endpoint`` (default ``http://127.0.0.1:10000``)."""
        return cls(endpoint=endpoint, use_emulator=True, **overrides)

    @classmethod
    def from_connection_string(cls, connection_string: str, **overrides: Any) -> AzureConfig:
        """Return a config from an Azure storage connection string.

        Understands ``AccountName``, ``AccountKey``, ``SharedAccessSignature``,
        ``BlobEndpoint``, ``DefaultEndpointsProtocol``, ``EndpointSuffix`` and
        ``UseDevelopmentStorage=true`` (with ``DevelopmentStorageProxyUri``).

        Raises:
            InvalidOperation: a malformed connection string.
        """
        parts: dict[str, str] = {}
        for item in connection_string.strip().strip(";").split(";"):
            if not item.strip():
                continue
            key, eq, value = item.partition("=")
            if not eq:
                raise InvalidOperation(f"malformed Azure connection string item {key.strip()!r}")
            parts[key.strip().lower()] = value.strip()
        fields: dict[str, Any] = {}
        if _flag(parts.get("usedevelopmentstorage", "false")):
            fields["use_emulator"] = True
            proxy = parts.get("developmentstorageproxyuri")
            if proxy:
                fields["endpoint"] = proxy
        account = parts.get("accountname")
        if account:
            fields["account_name"] = account
        if parts.get("accountkey"):
            fields["account_key"] = parts["accountkey"]
        if parts.get("sharedaccesssignature"):
            fields["sas_token"] = parts["sharedaccesssignature"]
        if parts.get("blobendpoint"):
            fields["endpoint"] = parts["blobendpoint"]
        elif account and "endpointsuffix" in parts:
            protocol = parts.get("defaultendpointsprotocol", "https")
            fields["endpoint"] = f"{protocol}://{account}.blob.{parts['endpointsuffix']}"
        if not fields:
            raise InvalidOperation("the Azure connection string names no account or emulator")
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def from_env(cls, **overrides: Any) -> AzureConfig:
        """Return a config from the environment variables, with ``overrides`` on top."""
        return cls(**overrides).resolved()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> AzureConfig:
        """Return a config from delta-rs storage options (any key spelling delta-rs accepts)."""
        known, rest = _split_options(options, _AZURE_ALIASES)
        for name in ("allow_http", "use_emulator", "create_container"):
            if name in known:
                known[name] = _flag(known[name])
        conn = known.pop("connection_string", None)
        if conn:
            return cls.from_connection_string(str(conn), **known, options=rest)
        return cls(**known, options=rest)

    def for_uri(self, uri: str) -> AzureConfig:
        """Return this config with the account named in an ``abfs[s]://`` URI filled in."""
        loc = parse_uri(uri)
        if loc is not None and loc.account and not self.account_name and not self.use_emulator:
            return replace(self, account_name=loc.account)
        return self

    def resolved(self) -> AzureConfig:
        """Return this config with environment fallbacks and emulator defaults applied."""
        cfg = self
        conn = _env("AZURE_STORAGE_CONNECTION_STRING")
        if conn and not (cfg.account_name or cfg.use_emulator or cfg.endpoint):
            base = AzureConfig.from_connection_string(conn)
            cfg = replace(
                cfg,
                account_name=base.account_name,
                account_key=cfg.account_key or base.account_key,
                sas_token=cfg.sas_token or base.sas_token,
                endpoint=base.endpoint,
                use_emulator=base.use_emulator,
            )
        use_emulator = cfg.use_emulator or _flag(_env("AZURE_STORAGE_USE_EMULATOR") or "false")
        account: str | None
        endpoint: str | None
        key: str | None
        if use_emulator:
            account = cfg.account_name or EMULATOR_ACCOUNT
            endpoint = cfg.endpoint or _env("AZURITE_BLOB_STORAGE_URL") or EMULATOR_URL
            key = cfg.account_key or (None if cfg.sas_token else EMULATOR_KEY)
        else:
            account = cfg.account_name or _env(
                "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"
            )
            endpoint = cfg.endpoint or _env("AZURE_STORAGE_ENDPOINT")
            key = cfg.account_key or _env("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY")
        sas = cfg.sas_token or (None if key else _env("AZURE_STORAGE_SAS_TOKEN"))
        if endpoint and account:
            parts = urlsplit(endpoint)
            host_is_account = parts.hostname is not None and parts.hostname.startswith(
                f"{account}."
            )
            if not parts.path.strip("/") and not host_is_account:
                endpoint = f"{endpoint.rstrip('/')}/{account}"
        return replace(
            cfg,
            account_name=account,
            account_key=key,
            sas_token=sas,
            endpoint=endpoint.rstrip("/") if endpoint else None,
            use_emulator=use_emulator,
        )

    @property
    def http_allowed(self) -> bool:
        """Whether plain HTTP is allowed (explicitly, or by an ``http://`` endpoint)."""
        if self.allow_http is not None:
            return self.allow_http
        return bool(self.endpoint and self.endpoint.lower().startswith("http://"))

    @property
    def account_url(self) -> str:
        """The blob service URL (the endpoint, or ``https://<account>.blob.core.windows.net``)."""
        cfg = self.resolved()
        if cfg.endpoint:
            return cfg.endpoint
        if not cfg.account_name:
            raise StorageAuthenticationError(
                "Azure needs an account: AzureConfig(account_name=...), a connection string "
                "or AZURE_STORAGE_ACCOUNT_NAME"
            )
        return f"https://{cfg.account_name}.blob.core.windows.net"

    def describe(self) -> str:
        """Return where requests go, for messages (no secrets)."""
        try:
            return self.account_url
        except StorageAuthenticationError:
            return "Azure Blob Storage (no account configured)"

    def storage_options(self) -> dict[str, str]:
        """Return delta-rs / object_store options (environment fallbacks applied).

        The emulator is addressed by its explicit endpoint rather than object_store's
        emulator flag, which ignores the endpoint (so any Azurite port works).
        """
        cfg = self.resolved()
        opts: dict[str, str] = {}
        if cfg.account_name:
            opts["azure_storage_account_name"] = cfg.account_name
        if cfg.account_key:
            opts["azure_storage_account_key"] = cfg.account_key
        if cfg.sas_token:
            opts["azure_storage_sas_token"] = cfg.sas_token.lstrip("?")
        if cfg.endpoint:
            opts["azure_storage_endpoint"] = cfg.endpoint
        if cfg.http_allowed:
            opts["azure_allow_http"] = "true"
        opts.update(
            _client_options(cfg.connect_timeout, cfg.timeout, cfg.max_retries, cfg.retry_timeout)
        )
        opts.update(cfg.options)
        return opts


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


# -- SDK clients and error translation -----------------------------------------------------


def _s3_key(cfg: S3Config) -> tuple[Any, ...]:
    return (
        cfg.endpoint,
        cfg.access_key_id,
        cfg.secret_access_key,
        cfg.session_token,
        cfg.profile if not cfg.access_key_id else None,
        cfg.region,
        cfg.virtual_hosted_style,
        cfg.connect_timeout,
        cfg.timeout,
        cfg.max_retries,
    )


_client_lock = threading.Lock()


@functools.lru_cache(maxsize=32)
def _s3_client_cached(key: tuple[Any, ...]) -> Any:
    import boto3
    from botocore.config import Config

    endpoint, access_key, secret, token, profile, region, virtual, connect, timeout, retries = key
    config = Config(
        connect_timeout=connect,
        read_timeout=timeout if timeout is not None else 60,
        retries={"total_max_attempts": 1 + min(retries, 2), "mode": "standard"},
        s3={"addressing_style": "virtual" if virtual else "path"},
        signature_version="s3v4",
    )
    session = boto3.session.Session(profile_name=profile)
    return session.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret,
        aws_session_token=token,
        region_name=region,
        config=config,
    )


def s3_client(config: S3Config) -> Any:
    """Return a (cached, thread-safe) boto3 S3 client for ``config``."""
    cfg = config.resolved()
    with _client_lock:
        return _s3_client_cached(_s3_key(cfg))


def azure_service_client(config: AzureConfig) -> Any:
    """Return an azure-storage-blob ``BlobServiceClient`` for ``config``."""
    from azure.storage.blob import BlobServiceClient, LinearRetry

    cfg = config.resolved()
    credential: Any
    if cfg.account_key and cfg.account_name:
        credential = {"account_name": cfg.account_name, "account_key": cfg.account_key}
    elif cfg.sas_token:
        credential = cfg.sas_token.lstrip("?")
    else:
        credential = _default_azure_credential()
    return BlobServiceClient(
        account_url=cfg.account_url,
        credential=credential,
        connection_timeout=cfg.connect_timeout,
        read_timeout=cfg.timeout if cfg.timeout is not None else 60,
        # The SDK's default policy backs off 15 s and more: far too long for a check.
        retry_policy=LinearRetry(
            backoff=1, random_jitter_range=1, retry_total=min(cfg.max_retries, 2)
        ),
    )


def _default_azure_credential() -> Any:
    """Return azure-identity's default credential when installed, else None (anonymous)."""
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        return None
    return DefaultAzureCredential()


def s3_error(err: Exception, *, what: str, cfg: S3Config, bucket: str) -> PosixLakeError:
    """Translate a boto3 / botocore error into the posixlake tree."""
    from botocore import exceptions as bx

    where = f"{cfg.describe()}, bucket {bucket!r}"
    if isinstance(err, bx.NoCredentialsError | bx.PartialCredentialsError):
        return StorageAuthenticationError(
            f"{what}: no S3 credentials for {where}: give S3Config(access_key_id=..., "
            "secret_access_key=...) or set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(
        err,
        bx.EndpointConnectionError
        | bx.ConnectTimeoutError
        | bx.ReadTimeoutError
        | bx.ConnectionClosedError
        | bx.HTTPClientError,
    ):
        return NetworkError(f"{what}: S3 endpoint {cfg.describe()} is unreachable: {err}")
    if isinstance(err, bx.ClientError):
        error = err.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        message = str(error.get("Message", "")) or code
        if code in ("NoSuchBucket", "404", "NotFound"):
            return BucketNotFound(
                f"{what}: S3 bucket {bucket!r} does not exist at {cfg.describe()} "
                "(pass create_bucket=True to create it)"
            )
        if code in (
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "InvalidToken",
            "ExpiredToken",
            "InvalidClientTokenId",
            "AuthorizationHeaderMalformed",
        ):
            return StorageAuthenticationError(
                f"{what}: S3 rejected the credentials for {where}: {code}: {message}"
            )
        if code in ("AccessDenied", "AllAccessDisabled", "403") or status == 403:
            return PermissionDenied(f"{what}: S3 denied access to {where}: {code}: {message}")
        return StorageError(f"{what}: S3 error at {where}: {code}: {message}")
    return StorageError(f"{what}: S3 error at {where}: {type(err).__name__}: {err}")


def azure_error(err: Exception, *, what: str, cfg: AzureConfig, container: str) -> PosixLakeError:
    """Translate an azure-core / azure-storage-blob error into the posixlake tree."""
    from azure.core import exceptions as ax

    where = f"{cfg.describe()}, container {container!r}"
    raw_code: Any = getattr(err, "error_code", None)
    code = str(getattr(raw_code, "value", raw_code) or "")  # StorageErrorCode is an enum
    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    if isinstance(err, ax.ServiceRequestError | ax.ServiceResponseError):
        return NetworkError(f"{what}: Azure endpoint {cfg.describe()} is unreachable: {first}")
    if isinstance(err, ax.ResourceNotFoundError):
        if code in ("ContainerNotFound", "") or "container" in code.lower():
            return BucketNotFound(
                f"{what}: Azure container {container!r} does not exist at {cfg.describe()} "
                "(pass create_bucket=True to create it)"
            )
        return NotFound(f"{what}: not found at {where}: {code or first}")
    if (
        isinstance(err, ax.ClientAuthenticationError)
        or code
        in ("AuthenticationFailed", "InvalidAuthenticationInfo", "NoAuthenticationInformation")
        or "failed to authenticate" in first.lower()  # Azurite says AuthorizationFailure
    ):
        return StorageAuthenticationError(
            f"{what}: Azure rejected the credentials for {where}: {code or first}"
        )
    if isinstance(err, ax.HttpResponseError) and (
        err.status_code == 403 or code.startswith("Authorization")
    ):
        return PermissionDenied(f"{what}: Azure denied access to {where}: {code or first}")
    return StorageError(f"{what}: Azure error at {where}: {type(err).__name__}: {first}")


_T = TypeVar("_T")


def s3_call(cfg: S3Config, bucket: str, what: str, fn: Callable[[], _T]) -> _T:
    """Run a boto3 call, translating its errors (for this module and ``_objstore``)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn()
    except (BotoCoreError, ClientError) as err:
        raise s3_error(err, what=what, cfg=cfg, bucket=bucket) from err


def azure_call(cfg: AzureConfig, container: str, what: str, fn: Callable[[], _T]) -> _T:
    """Run an Azure SDK call, translating its errors (for this module and ``_objstore``)."""
    from azure.core.exceptions import AzureError

    try:
        return fn()
    except AzureError as err:
        raise azure_error(err, what=what, cfg=cfg, container=container) from err


# -- prepare -----------------------------------------------------------------------------


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
        _prepare_s3(loc, config, create=create and wanted)
    else:
        wanted = config.create_container if create_bucket is None else create_bucket
        _prepare_azure(loc, config, create=create and wanted)


def _prepare_s3(loc: ObjectLocation, cfg: S3Config, *, create: bool) -> None:
    client = s3_client(cfg)
    what = f"s3://{loc.bucket}/{loc.prefix}"
    try:
        s3_call(
            cfg,
            loc.bucket,
            what,
            lambda: client.list_objects_v2(Bucket=loc.bucket, Prefix=loc.dir_prefix, MaxKeys=1),
        )
        return
    except BucketNotFound:
        if not create:
            raise
    logger.info("creating S3 bucket %s at %s", loc.bucket, cfg.describe())
    params: dict[str, Any] = {"Bucket": loc.bucket}
    if cfg.region and cfg.region != "us-east-1":
        params["CreateBucketConfiguration"] = {"LocationConstraint": cfg.region}
    try:
        s3_call(
            cfg, loc.bucket, f"create bucket {loc.bucket}", lambda: client.create_bucket(**params)
        )
    except StorageError as err:
        cause = err.__cause__
        code = getattr(cause, "response", {}).get("Error", {}).get("Code", "")
        if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise


def _prepare_azure(loc: ObjectLocation, cfg: AzureConfig, *, create: bool) -> None:
    from azure.core.exceptions import ResourceExistsError

    container = azure_service_client(cfg).get_container_client(loc.bucket)
    what = f"az://{loc.bucket}/{loc.prefix}"
    try:
        azure_call(
            cfg,
            loc.bucket,
            what,
            lambda: next(
                iter(container.list_blobs(name_starts_with=loc.dir_prefix, results_per_page=1)),
                None,
            ),
        )
        return
    except BucketNotFound:
        if not create:
            raise
    logger.info("creating Azure container %s at %s", loc.bucket, cfg.describe())
    try:
        azure_call(cfg, loc.bucket, f"create container {loc.bucket}", container.create_container)
    except StorageError as err:
        if not isinstance(err.__cause__, ResourceExistsError):
            raise


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
