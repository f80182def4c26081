"""posixlake: Delta Lake tables you can use from Python, Spark and plain Unix tools.

>>> from posixlake import DatabaseOps, Schema, Field
>>> db = DatabaseOps.create("/tmp/lake", Schema([Field("id", "Int64"), Field("name", "String")]), engine="local")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posixlake._compat import (
    get_backup_metadata,
    get_backup_metadata_with_credentials,
    restore,
    restore_to_transaction,
    restore_to_transaction_with_credentials,
    restore_with_credentials,
    verify_backup,
    verify_backup_with_credentials,
)
from posixlake.backup import BackupCorrupted, BackupMetadata, RestoreResult, VerifyReport
from posixlake.database import Credentials, DatabaseOps, Optimizer
from posixlake.errors import (
    AlreadyExists,
    AuthenticationError,
    CommitConflict,
    DeltaLakeError,
    DuplicateKeyError,
    InvalidOperation,
    IoError,
    NetworkError,
    NotFound,
    PermissionDenied,
    PosixLakeError,
    QueryError,
    SchemaError,
    SerializationError,
    StorageError,
    TableExists,
    TimeoutError,
    UnknownColumns,
    VersionError,
    VersionNotFound,
)
from posixlake.result import QueryResult, ReplaceResult, Row, WriteResult
from posixlake.security import AuditEvent, UserInfo
from posixlake.storage import AzureConfig, S3Config
from posixlake.types import (
    CommitInfo,
    DataSkippingStats,
    Field,
    HealthStatus,
    MergeMetrics,
    Metrics,
    OptimizeResult,
    Schema,
    VacuumResult,
)

if TYPE_CHECKING:
    from nfs.table.server import TableNfsServer as NfsServer

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "AuditEvent",
    "AuthenticationError",
    "AzureConfig",
    "BackupCorrupted",
    "BackupMetadata",
    "CommitConflict",
    "CommitInfo",
    "Credentials",
    "DataSkippingStats",
    "DatabaseOps",
    "DeltaLakeError",
    "DuplicateKeyError",
    "Field",
    "HealthStatus",
    "InvalidOperation",
    "IoError",
    "MergeMetrics",
    "Metrics",
    "NetworkError",
    "NfsServer",
    "NotFound",
    "OptimizeResult",
    "Optimizer",
    "PermissionDenied",
    "PosixLakeError",
    "QueryError",
    "QueryResult",
    "ReplaceResult",
    "RestoreResult",
    "Row",
    "S3Config",
    "Schema",
    "SchemaError",
    "SerializationError",
    "StorageError",
    "TableExists",
    "TimeoutError",
    "UnknownColumns",
    "UserInfo",
    "VacuumResult",
    "VerifyReport",
    "VersionError",
    "VersionNotFound",
    "WriteResult",
    "__version__",
    "get_backup_metadata",
    "get_backup_metadata_with_credentials",
    "restore",
    "restore_to_transaction",
    "restore_to_transaction_with_credentials",
    "restore_with_credentials",
    "verify_backup",
    "verify_backup_with_credentials",
]


def __getattr__(name: str) -> Any:
    """Load ``NfsServer`` lazily: posixlake never imports nfs at module load."""
    if name == "NfsServer":
        from nfs.table.server import TableNfsServer

        return TableNfsServer
    raise AttributeError(f"module 'posixlake' has no attribute {name!r}")
