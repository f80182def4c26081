"""The posixlake error tree.

Every error posixlake raises is a :class:`PosixLakeError`. The categories are the
original project's, reachable both as module-level classes
(``posixlake.errors.QueryError``) and as attributes of the base class
(``PosixLakeError.QueryError``) so that code written for the original runs unchanged.
Finer errors subclass a category.
"""

from __future__ import annotations

from typing import ClassVar, TypeAlias

__all__ = [
    "AlreadyExists",
    "AuthenticationError",
    "CommitConflict",
    "ConcurrentChange",
    "DeltaLakeError",
    "DivisionByZero",
    "DuplicateKeyError",
    "InvalidOperation",
    "IoError",
    "NetworkError",
    "NotFound",
    "PermissionDenied",
    "PosixLakeError",
    "QueryError",
    "SchemaError",
    "SerializationError",
    "StorageError",
    "TableExists",
    "TimeoutError",
    "UnknownColumns",
    "UnsupportedTableFeature",
    "ValueOutOfRange",
    "VersionError",
    "VersionNotFound",
]


class PosixLakeError(Exception):
    """Base class of every error raised by posixlake."""

    IoError: ClassVar[type[IoError]]
    SerializationError: ClassVar[type[SerializationError]]
    DeltaLakeError: ClassVar[type[DeltaLakeError]]
    InvalidOperation: ClassVar[type[InvalidOperation]]
    QueryError: ClassVar[type[QueryError]]
    AuthenticationError: ClassVar[type[AuthenticationError]]
    PermissionDenied: ClassVar[type[PermissionDenied]]
    SchemaError: ClassVar[type[SchemaError]]
    VersionError: ClassVar[type[VersionError]]
    StorageError: ClassVar[type[StorageError]]
    NetworkError: ClassVar[type[NetworkError]]
    TimeoutError: ClassVar[type[_TimeoutError]]  # ours, not the builtin it shadows
    NotFound: ClassVar[type[NotFound]]
    AlreadyExists: ClassVar[type[AlreadyExists]]

    @property
    def message(self) -> str:
        """The error text (the original project's ``e.message``)."""
        return str(self)


class IoError(PosixLakeError):
    """A local file could not be read or written."""


class SerializationError(PosixLakeError):
    """A payload (JSON, CSV, Arrow) is malformed or cannot be converted."""


class DeltaLakeError(PosixLakeError):
    """delta-rs reported an error that fits no finer category."""


class CommitConflict(DeltaLakeError):
    """A concurrent writer won the commit race, and retries ran out."""


class ConcurrentChange(DeltaLakeError):
    """Rows a write was based on were changed or deleted by another writer meanwhile.

    Retrying the same write cannot succeed: re-read and edit again.
    """


class InvalidOperation(PosixLakeError):
    """The operation is not valid for this table or these arguments."""


class DuplicateKeyError(InvalidOperation):
    """An insert carries a primary key that the table (or the batch) already holds."""


class UnsupportedTableFeature(InvalidOperation):
    """The table uses a Delta table feature that this operation cannot honour.

    Attributes:
        features: the Delta feature names (``identityColumns``, ``clustering``...).
    """

    def __init__(self, message: str, features: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.features = features


class QueryError(PosixLakeError):
    """A SQL query or predicate is invalid or failed to run."""


class DivisionByZero(QueryError):
    """An expression divided by zero while a write or query ran. Nothing is committed.

    Attributes:
        column: the column the expression was for (None for a predicate or a query).
    """

    def __init__(self, message: str, column: str | None = None) -> None:
        super().__init__(message)
        self.column = column


class AuthenticationError(PosixLakeError):
    """Credentials are missing or wrong."""


class PermissionDenied(PosixLakeError):
    """The authenticated user lacks the permission an operation needs."""


class SchemaError(PosixLakeError):
    """A schema is invalid, or data does not match the table's schema."""


class ValueOutOfRange(SchemaError):
    """A computed value cannot be stored in its column's type: an integer or decimal
    overflow, a timestamp outside the years 0001-9999. Nothing is committed.

    Attributes:
        column: the column the value was for (None when the value is not a column's).
    """

    def __init__(self, message: str, column: str | None = None) -> None:
        super().__init__(message)
        self.column = column


class VersionError(PosixLakeError):
    """A requested table version or timestamp does not exist."""


class StorageError(PosixLakeError):
    """The object store or file system refused or failed an operation."""


class NetworkError(StorageError):
    """A storage endpoint could not be reached."""


class TimeoutError(PosixLakeError):
    """An operation did not finish in its allotted time."""


_TimeoutError: TypeAlias = TimeoutError


class NotFound(PosixLakeError):
    """A table, file, user, bucket or backup does not exist."""


class AlreadyExists(PosixLakeError):
    """A table, user or destination already exists."""


# Errors the original project raised as DeltaLakeError (delta-rs' own messages) stay
# catchable as that: each is its category AND a DeltaLakeError.


class TableExists(AlreadyExists, DeltaLakeError):
    """A Delta table already exists where one is being created."""


class VersionNotFound(VersionError, DeltaLakeError):
    """A time-travel version past the table's latest (or below 0)."""


class UnknownColumns(SchemaError, DeltaLakeError):
    """Z-order (or another delta-rs operation) names columns the table does not have."""


PosixLakeError.IoError = IoError
PosixLakeError.SerializationError = SerializationError
PosixLakeError.DeltaLakeError = DeltaLakeError
PosixLakeError.InvalidOperation = InvalidOperation
PosixLakeError.QueryError = QueryError
PosixLakeError.AuthenticationError = AuthenticationError
PosixLakeError.PermissionDenied = PermissionDenied
PosixLakeError.SchemaError = SchemaError
PosixLakeError.VersionError = VersionError
PosixLakeError.StorageError = StorageError
PosixLakeError.NetworkError = NetworkError
PosixLakeError.TimeoutError = TimeoutError
PosixLakeError.NotFound = NotFound
PosixLakeError.AlreadyExists = AlreadyExists
