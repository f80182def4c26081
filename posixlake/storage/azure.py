"""Azure Blob Storage and ADLS Gen2 (and Azurite): configuration, SDK clients and errors,
the container check of :func:`posixlake.storage.prepare`, and :class:`AzureStore`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from posixlake.errors import (
    AlreadyExists,
    InvalidOperation,
    NetworkError,
    NotFound,
    PermissionDenied,
    PosixLakeError,
    StorageError,
)
from posixlake.storage.common import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_TIMEOUT,
    BucketNotFound,
    ObjectLocation,
    StorageAuthenticationError,
    check_timeouts,
    client_options,
    env_value,
    flag,
    parse_uri,
    split_options,
)
from posixlake.storage.files import CHUNK_SIZE, FileEntry, PrefixedStore

__all__ = [
    "EMULATOR_ACCOUNT",
    "EMULATOR_KEY",
    "EMULATOR_URL",
    "AzureConfig",
    "AzureStore",
    "azure_call",
    "azure_error",
    "azure_service_client",
    "prepare_azure",
]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Azurite's well-known development account (public, documented by Microsoft).
EMULATOR_ACCOUNT: Final = "devstoreaccount1"
EMULATOR_KEY: Final = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
EMULATOR_URL: Final = "http://127.0.0.1:10000"


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
        check_timeouts(self.connect_timeout, self.timeout, self.max_retries)
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
        if flag(parts.get("usedevelopmentstorage", "false")):
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
        known, rest = split_options(options, _AZURE_ALIASES)
        for name in ("allow_http", "use_emulator", "create_container"):
            if name in known:
                known[name] = flag(known[name])
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
        conn = env_value("AZURE_STORAGE_CONNECTION_STRING")
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
        use_emulator = cfg.use_emulator or flag(env_value("AZURE_STORAGE_USE_EMULATOR") or "false")
        account: str | None
        endpoint: str | None
        key: str | None
        if use_emulator:
            account = cfg.account_name or EMULATOR_ACCOUNT
            endpoint = cfg.endpoint or env_value("AZURITE_BLOB_STORAGE_URL") or EMULATOR_URL
            key = cfg.account_key or (None if cfg.sas_token else EMULATOR_KEY)
        else:
            account = cfg.account_name or env_value(
                "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"
            )
            endpoint = cfg.endpoint or env_value("AZURE_STORAGE_ENDPOINT")
            key = cfg.account_key or env_value("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY")
        sas = cfg.sas_token or (None if key else env_value("AZURE_STORAGE_SAS_TOKEN"))
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
            client_options(cfg.connect_timeout, cfg.timeout, cfg.max_retries, cfg.retry_timeout)
        )
        opts.update(cfg.options)
        return opts


# -- the Azure SDK -----------------------------------------------------------------------


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


def azure_call(cfg: AzureConfig, container: str, what: str, fn: Callable[[], _T]) -> _T:
    """Run an Azure SDK call, translating its errors (here and in :func:`posixlake.storage.prepare`)."""
    from azure.core.exceptions import AzureError

    try:
        return fn()
    except AzureError as err:
        raise azure_error(err, what=what, cfg=cfg, container=container) from err


def prepare_azure(loc: ObjectLocation, cfg: AzureConfig, *, create: bool) -> None:
    """Check (or create, with ``create``) the container of ``loc``; see :func:`posixlake.storage.prepare`."""
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


# -- the object store ----------------------------------------------------------------------


class AzureStore(PrefixedStore):
    """Blobs under ``az://container/prefix`` (also ``azure://``, ``abfs[s]://``), via azure-storage-blob.

    Storage options use delta-rs' names (``azure_storage_account_name``,
    ``azure_storage_account_key``, ``azure_storage_sas_token``, ``azure_storage_endpoint``,
    ...); missing ones come from the environment (see :class:`posixlake.storage.AzureConfig`).
    """

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        """Root the store at ``uri``."""
        loc = parse_uri(uri)
        if loc is None or loc.kind != "azure":
            raise InvalidOperation(f"not an Azure URI: {uri!r}")
        self._uri = uri.rstrip("/")
        self._bucket = loc.bucket
        self._prefix = loc.prefix
        self._config = AzureConfig.from_options(storage_options or {}).for_uri(uri).resolved()
        self._container: Any = azure_service_client(self._config).get_container_client(loc.bucket)

    def _error(self, err: Exception, what: str) -> Exception:
        from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

        raw_code: Any = getattr(err, "error_code", None)
        code = str(getattr(raw_code, "value", raw_code) or "")  # StorageErrorCode is an enum
        if isinstance(err, ResourceNotFoundError) and code != "ContainerNotFound":
            return NotFound(f"{what}: no such blob")
        if isinstance(err, ResourceExistsError) or code in ("BlobAlreadyExists", "ConditionNotMet"):
            return AlreadyExists(f"{what}: already exists")
        return azure_error(err, what=what, cfg=self._config, container=self._bucket)

    def _errors(self) -> tuple[type[Exception], ...]:
        from azure.core.exceptions import AzureError

        return (AzureError,)

    def _where(self, key: str) -> str:
        return f"az://{self._bucket}/{key}"

    def read_bytes(self, key: str) -> bytes:
        """Return the blob's content."""
        k = self._key(key)
        try:
            return bytes(self._container.download_blob(k).readall())
        except self._errors() as err:
            raise self._error(err, f"read {self._where(k)}") from err

    def read_chunks(self, key: str, *, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the blob's content in chunks of at most ``chunk_size`` bytes."""
        k = self._key(key)
        what = f"read {self._where(k)}"
        try:
            downloader = self._container.download_blob(k)
            parts = iter(downloader.chunks())
        except self._errors() as err:
            raise self._error(err, what) from err
        while True:
            try:
                part = next(parts, None)
            except self._errors() as err:
                raise self._error(err, what) from err
            if part is None:
                return
            view = bytes(part)
            for start in range(0, len(view), chunk_size):
                yield view[start : start + chunk_size]

    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Upload the blob (``If-None-Match: *`` when ``if_absent``)."""
        k = self._key(key)
        try:
            self._container.upload_blob(k, data, overwrite=not if_absent)
        except self._errors() as err:
            raise self._error(err, f"write {self._where(k)}") from err

    def write_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        """Upload ``chunks`` as blocks; the blob appears when the block list commits."""
        k = self._key(key)
        total = 0

        def counted() -> Iterator[bytes]:
            nonlocal total
            for chunk in chunks:
                total += len(chunk)
                yield bytes(chunk)

        try:
            self._container.upload_blob(k, counted(), overwrite=True)
        except self._errors() as err:
            raise self._error(err, f"write {self._where(k)}") from err
        return total

    def exists(self, key: str) -> bool:
        """Return whether the blob exists (one HEAD)."""
        k = self._key(key)
        try:
            return bool(self._container.get_blob_client(k).exists())
        except self._errors() as err:
            raise self._error(err, f"check {self._where(k)}") from err

    def has_any(self, prefix: str = "") -> bool:
        """List at most one blob under ``prefix``."""
        full = self._list_prefix(prefix)
        try:
            blobs = self._container.list_blobs(name_starts_with=full, results_per_page=1)
            return next(iter(blobs), None) is not None
        except self._errors() as err:
            raise self._error(err, f"list {self._where(full)}") from err

    def list(self, prefix: str = "") -> Iterator[FileEntry]:
        """Yield the blobs under ``prefix``."""
        full = self._list_prefix(prefix)
        strip = len(self._prefix) + 1 if self._prefix else 0
        what = f"list {self._where(full)}"
        try:
            blobs = iter(self._container.list_blobs(name_starts_with=full))
        except self._errors() as err:
            raise self._error(err, what) from err
        while True:
            try:
                blob = next(blobs, None)
            except self._errors() as err:
                raise self._error(err, what) from err
            if blob is None:
                return
            name = str(blob.name)[strip:]
            if name and not name.endswith("/"):
                modified = blob.last_modified
                yield FileEntry(name, int(blob.size), modified.timestamp() if modified else None)

    def delete(self, key: str) -> None:
        """Delete the blob; a missing blob is not an error."""
        k = self._key(key)
        try:
            self._container.delete_blob(k)
        except self._errors() as err:
            mapped = self._error(err, f"delete {self._where(k)}")
            if not isinstance(mapped, NotFound):
                raise mapped from err

    def delete_prefix(self, prefix: str = "") -> int:
        """Delete the blobs under ``prefix``."""
        keys = [e.key for e in self.list(prefix)]
        for key in keys:
            self.delete(key)
        return len(keys)

    def __repr__(self) -> str:
        return f"AzureStore({self._uri!r})"
