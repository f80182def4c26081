"""Azure Blob Storage and ADLS Gen2 (and Azurite): configuration, SDK clients and errors,
the container check of :func:`posixlake.storage.prepare`, and :class:`AzureStore`.
"""

from __future__ import annotations

import functools
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
    "client_id": ("azure_storage_client_id", "azure_client_id", "client_id"),
    "client_secret": ("azure_storage_client_secret", "azure_client_secret", "client_secret"),
    "tenant_id": (
        "azure_storage_tenant_id",
        "azure_storage_authority_id",
        "azure_tenant_id",
        "azure_authority_id",
        "tenant_id",
        "authority_id",
    ),
    "authority_host": ("azure_storage_authority_host", "azure_authority_host", "authority_host"),
    "use_fabric_endpoint": ("azure_use_fabric_endpoint", "use_fabric_endpoint"),
}

#: The environment variables of a service principal, as the original project names them.
CLIENT_ID_ENV: Final = "AZURE_STORAGE_CLIENT_ID"
CLIENT_SECRET_ENV: Final = "AZURE_STORAGE_CLIENT_SECRET"
TENANT_ID_ENV: Final = "AZURE_STORAGE_TENANT_ID"
AUTHORITY_HOST_ENV: Final = "AZURE_AUTHORITY_HOST"
_PRINCIPAL_VARS: Final = f"{CLIENT_ID_ENV} / {CLIENT_SECRET_ENV} / {TENANT_ID_ENV}"
#: Microsoft Entra ID's public-cloud authority (azure-identity's and object_store's default).
PUBLIC_AUTHORITY: Final = "https://login.microsoftonline.com"
#: The host suffix of Microsoft Fabric OneLake endpoints (``onelake.dfs.fabric.microsoft.com``).
FABRIC_SUFFIX: Final = ".fabric.microsoft.com"


@dataclass(frozen=True)
class AzureConfig:
    """Where and how to reach Azure Blob Storage / ADLS Gen2 (or Azurite).

    Fields left as None come from the environment when the options are built:
    ``AZURE_STORAGE_CONNECTION_STRING``, ``AZURE_STORAGE_ACCOUNT_NAME`` (or
    ``AZURE_STORAGE_ACCOUNT``), ``AZURE_STORAGE_ACCOUNT_KEY`` (or ``AZURE_STORAGE_KEY``),
    ``AZURE_STORAGE_SAS_TOKEN``, ``AZURE_STORAGE_ENDPOINT``, ``AZURE_STORAGE_USE_EMULATOR``,
    ``AZURITE_BLOB_STORAGE_URL``, the service principal's ``AZURE_STORAGE_CLIENT_ID``,
    ``AZURE_STORAGE_CLIENT_SECRET``, ``AZURE_STORAGE_TENANT_ID`` and ``AZURE_AUTHORITY_HOST``.
    See also :meth:`from_connection_string` and :meth:`emulator`.

    Credentials, first found wins: an account key, a SAS token, a service principal
    (Microsoft Entra ID client credentials; delta-rs and azure-storage-blob each fetch and
    refresh their own tokens), else azure-identity's ``DefaultAzureCredential`` for the
    blob SDK (environment, managed identity, Azure CLI...) and object_store's own chain
    (``AZURE_CLIENT_ID``/``AZURE_CLIENT_SECRET``/``AZURE_TENANT_ID``, managed identity)
    for delta-rs. Microsoft Fabric OneLake
    (``abfss://<workspace>@onelake.dfs.fabric.microsoft.com/<item>/Tables/<name>``)
    takes Entra ID tokens only: a service principal, or the chain.

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
        client_id, client_secret, tenant_id: a service principal (the secret is never
            shown in repr); all three or none.
        authority_host: the Entra ID authority (default ``https://login.microsoftonline.com``;
            sovereign clouds, Azure Stack, or a local test server). An authority given
            here is trusted as is: azure-identity skips its instance discovery, as
            delta-rs does.
        use_fabric_endpoint: address Microsoft Fabric OneLake
            (``https://<account>.blob.fabric.microsoft.com``); set by an ``abfs[s]://``
            URI on ``*.fabric.microsoft.com``.
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
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    tenant_id: str | None = None
    authority_host: str | None = None
    use_fabric_endpoint: bool = False
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
        if self.authority_host is not None:
            host = (
                self.authority_host
                if "://" in self.authority_host
                else f"https://{self.authority_host}"
            )
            parts = urlsplit(host)
            if parts.scheme != "https" or not parts.hostname:
                raise InvalidOperation(
                    f"the Azure authority host (authority_host, ${AUTHORITY_HOST_ENV}) must be "
                    f"an https URL, e.g. {PUBLIC_AUTHORITY}, not {self.authority_host!r}"
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
        for name in ("allow_http", "use_emulator", "create_container", "use_fabric_endpoint"):
            if name in known:
                known[name] = flag(known[name])
        conn = known.pop("connection_string", None)
        if conn:
            return cls.from_connection_string(str(conn), **known, options=rest)
        return cls(**known, options=rest)

    def for_uri(self, uri: str) -> AzureConfig:
        """Return this config with the account named in an ``abfs[s]://`` URI filled in.

        A URI on ``*.fabric.microsoft.com`` (OneLake) also sets ``use_fabric_endpoint``.
        """
        loc = parse_uri(uri)
        cfg = self
        if loc is not None and loc.account and not self.account_name and not self.use_emulator:
            cfg = replace(cfg, account_name=loc.account)
        host = (urlsplit(uri).hostname or "").lower() if loc is not None else ""
        if host.endswith(FABRIC_SUFFIX) and not cfg.use_fabric_endpoint:
            cfg = replace(cfg, use_fabric_endpoint=True)
        return cfg

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
            explicit = cfg.sas_token or cfg.client_id
            key = cfg.account_key or (None if explicit else EMULATOR_KEY)
        else:
            account = cfg.account_name or env_value(
                "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"
            )
            endpoint = cfg.endpoint or env_value("AZURE_STORAGE_ENDPOINT")
            key = cfg.account_key or env_value("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY")
        sas = cfg.sas_token or (None if key else env_value("AZURE_STORAGE_SAS_TOKEN"))
        client_id = cfg.client_id or env_value(CLIENT_ID_ENV)
        client_secret = cfg.client_secret or env_value(CLIENT_SECRET_ENV)
        tenant_id = cfg.tenant_id or env_value(TENANT_ID_ENV)
        authority = cfg.authority_host or env_value(AUTHORITY_HOST_ENV)
        if authority is not None and cfg.authority_host is None:
            cfg = replace(cfg, authority_host=authority)  # checks the value
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
            client_id=client_id,
            client_secret=client_secret,
            tenant_id=tenant_id,
        )

    @property
    def service_principal(self) -> tuple[str, str, str] | None:
        """``(tenant_id, client_id, client_secret)`` of a resolved config, or None.

        Raises:
            StorageAuthenticationError: only part of the service principal is given.
        """
        given = {
            f"{CLIENT_ID_ENV} (client_id)": self.client_id,
            f"{CLIENT_SECRET_ENV} (client_secret)": self.client_secret,
            f"{TENANT_ID_ENV} (tenant_id)": self.tenant_id,
        }
        missing = [name for name, value in given.items() if not value]
        if len(missing) == 3:
            return None
        if missing:
            raise StorageAuthenticationError(
                "the Azure service principal is incomplete: "
                f"{', '.join(missing)} missing; a service principal needs all of "
                f"{_PRINCIPAL_VARS}"
            )
        assert self.client_id and self.client_secret and self.tenant_id
        return self.tenant_id, self.client_id, self.client_secret

    @property
    def authority(self) -> str | None:
        """The configured authority host as an https URL without a trailing slash."""
        if not self.authority_host:
            return None
        host = self.authority_host
        return (host if "://" in host else f"https://{host}").rstrip("/")

    @property
    def credential_kind(self) -> str:
        """Which credentials a resolved config uses, for messages (no secrets)."""
        if self.account_key:
            return "the account key"
        if self.sas_token:
            return "the SAS token"
        if self.service_principal is not None:
            return f"the service principal {self.client_id!r} ({_PRINCIPAL_VARS})"
        return (
            "azure-identity's default credential chain (set "
            f"{_PRINCIPAL_VARS} for a service principal, or run 'az login', or use a "
            "managed identity)"
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
        if cfg.use_fabric_endpoint:
            return f"https://{cfg.account_name}.blob.fabric.microsoft.com"
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
        # A key or SAS token wins; only then is a (partial) principal looked at.
        principal = None if cfg.account_key or cfg.sas_token else cfg.service_principal
        if principal is not None:
            tenant, client, secret = principal
            opts["azure_client_id"] = client
            opts["azure_client_secret"] = secret
            opts["azure_tenant_id"] = tenant
            if cfg.authority:
                opts["azure_authority_host"] = cfg.authority
        if cfg.use_fabric_endpoint:
            opts["azure_use_fabric_endpoint"] = "true"
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
    elif (principal := cfg.service_principal) is not None:
        credential = _principal_credential(cfg, *principal)
    else:
        credential = _default_azure_credential(cfg)
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


def _identity_kwargs(cfg: AzureConfig) -> dict[str, Any]:
    """azure-identity keyword arguments for the configured authority host.

    An authority the user configured is trusted as is (no instance discovery against
    login.microsoftonline.com, which also lets private clouds and test servers work).
    """
    if not cfg.authority:
        return {}
    return {"authority": cfg.authority, "disable_instance_discovery": True}


def _principal_credential(cfg: AzureConfig, tenant: str, client: str, secret: str) -> Any:
    """Return azure-identity's ``ClientSecretCredential`` for a service principal.

    One credential per principal and authority for the process, so that its token cache
    serves every client made for it (a token is asked for about once an hour, not once
    per table opened).
    """
    return _cached_principal_credential(tenant, client, secret, cfg.authority)


@functools.lru_cache(maxsize=32)
def _cached_principal_credential(
    tenant: str, client: str, secret: str, authority: str | None
) -> Any:
    try:
        from azure.identity import ClientSecretCredential
    except ImportError as err:  # pragma: no cover - azure-identity is a dependency
        raise StorageAuthenticationError(
            f"a service principal ({_PRINCIPAL_VARS}) needs azure-identity: "
            "pip install azure-identity"
        ) from err
    extra: dict[str, Any] = (
        {"authority": authority, "disable_instance_discovery": True} if authority else {}
    )
    return ClientSecretCredential(tenant, client, secret, **extra)


def _default_azure_credential(cfg: AzureConfig) -> Any:
    """Return azure-identity's default credential when installed, else None (anonymous)."""
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        return None
    return DefaultAzureCredential(**_identity_kwargs(cfg))


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
            f"{what}: Azure rejected the credentials for {where} "
            f"({_credential_kind(cfg)}): {code or first}"
        )
    if isinstance(err, ax.HttpResponseError) and (
        err.status_code == 403 or code.startswith("Authorization")
    ):
        return PermissionDenied(f"{what}: Azure denied access to {where}: {code or first}")
    return StorageError(f"{what}: Azure error at {where}: {type(err).__name__}: {first}")


def _credential_kind(cfg: AzureConfig) -> str:
    try:
        return cfg.resolved().credential_kind
    except StorageAuthenticationError:
        return "an incomplete service principal"


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
    what = (
        f"abfss://{loc.bucket}@{cfg.account_name}.dfs.fabric.microsoft.com/{loc.prefix}"
        if cfg.use_fabric_endpoint and cfg.account_name
        else f"az://{loc.bucket}/{loc.prefix}"
    )
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
