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
    "DEFAULT_MASTER",
    "JAVA_PACKAGE",
    "VALUE_CONFIG",
    "SparkUnavailableError",
    "build_session",
    "check_java",
    "preload",
    "quiet",
    "spark_errors",
    "spark_value_error",
    "translate_spark_error",
]

logger = logging.getLogger(__name__)

DEFAULT_MASTER: Final = "local[*]"
MASTER_ENV: Final = "POSIXLAKE_SPARK_MASTER"
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


def build_session(
    *,
    master: str | None = None,
    app_name: str = "posixlake",
    ui: bool = False,
    config: Mapping[str, str] | None = None,
) -> Any:
    """Start (or return the running) SparkSession configured for posixlake.

    Args:
        master: any Spark master URL; default ``$POSIXLAKE_SPARK_MASTER`` or ``local[*]``.
        app_name: the application name.
        ui: start the Spark web UI.
        config: extra Spark configuration.

    Returns:
        A ``pyspark.sql.SparkSession`` with the ``posixlake`` data source registered.

    Raises:
        SparkUnavailableError: PySpark or a suitable Java is missing, or the JVM fails to start.
    """
    sql = _pyspark()
    check_java()
    url = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        sql.SparkSession.builder.master(url)
        .appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # reserved words are not aliases: "FROM data WHERE" is a syntax error, as in SQL
        .config("spark.sql.ansi.enforceReservedKeywords", "true")
    )
    for key, value in VALUE_CONFIG.items():
        builder = builder.config(key, value)
    if url.startswith("local"):
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    with _build_lock, quiet():
        try:
            session = builder.getOrCreate()
        except (RuntimeError, OSError) as err:  # PySparkRuntimeError: JVM did not start
            raise SparkUnavailableError(f"Spark failed to start ({err}): {_FIX}") from err
        preload()
    session.sparkContext.setLogLevel("ERROR")
    from posixlake.engines.spark._datasource import register_data_source

    register_data_source(session)
    logger.debug("Spark session ready on %s", url)
    return session


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
    return default(f"{what}: {first}")
