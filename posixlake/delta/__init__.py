"""The Delta log layer: the only package that imports ``deltalake``."""

from posixlake.delta._arrow import plain_types
from posixlake.delta._commit import WrittenFile, commit_files, create_with_files, file_stats
from posixlake.delta._files import (
    LOG_DIR,
    FileSpan,
    TableFiles,
    is_commit,
    log_entry_version,
    replay_start,
    table_files,
)
from posixlake.delta._log import DeltaLog
from posixlake.delta._rows import RowsReplaced, replace_rows
from posixlake.delta._snapshot import (
    DataFile,
    FileListing,
    Snapshot,
    snapshot_for_files,
    snapshot_of,
    snapshot_since,
)
from posixlake.delta._translate import quote_ident, translate
from posixlake.delta.handle import LogHandle, loaded_log, log_at

__all__ = [
    "LOG_DIR",
    "DataFile",
    "DeltaLog",
    "FileListing",
    "FileSpan",
    "LogHandle",
    "RowsReplaced",
    "Snapshot",
    "TableFiles",
    "WrittenFile",
    "commit_files",
    "create_with_files",
    "file_stats",
    "is_commit",
    "loaded_log",
    "log_at",
    "log_entry_version",
    "plain_types",
    "quote_ident",
    "replace_rows",
    "replay_start",
    "snapshot_for_files",
    "snapshot_of",
    "snapshot_since",
    "table_files",
    "translate",
]
