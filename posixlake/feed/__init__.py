"""Change feed: follow a table's commits as they land (``DatabaseOps.subscribe``).

Each commit becomes one :class:`ChangeBatch` (version, commit time, operation, and the
changed rows as Arrow with ``_change_type``). The rows come from the table's change data
feed where it records one, and otherwise from the files the commit removed and added
(see :mod:`posixlake.feed._read` for the cost). docs/design.md, "Change feed", has the
design.
"""

from posixlake.feed._feed import ChangeFeed, open_feed
from posixlake.feed._read import (
    CHANGE_TYPE,
    CHANGE_TYPES,
    ChangeBatch,
    ChangesExpired,
    diff_rows,
)

__all__ = [
    "CHANGE_TYPE",
    "CHANGE_TYPES",
    "ChangeBatch",
    "ChangeFeed",
    "ChangesExpired",
    "diff_rows",
    "open_feed",
]
