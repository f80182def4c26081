"""Building SparkSessions, checking Java, and translating Spark errors.

A session we build runs Python workers on the running interpreter, binds the driver to
127.0.0.1 for local masters, works in UTC, writes TIMESTAMP_MICROS and keeps the UI off
unless asked. A user's own session is used as it is, except for :data:`VALUE_CONFIG`
(ANSI arithmetic, exact decimals), which every session an engine uses gets.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from posixlake import errors
from posixlake.errors import InvalidOperation, NotFound, PosixLakeError, QueryError

__all__ = [
    "DEFAULT_CONNECT_PORT",
    "DEFAULT_MASTER",
    "JAVA_PACKAGE",
    "JVM_LOGGER",
    "LOG4J2_PROPERTIES",
    "REMOTE_ENV",
    "SESSION_CONF",
    "VALUE_CONFIG",
    "SparkUnavailableError",
    "add_data_source",
    "build_session",
    "check_java",
    "check_remote",
    "is_connect",
    "jvm_conf",
    "parse_remote",
    "preload",
    "quiet",
    "spark_errors",
    "spark_value_error",
    "translate_spark_error",
]

logger = logging.getLogger(__name__)

DEFAULT_MASTER: Final = "local[*]"
MASTER_ENV: Final = "POSIXLAKE_SPARK_MASTER"
REMOTE_ENV: Final = "POSIXLAKE_SPARK_REMOTE"
DEFAULT_CONNECT_PORT: Final = 15002
#: the logger that receives the output of the JVMs posixlake starts (INFO)
JVM_LOGGER: Final = "posixlake.spark.jvm"
JAVA_PACKAGE: Final = "openjdk-17-jre-headless"
MIN_JAVA: Final = 17

_FIX: Final = (
    f"install Java {MIN_JAVA} or newer (Debian/Ubuntu: `sudo apt-get install -y {JAVA_PACKAGE}`) "
    "or set JAVA_HOME, or use the local engine (engine='local' or POSIXLAKE_ENGINE=local)"
)
_build_lock = threading.Lock()

#: what makes Spark's values those of the local engine and of Delta's types: an overflow
#: or a division by zero is an error (ANSI mode), and decimal arithmetic keeps every
#: digit of its operands (or fails) instead of rounding a result to fit 38 digits
#: (``allowPrecisionLoss``: DECIMAL(38,10) + 1 would be rounded to 9 places). Set on the
#: sessions we build and on a session given to an engine.
VALUE_CONFIG: Final = {
    "spark.sql.ansi.enabled": "true",
    "spark.sql.decimalOperations.allowPrecisionLoss": "false",
}


class SparkUnavailableError(InvalidOperation):
    """The Spark engine cannot start here: no PySpark, no suitable Java, or a dead JVM."""


@contextmanager
def quiet() -> Iterator[None]:
    """Silence PySpark's FutureWarning about pandas 3 around a PySpark call.

    PySpark 4.x warns on every Arrow UDF it builds when pandas >= 3 is installed; the
    warning is about pandas conversions we do not use.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
        )
        yield


def _java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


def check_java() -> str:
    """Return the java binary Spark will use, checking it is Java 17 or newer.

    Raises:
        SparkUnavailableError: no java, or an older one; the message names the fix.
    """
    java = _java_binary()
    if java is None:
        raise SparkUnavailableError(f"the Spark engine needs Java, and none was found: {_FIX}")
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise SparkUnavailableError(f"cannot run {java} -version ({err}): {_FIX}") from err
    text = out.stderr + out.stdout
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if match is None:
        raise SparkUnavailableError(f"cannot tell the version of {java}: {text.strip()!r}: {_FIX}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_..." is Java 8
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise SparkUnavailableError(f"{java} is Java {major}; Spark 4 needs {MIN_JAVA}+: {_FIX}")
    return java


def _pyspark() -> Any:
    try:
        import pyspark.sql
    except ImportError as err:
        raise SparkUnavailableError(
            "the Spark engine needs PySpark: `pip install 'posixlake[spark]'` "
            "(or use engine='local' / POSIXLAKE_ENGINE=local)"
        ) from err
    return pyspark.sql


#: Spark SQL settings of every session posixlake builds (set per session, over Connect too)
SESSION_CONF: Final[Mapping[str, str]] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # reserved words are not aliases: "FROM data WHERE" is a syntax error, as in SQL
    "spark.sql.ansi.enforceReservedKeywords": "true",
}
#: log4j2 configuration of the JVMs posixlake starts: warnings and errors on stderr
LOG4J2_PROPERTIES: Final = os.path.join(os.path.dirname(__file__), "log4j2.properties")


def jvm_conf(master: str, *, ui: bool = False) -> dict[str, str]:
    """Return the static Spark settings of a JVM posixlake starts (driver or Connect server).

    Python workers run on this interpreter; local masters bind to 127.0.0.1; the web UI
    and the console progress bar are off; log4j logs warnings and errors only.
    """
    conf = {
        "spark.pyspark.python": sys.executable,
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J2_PROPERTIES}",
    }
    if master.startswith("local"):
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.driver.host"] = "127.0.0.1"
    return conf


def build_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    app_name: str = "posixlake",
    ui: bool = False,
    config: Mapping[str, str] | None = None,
    data_source: bool = True,
) -> Any:
    """Start (or return the running) SparkSession configured for posixlake.

    Args:
        master: any Spark master URL; default ``$POSIXLAKE_SPARK_MASTER`` or ``local[*]``.
        remote: a Spark Connect URL (``sc://host:15002``): the session is a Connect
            client of that server instead of a JVM in this process; default
            ``$POSIXLAKE_SPARK_REMOTE`` when no ``master`` is given.
        app_name: the application name (of a session with its own JVM).
        ui: start the Spark web UI (of a session with its own JVM).
        config: extra Spark configuration.
        data_source: register the ``posixlake`` data source in the session
            (:func:`add_data_source`).

    Returns:
        A ``pyspark.sql.SparkSession`` (classic or Connect) with the ``posixlake`` data
        source registered (unless ``data_source`` is False).

    Raises:
        SparkUnavailableError: PySpark, its Connect client or a suitable Java is missing,
            the JVM fails to start, or the Connect server cannot be reached.
    """
    if master and remote:
        raise InvalidOperation(
            f"give a Spark master ({master}) or a Spark Connect server ({remote}), not both"
        )
    if remote is None and master is None:
        remote = os.environ.get(REMOTE_ENV) or None
        if remote and os.environ.get(MASTER_ENV):
            raise InvalidOperation(
                f"${MASTER_ENV} and ${REMOTE_ENV} are both set: unset one of them"
            )
    if remote:
        return _connect_session(remote, config or {}, data_source=data_source)
    sql = _pyspark()
    check_java()
    url = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    _leave_connect_mode()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if url.startswith("local"):  # else Spark warns that the host name is a loopback address
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {**jvm_conf(url, ui=ui), **SESSION_CONF, **VALUE_CONFIG, **(config or {})}
    builder = sql.SparkSession.builder.master(url).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _build_lock, quiet():
        try:
            _launch_gateway(url, app_name, settings)
            session = builder.getOrCreate()
        except (RuntimeError, OSError) as err:  # PySparkRuntimeError: JVM did not start
            raise SparkUnavailableError(f"Spark failed to start ({err}): {_FIX}") from err
        preload()
    session.sparkContext.setLogLevel("ERROR")
    quiet_pyspark_loggers()
    if data_source:
        add_data_source(session)
    logger.debug("Spark session ready on %s", url)
    return session


def is_connect(session: Any) -> bool:
    """Return whether ``session`` is a Spark Connect client session."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def _leave_connect_mode() -> None:
    """Drop a Connect mode inherited from a parent process (PySpark keys it on an
    environment variable, which would make this process's classic calls take the Connect
    path); refuse when this process runs a Connect session itself."""
    if "SPARK_CONNECT_MODE_ENABLED" not in os.environ:
        return
    running = sys.modules.get("pyspark.sql.connect.session")
    if running is not None and running.SparkSession._get_default_session() is not None:
        raise SparkUnavailableError(
            "this process already uses a Spark Connect session; PySpark cannot also run "
            "a local Spark (its functions follow one mode per process): give the same "
            "remote URL, or run the local Spark in another process"
        )
    del os.environ["SPARK_CONNECT_MODE_ENABLED"]


def _launch_gateway(master: str, app_name: str, settings: Mapping[str, str]) -> None:
    """Start the JVM of a classic session with its stdout and stderr sent to the log.

    PySpark's own launch lets the JVM write on this process's stderr (the Java launcher's
    warnings, log4j's first lines): here every line becomes a record of the
    ``posixlake.spark.jvm`` logger at INFO, shown by ``posixlake -v`` and silent by default.
    Nothing happens when this process already has a JVM.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        conf.set(key, value)
    gateway = launch_gateway(  # type: ignore[no-untyped-call]
        conf, popen_kwargs={"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    )
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.stdout is not None:
        threading.Thread(
            target=_forward_lines,
            args=(proc.stdout, logging.getLogger(JVM_LOGGER)),
            name="posixlake-spark-jvm-log",
            daemon=True,
        ).start()
    with SparkContext._lock:
        if SparkContext._gateway is None:
            SparkContext._gateway = gateway
            SparkContext._jvm = gateway.jvm


def _forward_lines(stream: Any, log: logging.Logger) -> None:
    """Log each line of ``stream`` (bytes) at INFO until it ends."""
    with contextlib.suppress(OSError, ValueError):
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                log.info("%s", line)


class _ToDebugLog(logging.Handler):
    """Send PySpark's error-context records (a JSON stack trace per error) to our debug log."""

    def emit(self, record: logging.LogRecord) -> None:
        logger.debug("PySpark: %s", record.getMessage(), exc_info=record.exc_info)


def quiet_pyspark_loggers() -> None:
    """Keep PySpark's query-context loggers off stderr.

    PySpark logs every error it raises that carries a query context, with the whole
    JVM stack trace, on a stderr handler of its own; the error we raise carries the
    message, so these records go to posixlake's debug log instead (``-vv``).
    """
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        target = PySparkLogger.getLogger(name)
        for handler in list(target.handlers):
            if not isinstance(handler, _ToDebugLog):
                target.removeHandler(handler)
        if not target.handlers:
            target.addHandler(_ToDebugLog())


def add_data_source(session: Any) -> None:
    """Register the ``posixlake`` data source in ``session`` (idempotent).

    Raises:
        SparkUnavailableError: a Spark Connect server that cannot run Python data sources.
    """
    from posixlake.engines.spark._datasource import register_data_source

    if not is_connect(session):
        register_data_source(session)
        return
    try:
        register_data_source(session)
    except spark_errors() as err:
        raise SparkUnavailableError(
            f"the Spark Connect server cannot run Python data sources: {_first_line(str(err))}"
        ) from err


def _connect_session(url: str, config: Mapping[str, str], *, data_source: bool) -> Any:
    """Return a Spark Connect session on ``url`` with posixlake's SQL settings."""
    sql = _pyspark()
    try:
        with quiet():
            import pyspark.sql.connect.session  # noqa: F401 - checks grpcio & co.
    except ImportError as err:
        raise SparkUnavailableError(
            f"Spark Connect needs PySpark's Connect client ({err.name or err} is missing): "
            "`pip install 'posixlake[spark]'`"
        ) from err
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        raise SparkUnavailableError(
            f"this process already runs a local Spark; PySpark cannot also use the Spark "
            f"Connect server {url} (its functions follow one mode per process)"
        )
    check_remote(url)
    settings = {**SESSION_CONF, **VALUE_CONFIG, **config}
    with _build_lock, quiet():
        session = None
        for attempt in range(2):  # a closed leased session is replaced once
            try:
                session = _join(sql, url, settings)
                break
            except spark_errors() as err:
                renewed = _renewed(url, err) if attempt == 0 else None
                if renewed is None:
                    raise SparkUnavailableError(
                        f"cannot start a session on the Spark Connect server {url}: "
                        f"{_first_line(str(err))}"
                    ) from err
                url = renewed
        assert session is not None
        preload()
    if ";session_id=" in url:  # a named session others join too: not ours to end
        session.release_session_on_close = False
    quiet_pyspark_loggers()
    if data_source:
        add_data_source(session)
    logger.debug("Spark Connect session ready on %s", url)
    return session


def _join(sql: Any, url: str, settings: Mapping[str, str]) -> Any:
    """Return the Connect session on ``url`` with ``settings`` set in it."""
    return sql.SparkSession.builder.remote(url).config(map=dict(settings)).getOrCreate()


def _renewed(url: str, err: BaseException) -> str | None:
    """Return the URL of a new leased session when the server closed the leased session
    of ``url`` (it idled out), else None. The half-built session is dropped."""
    if "SESSION_CLOSED" not in str(err):
        return None
    from posixlake.engines.spark._leases import renew_session

    renewed = renew_session(url)
    if renewed is None:
        return None
    from pyspark.sql.connect.session import SparkSession

    broken = SparkSession._get_default_session()
    if broken is not None:  # the client keeps the session whose first call failed
        broken.release_session_on_close = False
        broken.stop()
    logger.debug("Spark Connect session of %s was closed: joining %s", url, renewed)
    return renewed


def parse_remote(url: str) -> tuple[str, int]:
    """Return the host and port of a Spark Connect URL (``sc://host[:port][/;params]``).

    Raises:
        InvalidOperation: not an ``sc://`` URL.
    """
    match = re.fullmatch(r"sc://(\[[^\]]+\]|[^:/;]+)(?::(\d+))?(?:/)?(?:;.*)?", url.strip())
    if match is None:
        raise InvalidOperation(
            f"{url!r} is not a Spark Connect URL: use sc://HOST:PORT (e.g. sc://127.0.0.1:15002)"
        )
    host = match.group(1).strip("[]")
    return host, int(match.group(2) or DEFAULT_CONNECT_PORT)


def check_remote(url: str, *, timeout: float = 5.0) -> None:
    """Check that a Spark Connect server accepts connections at ``url``.

    PySpark's client retries an unreachable server for minutes; this fails at once.

    Raises:
        SparkUnavailableError: nothing listens there; the message says how to start one.
    """
    host, port = parse_remote(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as err:
        raise SparkUnavailableError(
            f"no Spark Connect server at {url} ({err.strerror or err}): start one with "
            "`posixlake spark start`, or use a local Spark (--spark-master local[*])"
        ) from err


def _first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else "failed"


def preload() -> None:
    """Do, once and quietly, the imports PySpark does lazily with side effects.

    ``pyspark.testing.utils`` warns at import under pandas 3, and PySpark's first
    DataFrame call imports IPython when it is installed, which (through jedi) raises the
    recursion limit; better at session start than in the middle of a user's job.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # third-party import-time warnings are not ours
        with contextlib.suppress(ImportError):  # PySpark without its testing package
            import pyspark.testing.utils  # noqa: F401
        with contextlib.suppress(ImportError):
            import IPython  # noqa: F401


# -- errors -----------------------------------------------------------------------------


def spark_errors() -> tuple[type[BaseException], ...]:
    """Return the exception classes a PySpark call raises (for ``except``; none without PySpark)."""
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
    except ImportError:
        return ()
    return (PySparkException, Py4JError)


_OUR_ERROR = re.compile(r"posixlake\.errors\.(\w+): (.*)")
_SPARK_CLASS = re.compile(r"\[([A-Z_]+)(?:\.[A-Z_]+)?\]\s*(.*)")
_OVERFLOWS: Final = frozenset(
    {
        "ARITHMETIC_OVERFLOW",
        "BINARY_ARITHMETIC_OVERFLOW",
        "NUMERIC_VALUE_OUT_OF_RANGE",
        "CAST_OVERFLOW",
        "CAST_OVERFLOW_IN_TABLE_INSERT",
        "DATETIME_OVERFLOW",
        "DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION",
        "NUMERIC_OUT_OF_SUPPORTED_RANGE",
    }
)


def spark_value_error(
    text: str, *, what: str, column: str | None = None, expression: str | None = None
) -> PosixLakeError | None:
    """Return the error for a Spark ANSI error about a value (an overflow, a division by
    zero), or None for other errors."""
    for m in _SPARK_CLASS.finditer(text):
        cls, detail = m.group(1), m.group(2).splitlines()[0]
        # Spark's advice on turning ANSI off is not ours to give
        detail = re.split(r"\s*(?:If necessary set|Use [`']?try_)", detail)[0].strip().rstrip(".")
        if cls == "ARITHMETIC_OVERFLOW":
            detail = f"arithmetic {detail}"
        if cls in ("ARITHMETIC_OVERFLOW", "BINARY_ARITHMETIC_OVERFLOW"):
            detail += " (a result does not fit its type)"
        where = f"{what}: column {column!r}" if column else what
        if expression:
            where += f" = {expression}"
        if cls in ("DIVIDE_BY_ZERO", "INTERVAL_DIVIDED_BY_ZERO"):
            return errors.DivisionByZero(
                f"{where}: division by zero; nothing was committed", column
            )
        if cls in _OVERFLOWS:
            return errors.ValueOutOfRange(f"{where}: {detail}; nothing was committed", column)
    return None


def translate_spark_error(
    err: BaseException, *, what: str, default: type[PosixLakeError] = QueryError
) -> PosixLakeError:
    """Map a Spark / Py4J error to the posixlake error tree.

    A PosixLakeError raised inside a Spark task (our executor code) comes back as the
    same class with its message.

    Args:
        err: what PySpark raised.
        what: the operation, for the message.
        default: the class for other failures (analysis errors are always QueryError).
    """
    text = str(err)
    found = _OUR_ERROR.findall(text)
    if found:
        name, message = found[-1]
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, PosixLakeError):
            return cls(message.strip())
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    kind = type(err).__name__
    if "[PATH_NOT_FOUND]" in text or "FileNotFoundException" in text or "[FILE_NOT_EXIST]" in text:
        return NotFound(f"{what}: a data file is missing (removed by VACUUM or by hand): {first}")
    if "[TABLE_OR_VIEW_NOT_FOUND]" in text:
        return QueryError(f"{what}: table or view not found (the table is `data`): {first}")
    value = spark_value_error(text, what=what)
    if value is not None:
        return value
    if kind in ("AnalysisException", "ParseException") or "[PARSE_SYNTAX_ERROR]" in text:
        return QueryError(f"{what}: {first}")
    if kind == "Py4JNetworkError" or ("Connection refused" in text and "py4j" in text.lower()):
        return SparkUnavailableError(f"{what}: the Spark JVM is gone: {first}")
    if kind == "SparkConnectGrpcException" and (
        "UNAVAILABLE" in text or "Connection refused" in text or "failed to connect" in text
    ):
        return SparkUnavailableError(f"{what}: the Spark Connect server is gone: {first}")
    return default(f"{what}: {first}")
