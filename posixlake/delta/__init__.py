"""The Delta log layer: the only package that imports ``deltalake``."""

from posixlake.delta._arrow import plain_types
from posixlake.delta._commit import WrittenFile, commit_files, create_with_files, file_stats
from posixlake.delta._log import DeltaLog
from posixlake.delta._rows import RowsReplaced, replace_rows
from posixlake.delta._snapshot import DataFile, Snapshot, snapshot_for_files, snapshot_of
from posixlake.delta._translate import quote_ident, translate

__all__ = [
    "DataFile",
    "DeltaLog",
    "RowsReplaced",
    "Snapshot",
    "WrittenFile",
    "commit_files",
    "create_with_files",
    "file_stats",
    "plain_types",
    "quote_ident",
    "replace_rows",
    "snapshot_for_files",
    "snapshot_of",
    "translate",
]
