"""The Delta log layer: the only package that imports ``deltalake``."""

from posixlake.delta._log import DeltaLog, plain_types, quote_ident, translate
from posixlake.delta._rows import RowsReplaced, replace_rows

__all__ = ["DeltaLog", "RowsReplaced", "plain_types", "quote_ident", "replace_rows", "translate"]
