"""The Delta log layer: the only package that imports ``deltalake``."""

from posixlake.delta._log import DeltaLog, plain_types, quote_ident, translate

__all__ = ["DeltaLog", "plain_types", "quote_ident", "translate"]
