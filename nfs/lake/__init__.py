"""The lake face: every Delta table under a root as a directory (see `nfs.lake.lakefs`)."""

from nfs.lake.discovery import discover_tables, is_table
from nfs.lake.lakefs import LakeFs, LakeTable, TableOpener

__all__ = ["LakeFs", "LakeTable", "TableOpener", "discover_tables", "is_table"]
