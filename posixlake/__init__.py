"""posixlake: Delta Lake tables you can use from Python, Spark and plain Unix tools.

>>> from posixlake import DatabaseOps, Schema, Field
>>> db = DatabaseOps.create("/tmp/lake", Schema([Field("id", "Int64"), Field("name", "String")]), engine="local")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    TimeoutError,
    VersionError,
)
from posixlake.result import QueryResult
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
    from nfs.server import NfsServer

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
    "RestoreResult",
    "S3Config",
    "Schema",
    "SchemaError",
    "SerializationError",
    "StorageError",
    "TimeoutError",
    "UserInfo",
    "VacuumResult",
    "VerifyReport",
    "VersionError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """Load ``NfsServer`` lazily: posixlake never imports nfs at module load."""
    if name == "NfsServer":
        from nfs.server import NfsServer

        return NfsServer
    raise AttributeError(f"module 'posixlake' has no attribute {name!r}")
