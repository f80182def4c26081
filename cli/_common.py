"""What every posixlake command shares: the table argument, options, opening, output.

Options that many commands take (``--engine``, the storage flags, ``--user``, ``--json``)
are declared once here. Their values go into the :class:`Options` of the click context
(``expose_value=False``), so a command's signature lists only its own parameters and it
opens its table with :func:`open_table`.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click
from click.shell_completion import CompletionItem

if TYPE_CHECKING:  # posixlake (pyarrow, deltalake) is imported when a command runs
    from click._termui_impl import ProgressBar

    from posixlake import DatabaseOps, Schema
    from posixlake.storage import StorageConfig

__all__ = [
    "NEW_PASSWORD_ENV",
    "PASSWORD_ENV",
    "AsOf",
    "ByteSize",
    "Options",
    "credentials",
    "echo_json",
    "engine_accepted",
    "engine_kwargs",
    "engine_options",
    "get_options",
    "human_bytes",
    "iso_time",
    "json_option",
    "new_password",
    "open_table",
    "plural",
    "progress",
    "read_input",
    "schema_json",
    "spinner",
    "storage_for",
    "storage_options",
    "table_argument",
    "to_jsonable",
    "user_option",
]

PASSWORD_ENV: Final = "POSIXLAKE_PASSWORD"
NEW_PASSWORD_ENV: Final = "POSIXLAKE_NEW_PASSWORD"
USER_ENV: Final = "POSIXLAKE_USER"
ENGINE_ENV: Final = "POSIXLAKE_ENGINE"
MASTER_ENV: Final = "POSIXLAKE_SPARK_MASTER"
REMOTE_ENV: Final = "POSIXLAKE_SPARK_REMOTE"

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger(__name__)


@dataclass
class Options:
    """The shared options of one invocation (filled by the option callbacks)."""

    verbose: int = 0
    engine: str | None = None
    spark_master: str | None = None
    spark_remote: str | None = None
    s3_endpoint: str | None = None
    s3_region: str | None = None
    s3_allow_http: bool = False
    azure_account: str | None = None
    azure_endpoint: str | None = None
    azure_emulator: bool = False
    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    azure_account_key: str | None = None
    user: str | None = None
    password: str | None = None
    json: bool = False


_OPTION_NAMES: Final = frozenset(f.name for f in fields(Options))


def get_options() -> Options:
    """Return the :class:`Options` of the current click context (creating it)."""
    return click.get_current_context().ensure_object(Options)


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Option callback: keep ``value`` in the context's :class:`Options`."""
    name = param.name or ""
    assert name in _OPTION_NAMES, f"--{name} has no field in Options"
    setattr(ctx.ensure_object(Options), name, value)
    return value


def warn_secret_flag(flag: str, env: str) -> None:
    """Warn that a secret given as ``flag`` is visible to other users of the machine."""
    click.echo(
        f"Warning: {flag} on the command line can be seen by other users (ps, /proc); "
        f"prefer ${env}",
        err=True,
    )


def _store_secret(env: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """Option callback for a secret flag: store it, warning when it came from argv."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        source = ctx.get_parameter_source(param.name or "")
        if value is not None and source == click.core.ParameterSource.COMMANDLINE:
            warn_secret_flag(param.opts[0], env)
        return _store(ctx, param, value)

    return callback


def _compose(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(func: F) -> F:
        for deco in reversed(decorators):
            func = deco(func)
        return func

    return apply


# -- the table argument ------------------------------------------------------------------


def _complete_dir(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Let the shell complete directories (tables are directories or URIs)."""
    return [CompletionItem(incomplete, type="dir")]


def table_argument(func: F) -> F:
    """Add the TABLE argument: a directory, ``s3://bucket/prefix`` or ``az://container/prefix``."""
    return click.argument("table", metavar="TABLE", shell_complete=_complete_dir)(func)


# -- engine --------------------------------------------------------------------------------


def engine_options(func: F) -> F:
    """Add ``--engine``, ``--spark-master`` and ``--spark-remote`` (for commands that compute)."""
    return _compose(
        click.option(
            "--engine",
            type=click.Choice(["local", "spark"], case_sensitive=False),
            envvar=ENGINE_ENV,
            show_envvar=True,
            expose_value=False,
            callback=_store,
            help="Compute engine: spark (the default) or local (delta-rs, no JVM).",
        ),
        click.option(
            "--spark-master",
            metavar="URL",
            envvar=MASTER_ENV,
            show_envvar=True,
            expose_value=False,
            callback=_store,
            help="Spark master URL for --engine spark: a Spark in this process (default "
            "local[*] when no Spark Connect server is given or running).",
        ),
        click.option(
            "--spark-remote",
            metavar="URL",
            envvar=REMOTE_ENV,
            show_envvar=True,
            expose_value=False,
            callback=_store,
            help="Spark Connect server for --engine spark (sc://HOST:PORT). Default: the "
            "server `posixlake spark start` runs, if one runs.",
        ),
    )(func)


def engine_accepted(func: F) -> F:
    """Accept ``--engine`` on a command that computes nothing (metadata, maintenance,
    backups: delta-rs does the work, no JVM starts), so scripts may pass it everywhere.

    Hidden from ``--help``; the value is checked and otherwise unused.
    """
    return click.option(
        "--engine",
        type=click.Choice(["local", "spark"], case_sensitive=False),
        expose_value=False,
        hidden=True,
        help="Accepted for uniformity: this command needs no compute engine.",
    )(func)


def engine_kwargs(*, computes: bool = True, shared: bool = True) -> dict[str, Any]:
    """Return the ``engine``, ``master`` and ``remote`` arguments of the shared options.

    On the Spark engine without ``--spark-master`` or ``--spark-remote``, a running
    ``posixlake spark`` server is used (a warm JVM) rather than a new JVM in this process,
    and with ``shared`` one of its named sessions, leased to this process (warm code:
    see :mod:`posixlake.engines.spark._leases`). Commands whose SQL may change a
    session's state (``SET``, ``CREATE TEMPORARY VIEW``... and the shell) pass
    ``shared=False``: they get a session of their own, which ends with them.

    Raises:
        click.UsageError: both ``--spark-master`` and ``--spark-remote``.
    """
    opts = get_options()
    if not computes:
        return {"engine": "local", "master": None, "remote": None}
    if opts.spark_master and opts.spark_remote:
        raise click.UsageError(
            "give --spark-master (a Spark in this process) or --spark-remote (a Spark "
            f"Connect server), not both (${MASTER_ENV} / ${REMOTE_ENV} set them too)"
        )
    remote = opts.spark_remote
    name = (opts.engine or os.environ.get(ENGINE_ENV) or "spark").strip().lower()
    if name == "spark" and not remote and not opts.spark_master:
        from posixlake.engines.spark import lease_session, running_servers

        servers = running_servers()
        if servers:
            remote = servers[0].url
            logger.info("using the Spark Connect server at %s (posixlake spark start)", remote)
            if shared:
                remote = lease_session(remote, servers[0].port) or remote
    return {"engine": opts.engine, "master": opts.spark_master, "remote": remote}


# -- storage -------------------------------------------------------------------------------


def storage_options(func: F) -> F:
    """Add the S3 and Azure flags (and the original project's ``--endpoint``,
    ``--access-key``, ``--secret-key``, ``--azure-account-key``)."""
    return _compose(
        click.option(
            "--endpoint",
            metavar="URL",
            expose_value=False,
            callback=_store,
            help="Endpoint of the table's storage: S3-compatible (s3://) or Azure Blob (az://).",
        ),
        click.option(
            "--access-key",
            metavar="KEY",
            expose_value=False,
            callback=_store,
            help="S3 access key id (default $AWS_ACCESS_KEY_ID).",
        ),
        click.option(
            "--secret-key",
            metavar="KEY",
            expose_value=False,
            callback=_store_secret("AWS_SECRET_ACCESS_KEY"),
            help="S3 secret key; visible to other users in the process list: prefer "
            "$AWS_SECRET_ACCESS_KEY.",
        ),
        click.option(
            "--azure-account-key",
            "--azure-access-key",
            "azure_account_key",
            metavar="KEY",
            expose_value=False,
            callback=_store_secret("AZURE_STORAGE_ACCOUNT_KEY"),
            help="Azure account key; visible to other users in the process list: prefer "
            "$AZURE_STORAGE_ACCOUNT_KEY.",
        ),
        click.option(
            "--s3-endpoint",
            metavar="URL",
            envvar="AWS_ENDPOINT_URL",
            show_envvar=True,
            expose_value=False,
            callback=_store,
            help="S3-compatible endpoint (MinIO, moto...). Keys: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.",
        ),
        click.option(
            "--s3-region",
            metavar="REGION",
            envvar=["AWS_REGION", "AWS_DEFAULT_REGION"],
            show_envvar=True,
            expose_value=False,
            callback=_store,
            help="S3 region.",
        ),
        click.option(
            "--s3-allow-http",
            is_flag=True,
            default=False,
            expose_value=False,
            callback=_store,
            help="Allow a plain-HTTP S3 endpoint (implied by an http:// --s3-endpoint).",
        ),
        click.option(
            "--azure-account",
            "--azure-account-name",
            "azure_account",
            metavar="NAME",
            envvar="AZURE_STORAGE_ACCOUNT_NAME",
            show_envvar=True,
            expose_value=False,
            callback=_store,
            help="Azure storage account. Key: AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_CONNECTION_STRING).",
        ),
        click.option(
            "--azure-emulator",
            is_flag=True,
            default=False,
            expose_value=False,
            callback=_store,
            help="Use Azurite's well-known development account (endpoint: --azure-endpoint, "
            "else http://127.0.0.1:10000).",
        ),
        click.option(
            "--azure-endpoint",
            metavar="URL",
            envvar="AZURE_STORAGE_ENDPOINT",
            show_envvar=True,
            expose_value=False,
            callback=_store,
            help="Azure Blob endpoint (Azurite...).",
        ),
    )(func)


def storage_for(uri: str) -> StorageConfig | None:
    """Return the S3 or Azure config for ``uri`` from the flags (None: defaults and env).

    :class:`~posixlake.storage.S3Config` and :class:`~posixlake.storage.AzureConfig` read
    ``AWS_*`` and ``AZURE_STORAGE_*`` from the environment for what no flag gives. The
    original project's ``--endpoint`` serves both kinds; ``--s3-endpoint`` and
    ``--azure-endpoint`` win over it.

    Raises:
        click.BadParameter: a flag value the storage layer rejects (e.g. an endpoint
            that is not an http(s) URL).
    """
    from posixlake.errors import InvalidOperation
    from posixlake.storage import AzureConfig, S3Config, parse_uri

    opts = get_options()
    try:
        loc = parse_uri(uri)
        if loc is None:
            return None
        if loc.kind == "s3":
            endpoint = opts.s3_endpoint or opts.endpoint
            if not (
                endpoint
                or opts.s3_region
                or opts.s3_allow_http
                or opts.access_key
                or opts.secret_key
            ):
                return None
            return S3Config(
                endpoint=endpoint,
                access_key_id=opts.access_key,
                secret_access_key=opts.secret_key,
                region=opts.s3_region,
                allow_http=True if opts.s3_allow_http else None,
            )
        endpoint = opts.azure_endpoint or opts.endpoint
        if not (opts.azure_account or endpoint or opts.azure_emulator or opts.azure_account_key):
            return None
        return AzureConfig(
            account_name=opts.azure_account,
            account_key=opts.azure_account_key,
            endpoint=endpoint,
            use_emulator=opts.azure_emulator,
        )
    except InvalidOperation as err:
        raise click.BadParameter(str(err)) from err


# -- users ---------------------------------------------------------------------------------


def user_option(func: F) -> F:
    """Add ``--user``; the password comes from $POSIXLAKE_PASSWORD or a prompt (or the
    original project's ``--password``, with a warning)."""
    return _compose(
        click.option(
            "--user",
            "-u",
            metavar="NAME",
            envvar=USER_ENV,
            show_envvar=True,
            expose_value=False,
            callback=_store,
            help=f"Log in as this user (password from ${PASSWORD_ENV}, else a prompt).",
        ),
        click.option(
            "--password",
            metavar="PASSWORD",
            expose_value=False,
            callback=_store_secret(PASSWORD_ENV),
            help=f"The login password; visible to other users in the process list: prefer "
            f"${PASSWORD_ENV} or the prompt.",
        ),
    )(func)


def _has_terminal() -> bool:
    """Whether a password prompt can reach a terminal (stdin, or the controlling one)."""
    if sys.stdin.isatty():
        return True
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def _ask_password(label: str, env: str, *, confirm: bool = False) -> str:
    """Ask for a password: on the terminal, else read from stdin (no getpass warning).

    Without a terminal, getpass would warn that the input may be echoed and read stdin,
    and an empty stdin ended in "Aborted!"; here a piped password is read as a line and
    no input is an error that names ``env``.

    Raises:
        click.ClickException: no terminal and nothing on stdin, or the two entries of a
            confirmed password differ.
    """
    if _has_terminal():
        value: str = click.prompt(label, hide_input=True, confirmation_prompt=confirm, err=True)
        return value

    def line(prompt: str) -> str:
        click.echo(f"{prompt}: ", err=True)
        text = sys.stdin.readline()
        if not text:
            raise click.ClickException(
                f"{label.lower()} is needed and there is no terminal to ask on: set ${env}"
            )
        return text.rstrip("\r\n")

    value = line(label)
    if confirm and line("Repeat for confirmation") != value:
        raise click.ClickException("the two entered passwords do not match")
    return value


def credentials() -> tuple[str, str] | None:
    """Return ``(user, password)`` when ``--user`` was given, asking for the password once."""
    opts = get_options()
    if not opts.user:
        return None
    if opts.password is None:
        opts.password = os.environ.get(PASSWORD_ENV)
    if opts.password is None:
        opts.password = _ask_password(f"Password for {opts.user}", PASSWORD_ENV)
    return opts.user, opts.password


def new_password(user: str) -> str:
    """Return a new password for ``user``: $POSIXLAKE_NEW_PASSWORD, else a prompt typed twice."""
    password = os.environ.get(NEW_PASSWORD_ENV)
    if password is None:
        password = _ask_password(f"New password for {user}", NEW_PASSWORD_ENV, confirm=True)
    return password


def _user_from_command_line() -> bool:
    """Whether ``--user`` was typed (rather than taken from $POSIXLAKE_USER)."""
    ctx = click.get_current_context()
    return ctx.get_parameter_source("user") == click.core.ParameterSource.COMMANDLINE


# -- opening -------------------------------------------------------------------------------


def open_table(table: str, *, computes: bool = False, shared: bool = True) -> DatabaseOps:
    """Open TABLE with the shared options.

    Args:
        table: the TABLE argument.
        computes: the command runs queries or DML, so ``--engine`` applies; otherwise the
            local engine is used (no JVM start for metadata work).
        shared: the command may run in a leased session of the running Connect server
            (see :func:`engine_kwargs`).
    """
    from posixlake import DatabaseOps
    from posixlake.errors import AuthenticationError
    from posixlake.storage import normalize_uri

    opts = get_options()
    uri = normalize_uri(table)
    engine = engine_kwargs(computes=computes, shared=shared)
    storage = storage_for(uri)
    login = None
    if opts.user:
        from posixlake.security import auth_required
        from posixlake.storage import storage_options_for

        # a password is asked for only when the table has users ($POSIXLAKE_USER set
        # for other tables must not make every table prompt)
        known = opts.password is not None or os.environ.get(PASSWORD_ENV) is not None
        if known or auth_required(uri, storage_options_for(uri, storage)):
            login = credentials()
    try:
        db = DatabaseOps.open(uri, storage=storage, credentials=login, **engine)
    except AuthenticationError as err:
        if opts.user:
            raise
        raise AuthenticationError(
            f"{uri} has users: log in with --user NAME (or ${USER_ENV}); the password comes "
            f"from ${PASSWORD_ENV} or a prompt"
        ) from err
    if opts.user and db.user is None and _user_from_command_line():
        click.echo(f"Warning: {uri} has no users; --user {opts.user} is not used", err=True)
    return db


# -- input ---------------------------------------------------------------------------------


def read_input(source: str) -> bytes:
    """Return the bytes of a file, or of stdin for ``-``.

    Raises:
        click.BadParameter: the file cannot be read.
    """
    if source == "-":
        return sys.stdin.buffer.read()
    try:
        with open(source, "rb") as fh:
            return fh.read()
    except OSError as err:
        raise click.BadParameter(f"{source}: {err.strerror}", param_hint="FILE") from err


# -- output --------------------------------------------------------------------------------


def json_option(func: F) -> F:
    """Add ``--json`` (machine-readable output on stdout)."""
    return click.option(
        "--json",
        "json",
        is_flag=True,
        default=False,
        expose_value=False,
        callback=_store,
        help="Print machine-readable JSON.",
    )(func)


def iso_time(value: datetime) -> str:
    """Return an ISO 8601 UTC time with milliseconds: ``2024-05-01T12:00:00.123Z``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_jsonable(value: Any) -> Any:
    """Return ``value`` with datetimes, decimals, bytes and dataclasses made JSON-ready."""
    if isinstance(value, datetime):
        return iso_time(value)
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def echo_json(value: Any) -> None:
    """Print ``value`` as one line of JSON on stdout."""
    click.echo(json.dumps(to_jsonable(value), ensure_ascii=False))


def schema_json(schema: Schema) -> dict[str, Any]:
    """Return a schema as ``{"fields": [...], "primary_key": [...]}``; ``create`` reads it back."""
    from posixlake.types import type_string

    return {
        "fields": [
            {"name": f.name, "type": type_string(f.arrow_type()), "nullable": f.nullable}
            for f in schema.fields
        ],
        "primary_key": schema.key_columns,
    }


def plural(n: int, word: str) -> str:
    """Return ``"1 row"`` / ``"3 rows"`` (thousands separated)."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def human_bytes(n: int) -> str:
    """Return a byte count as ``"975 B"``, ``"1.5 KiB"``, ``"2.0 MiB"``..."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@contextmanager
def spinner(label: str) -> Iterator[None]:
    """Show an activity bar on stderr while a step without progress figures runs.

    On a terminal the bar moves and shows the elapsed time; elsewhere the label is
    printed once.
    """
    stop = threading.Event()
    with click.progressbar(iter(int, 1), label=label, file=sys.stderr, show_eta=False) as bar:
        ticker: threading.Thread | None = None
        if sys.stderr.isatty():

            def tick() -> None:
                while not stop.wait(0.2):
                    bar.update(1)

            ticker = threading.Thread(target=tick, name="posixlake-progress", daemon=True)
            ticker.start()
        try:
            yield
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()


class _Progress:
    """A ``progress(done, total)`` callback drawing a byte progress bar on stderr."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: ProgressBar[int] | None = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = click.progressbar(
                length=max(total, 1),
                label=self.label,
                file=sys.stderr,
                item_show_func=lambda _: f"{human_bytes(self.done)} / {human_bytes(total)}",
            )
            self.bar.__enter__()
        self.done = done
        self.bar.update(max(done - self.bar.pos, 0))


@contextmanager
def progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """Yield a ``progress(done, total)`` callback (bytes) that draws a bar on stderr."""
    reporter = _Progress(label)
    try:
        yield reporter
    finally:
        if reporter.bar is not None:
            reporter.bar.__exit__(None, None, None)


# -- typed parameters ----------------------------------------------------------------------


class AsOf(click.ParamType[datetime]):
    """A point in time: an ISO timestamp (UTC unless it has an offset) or epoch milliseconds."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Parse ``value`` into an aware datetime."""
        if isinstance(value, datetime):
            return value
        text = str(value).strip()
        if text.isdigit():
            return datetime.fromtimestamp(int(text) / 1000, tz=UTC)
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            self.fail(
                f"{text!r} is not a time: use ISO 8601 (2024-05-01T12:00:00Z) or epoch milliseconds",
                param,
                ctx,
            )
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed


_UNITS: Final[dict[str, int]] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
}


class ByteSize(click.ParamType[int]):
    """A size in bytes: ``134217728``, ``128MiB``, ``100MB``, ``1G``."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Parse ``value`` into a positive number of bytes."""
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().replace(" ", "")
        digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(digits) :]
        try:
            number = float(digits)
        except ValueError:
            number = -1.0
        if unit not in _UNITS or number <= 0:
            self.fail(f"{value!r} is not a size (e.g. 134217728, 128MiB, 1G)", param, ctx)
        return int(number * _UNITS[unit])


def split_columns(values: Sequence[str]) -> list[str]:
    """Return column names from repeated and/or comma-separated option values."""
    return [c.strip() for v in values for c in v.split(",") if c.strip()]
