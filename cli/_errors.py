"""Error messages in the words of the command line.

The library's messages name Python arguments (``overwrite=True``, ``upsert=True``); at
the CLI boundary (``cli.main``) they are rewritten to name the flags that do the same.
Each rewrite here has a test in tests/cli/test_errors.py that runs the command and reads
the message, so a change of the library's wording shows up there.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["cli_words"]

_REWRITES: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"\(pass overwrite=True to replace it\)"), "(use --overwrite to replace it)"),
    (
        re.compile(r"use merge, or insert\(\.\.\., upsert=True\), to update rows"),
        "use `posixlake merge`, or `posixlake insert --upsert`, to update rows",
    ),
    (re.compile(r"pass key= or set a primary key"), "use --key COLS"),
    (re.compile(r"pass enforce_retention_duration=False"), "use --no-enforce-retention"),
    (re.compile(r"run (\w+) statements with db\.sql\(\.\.\.\)"), r"run \1 with `posixlake sql`"),
    (re.compile(r"do not also pass version= or as_of="), "do not also give --version or --as-of"),
    (
        re.compile(r"restore_version needs a version or as_of=, not both"),
        "give --version or --as-of",
    ),
)


def cli_words(message: str) -> str:
    """Return ``message`` with Python argument names replaced by the CLI flags."""
    for pattern, replacement in _REWRITES:
        message = pattern.sub(replacement, message)
    return message
