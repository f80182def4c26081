"""S3 and S3-compatible servers (MinIO, moto, R2): configuration, boto3 clients and errors,
the bucket check of :func:`posixlake.storage.prepare`, and :class:`S3Store`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import threading
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
from posixlake.storage.files import (
    CHUNK_SIZE,
    ChunkReader,
    FileEntry,
    PrefixedStore,
)

__all__ = [
    "S3Config",
    "S3Store",
    "prepare_s3",
    "s3_call",
    "s3_client",
    "s3_error",
]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

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
        check_timeouts(self.connect_timeout, self.timeout, self.max_retries)
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
        known, rest = split_options(options, _S3_ALIASES)
        known.pop("_ignored", None)
        for name in ("allow_http", "virtual_hosted_style", "create_bucket"):
            if name in known:
                known[name] = flag(known[name])
        return cls(**known, options=rest)

    def resolved(self) -> S3Config:
        """Return this config with None fields filled from the environment."""
        return replace(
            self,
            endpoint=self.endpoint or env_value("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            access_key_id=self.access_key_id or env_value("AWS_ACCESS_KEY_ID"),
            secret_access_key=self.secret_access_key or env_value("AWS_SECRET_ACCESS_KEY"),
            session_token=self.session_token or env_value("AWS_SESSION_TOKEN"),
            profile=self.profile or env_value("AWS_PROFILE"),
            region=self.region
            or env_value("AWS_REGION", "AWS_DEFAULT_REGION")
            or _profile_region(self.profile or env_value("AWS_PROFILE"))
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
            client_options(cfg.connect_timeout, cfg.timeout, cfg.max_retries, cfg.retry_timeout)
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


# -- boto3 -----------------------------------------------------------------------------


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


def s3_call(cfg: S3Config, bucket: str, what: str, fn: Callable[[], _T]) -> _T:
    """Run a boto3 call, translating its errors (here and in :func:`posixlake.storage.prepare`)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn()
    except (BotoCoreError, ClientError) as err:
        raise s3_error(err, what=what, cfg=cfg, bucket=bucket) from err


def prepare_s3(loc: ObjectLocation, cfg: S3Config, *, create: bool) -> None:
    """Check (or create, with ``create``) the bucket of ``loc``; see :func:`posixlake.storage.prepare`."""
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


# -- the object store ----------------------------------------------------------------------


class S3Store(PrefixedStore):
    """Objects under ``s3://bucket/prefix`` (boto3, configured by :mod:`posixlake.storage`).

    Create-if-absent writes are conditional PUTs (``If-None-Match: *``), which AWS S3,
    MinIO and moto implement.
    """

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        """Root the store at ``uri`` (``s3://bucket[/prefix]`` or ``s3a://...``)."""
        from boto3.s3.transfer import TransferConfig

        loc = parse_uri(uri)
        if loc is None or loc.kind != "s3":
            raise InvalidOperation(f"{uri} is not an S3 URI")
        cfg = S3Config.from_options(storage_options or {}).resolved()
        self._uri = uri.rstrip("/")
        self._cfg = cfg
        self._bucket = loc.bucket
        self._prefix = loc.prefix
        self._client: Any = s3_client(cfg)
        self._transfer = TransferConfig(
            multipart_threshold=64 * 1024 * 1024,
            multipart_chunksize=16 * 1024 * 1024,
            use_threads=False,
        )

    def _call(self, what: str, key: str, fn: Callable[[], _T]) -> _T:
        from botocore.exceptions import BotoCoreError, ClientError

        where = f"{what} s3://{self._bucket}/{key}"
        try:
            return fn()
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code in ("NoSuchKey", "404", "NotFound") and code != "NoSuchBucket":
                raise NotFound(f"{where}: no such object") from err
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
                raise AlreadyExists(f"{where}: already exists") from err
            raise s3_error(err, what=where, cfg=self._cfg, bucket=self._bucket) from err
        except BotoCoreError as err:
            raise s3_error(err, what=where, cfg=self._cfg, bucket=self._bucket) from err

    def read_bytes(self, key: str) -> bytes:
        """Return the object's content."""
        k = self._key(key)
        return self._call(
            "read",
            k,
            lambda: bytes(self._client.get_object(Bucket=self._bucket, Key=k)["Body"].read()),
        )

    def read_chunks(self, key: str, *, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the object's content in chunks."""
        k = self._key(key)
        body = self._call(
            "read", k, lambda: self._client.get_object(Bucket=self._bucket, Key=k)["Body"]
        )
        try:
            while True:
                block = self._call("read", k, lambda: body.read(chunk_size))
                if not block:
                    return
                yield bytes(block)
        finally:
            body.close()

    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """PUT the object (with ``If-None-Match: *`` when ``if_absent``)."""
        k = self._key(key)
        extra: dict[str, Any] = {"IfNoneMatch": "*"} if if_absent else {}
        self._call(
            "write",
            k,
            lambda: self._client.put_object(Bucket=self._bucket, Key=k, Body=data, **extra),
        )

    def write_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        """Upload ``chunks`` (multipart for large objects)."""
        k = self._key(key)
        reader = ChunkReader(chunks)
        self._call(
            "write",
            k,
            lambda: self._client.upload_fileobj(
                io.BufferedReader(reader, CHUNK_SIZE), self._bucket, k, Config=self._transfer
            ),
        )
        return reader.total

    def exists(self, key: str) -> bool:
        """HEAD the object."""
        k = self._key(key)
        try:
            self._call("check", k, lambda: self._client.head_object(Bucket=self._bucket, Key=k))
        except NotFound:
            return False
        return True

    def list(self, prefix: str = "") -> Iterator[FileEntry]:
        """Yield the objects under ``prefix``."""
        full = self._list_prefix(prefix)
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": full}
        while True:
            page = self._call("list", full, lambda: self._client.list_objects_v2(**kwargs))
            for obj in page.get("Contents", ()):
                key = self._strip(str(obj["Key"]))
                if key and not key.endswith("/"):
                    modified = obj.get("LastModified")
                    yield FileEntry(
                        key, int(obj["Size"]), modified.timestamp() if modified else None
                    )
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def delete(self, key: str) -> None:
        """DELETE the object (a missing object is fine)."""
        k = self._key(key)
        with contextlib.suppress(NotFound):
            self._call("delete", k, lambda: self._client.delete_object(Bucket=self._bucket, Key=k))

    def delete_prefix(self, prefix: str = "") -> int:
        """Delete the objects under ``prefix`` in batches of 1000."""
        keys = [self._key(e.key) for e in self.list(prefix)]
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            self._call(
                "delete",
                self._list_prefix(prefix),
                lambda batch=batch: self._client.delete_objects(  # type: ignore[misc]
                    Bucket=self._bucket, Delete={"Objects": batch, "Quiet": True}
                ),
            )
        return len(keys)

    def same_account(self, other: S3Store) -> bool:
        """Return whether ``other`` reaches the same endpoint with the same credentials."""
        return self._cfg == other._cfg

    def copy_from(self, src: S3Store, src_key: str, dst_key: str) -> int:
        """Copy ``src_key`` of ``src`` to ``dst_key`` server-side; return its size."""
        sk, dk = src._key(src_key), self._key(dst_key)
        head = src._call("check", sk, lambda: src._client.head_object(Bucket=src._bucket, Key=sk))
        self._call(
            "copy",
            dk,
            lambda: self._client.copy(
                {"Bucket": src._bucket, "Key": sk}, self._bucket, dk, Config=self._transfer
            ),
        )
        return int(head["ContentLength"])

    def __repr__(self) -> str:
        return f"S3Store({self._uri!r})"
